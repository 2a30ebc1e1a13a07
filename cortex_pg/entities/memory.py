"""EntityMemory: calute's entity memory API on the store (notes with memory_type ``"entity"``).

Differences from calute's in-memory class, all on purpose:
    * state lives in PostgreSQL (``cortex.notes`` + the entity tables) and survives restarts;
    * ``get_entity_info`` returns a fresh dict (calute returned its live internal dict) and
      adds ``name`` and ``kind``; ``get_related_entities`` never contains the start entity;
    * ``update`` merges metadata (calute replaced it) and re-extracts on a content change;
    * ``delete(filters=...)`` works (calute's always deleted 0) and adjusts frequencies;
    * ``search`` with no query entities uses full-text search and never returns everything;
    * ``max_items`` and ``enable_embeddings`` are kept for compatibility only (calute did not
      enforce ``max_items`` either; the store always embeds notes).
Filters are matched against the note's metadata (JSONB containment); ``agent_id``,
``task_id`` and ``conversation_id`` given to :meth:`EntityMemory.save` are kept there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import text

from cortex_pg.compat.memory_item import ITEM_FIELDS, MemoryItem, item_from_note
from cortex_pg.entities.extract import LlmExtract, extract
from cortex_pg.entities.repository import EntityStore, entity_name
from cortex_pg.errors import NotFoundError, ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore, validation
from cortex_pg.store.memory_store import note_from_row
from cortex_pg.store.records import Note

__all__ = ["MEMORY_TYPE", "EntityMemory", "MemoryItem", "item_from_note"]

MEMORY_TYPE = "entity"


class EntityMemory:
    """Entities and relationships extracted from saved texts, kept as a graph in PostgreSQL.

    Args:
        store: the :class:`MemoryStore` to use; default ``MemoryStore.open()`` (embedded server).
        max_items, enable_embeddings: accepted for calute compatibility, not used.
        user_id / session_id: the tenant and session written and read (default ``"default"``).
        llm_extract: optional ``text -> dict`` for LLM extraction (see
            :mod:`cortex_pg.entities.extract`); default: offline heuristics.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        max_items: int = 5000,
        enable_embeddings: bool = False,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        llm_extract: LlmExtract | None = None,
    ) -> None:
        self.store = store if store is not None else MemoryStore.open()
        self.graph = EntityStore(self.store.engine)
        self.max_items = max_items
        self.enable_embeddings = enable_embeddings
        self.user_id = validation.scope_id(user_id, "user_id")
        self.session_id = validation.scope_id(session_id, "session_id")
        self.llm_extract = llm_extract

    # ------------------------------------------------------------------ calute API
    def save(
        self,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        entities: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> MemoryItem:
        """Store a text, extract its entities (unless ``entities`` is given) and relations.

        ``metadata["entities"]`` is set to the entity names. ``agent_id``, ``task_id`` and
        ``conversation_id`` keyword arguments are kept in the metadata; ``importance`` (in
        [0, 1]) and ``time`` (the memory's own time) go to the note. Saving the same content
        again returns the same note and counts nothing twice (and repairs a note whose entity
        indexing was interrupted).

        Raises:
            ValidationError: bad content, metadata or keyword argument.
        """
        content = validation.content(content)
        ex = extract(content, entities=list(entities) if entities else None, llm_extract=self.llm_extract)
        meta = dict(validation.metadata(metadata))
        meta.update({k: kwargs[k] for k in ITEM_FIELDS if kwargs.get(k) is not None})
        meta["entities"] = ex.names
        nid = self.store.add(
            content,
            user_id=self.user_id,
            session_id=self.session_id,
            metadata=meta,
            memory_type=MEMORY_TYPE,
            importance=kwargs.get("importance", 0.5),
            time=kwargs.get("time"),
            to_stm=False,
        )
        note = self.store.get(nid, user_id=self.user_id)
        self.graph.index_note(self.user_id, nid, note.content, ex, seen_at=note.created_at)
        return item_from_note(note)

    def search(
        self,
        query: str,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        entity_filter: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> list[MemoryItem]:
        """Saved texts about the query's entities (``entity_filter`` or those extracted from ``query``).

        Score (``relevance_score``) = fraction of the query entities the text mentions, in
        (0, 1], computed in SQL; best first, then newest. With no query entities: full-text
        search on the query's words, score = ts_rank_cd / (1 + ts_rank_cd) in [0, 1); a blank
        query returns [] (never "everything").
        """
        lim = validation.limit(limit)
        targets = [entity_name(e, "entity_filter") for e in entity_filter] if entity_filter else []
        if not targets and isinstance(query, str) and query.strip():
            targets = extract(query, llm_extract=self.llm_extract).names
        if targets:
            rows = self.graph.notes_mentioning(
                self.user_id, targets, limit=lim, memory_type=MEMORY_TYPE, filters=filters
            )
        elif isinstance(query, str) and query.strip():
            rows = self.graph.notes_matching_text(
                self.user_id, query, limit=lim, memory_type=MEMORY_TYPE, filters=filters
            )
        else:
            return []
        return [item_from_note(note_from_row(r), float(r["score"])) for r in rows]

    def retrieve(
        self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None, limit: int = 10
    ) -> MemoryItem | list[MemoryItem] | None:
        """One item by id (None when absent), or up to ``limit`` items matching ``filters``, newest first."""
        if memory_id is not None:
            note = self._note(memory_id)
            return None if note is None else item_from_note(note)
        rows = self._select(
            "SELECT {cols}, 'ltm' AS memory_tier FROM cortex.notes n WHERE {where} "
            "ORDER BY n.created_at DESC, n.id LIMIT :limit",
            filters,
            limit=validation.limit(limit),
        )
        return [item_from_note(note_from_row(r)) for r in rows]

    def update(self, memory_id: str, updates: Mapping[str, Any]) -> bool:
        """Change an item: ``content`` (entities re-extracted), ``metadata`` (merged, not
        replaced), ``entities`` (explicit names), ``importance``. Returns False when absent.

        Raises:
            ValidationError: an unknown key or a bad value.
        """
        unknown = set(updates) - {"content", "metadata", "entities", "importance"}
        if unknown:
            raise ValidationError(
                sorted(unknown)[0], "not updatable; use content, metadata, entities, importance"
            )
        note = self._note(memory_id)
        if note is None:
            return False
        content = updates.get("content", note.content)
        fields: dict[str, Any] = {}
        meta = dict(validation.metadata(updates.get("metadata")))
        reindex = "content" in updates or "entities" in updates
        ex = None
        if reindex:
            names = updates.get("entities")
            ex = extract(content, entities=list(names) if names else None, llm_extract=self.llm_extract)
            meta["entities"] = ex.names
            fields["content"] = content
        if meta:
            fields["metadata"] = meta
        if "importance" in updates:
            fields["importance"] = updates["importance"]
        if fields:
            self.store.update(note.id, user_id=self.user_id, **fields)
        if ex is not None:
            self.graph.index_note(self.user_id, note.id, content, ex, seen_at=note.created_at, replace=True)
        return True

    def delete(self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete one item by id, or every item matching ``filters`` (non-empty). Returns the count.

        Mentions, frequencies and relationships follow (trigger ``notes_forget_entities``).
        No id and no filters deletes nothing (use :meth:`clear`).
        """
        if memory_id is not None:
            note = self._note(memory_id)
            return int(note is not None and self.store.delete(note.id, user_id=self.user_id))
        if not filters:
            return 0
        rows = self._select(
            "WITH l AS (DELETE FROM cortex.notes n WHERE {where} RETURNING n.id), "
            "s AS (DELETE FROM cortex.stm_notes t WHERE t.user_id = :user_id AND t.id IN (SELECT id FROM l)) "
            "SELECT count(*) AS n FROM l",
            filters,
            write=True,
        )
        return int(rows[0]["n"])

    def clear(self) -> None:
        """Delete every entity item of this user; entities no longer mentioned go with them."""
        self._select(
            "WITH l AS (DELETE FROM cortex.notes n WHERE {where} RETURNING n.id), "
            "s AS (DELETE FROM cortex.stm_notes t WHERE t.user_id = :user_id AND t.id IN (SELECT id FROM l)) "
            "SELECT count(*) AS n FROM l",
            None,
            write=True,
        )

    def get_entity_info(self, entity: str, *, as_of: datetime | str | None = None) -> dict[str, Any]:
        """What is known about an entity (looked up by normalised name).

        Returns:
            ``name``, ``kind``, ``first_seen``, ``last_seen`` (aware UTC), ``frequency`` (notes
            mentioning it), ``contexts`` (last 10 snippets, <= 100 characters), ``mentions``
            (note ids, oldest first), ``relationships`` (facts valid at ``as_of``, default now:
            ``{"relation", "target"}``, incoming ones as ``{"relation": "inverse_<relation>",
            "target": <source>}``). For an unknown entity only ``mentions`` and
            ``relationships``, both empty (as calute).
        """
        record = self.graph.entity(self.user_id, entity)
        if record is None:
            return {"mentions": [], "relationships": []}
        info: dict[str, Any] = {
            "name": record.name,
            "kind": record.kind,
            "first_seen": record.first_seen,
            "last_seen": record.last_seen,
            "frequency": record.frequency,
            "contexts": record.contexts,
            "mentions": record.mentions,
            "relationships": [],
        }
        for rel in self.graph.relationships(self.user_id, record.name, as_of=as_of):
            if rel.source == record.name:
                info["relationships"].append({"relation": rel.relation, "target": rel.target})
            else:
                info["relationships"].append({"relation": f"inverse_{rel.relation}", "target": rel.source})
        return info

    def get_related_entities(self, entity: str, max_depth: int = 2) -> set[str]:
        """Names of the entities within ``max_depth`` hops (either direction), the start excluded."""
        return {r.name for r in self.graph.related_entities(self.user_id, entity, max_depth)}

    def entity_graph(self, **kwargs: Any) -> Any:
        """This user's graph as a ``networkx.MultiDiGraph`` (see :meth:`EntityStore.entity_graph`)."""
        return self.graph.entity_graph(self.user_id, **kwargs)

    def __len__(self) -> int:
        rows = self._select("SELECT count(*) AS n FROM cortex.notes n WHERE {where}", None)
        return int(rows[0]["n"])

    def __repr__(self) -> str:
        return f"EntityMemory(user_id={self.user_id!r}, max={self.max_items})"

    # ------------------------------------------------------------------ helpers
    def _note(self, memory_id: object) -> Note | None:
        try:
            note = self.store.get(validation.note_id(memory_id, "memory_id"), user_id=self.user_id)
        except NotFoundError:
            return None
        return note if note.memory_type == MEMORY_TYPE else None

    def _select(
        self, template: str, filters: Mapping[str, Any] | None, *, write: bool = False, **params: Any
    ) -> list[dict[str, Any]]:
        import json

        from cortex_pg.entities.sql import N_COLUMNS

        where = "n.user_id = :user_id AND n.memory_type = :mt AND n.metadata @> CAST(:filters AS jsonb)"
        statement = template.format(cols=N_COLUMNS, where=where)
        values = {
            "user_id": self.user_id,
            "mt": MEMORY_TYPE,
            "filters": json.dumps(validation.metadata(filters, "filters")),
            **params,
        }
        ctx = self.store.engine.begin() if write else self.store.engine.connect()
        with translate_db_errors(), ctx as conn:
            return [dict(r) for r in conn.execute(text(statement), values).mappings().all()]
