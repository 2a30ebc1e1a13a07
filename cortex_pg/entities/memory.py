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
Filters are the package's one filter language (:mod:`cortex_pg.store.filters`, compiled by
``cortex.compile_filter``) with calute's item field names: ``memory_type``, ``agent_id``,
``task_id``, ``conversation_id``, ``user_id``, ``memory_id``, ``timestamp``, ... and metadata
keys (``agent_id``, ``task_id`` and ``conversation_id`` given to :meth:`EntityMemory.save` are
kept in the metadata); a filter that could only match nothing because of how it is written
raises. An id that names no item of this memory (malformed or not) gives None from
``retrieve``, False from ``update`` and 0 from ``delete``, as in calute.

Scope: an EntityMemory built with a ``session_id`` (as :class:`CortexMemory` builds its own,
``"<scope>/entities"``) reads, counts, deletes and clears only the items of that
``(user_id, session_id)``, and its entity views (``get_entity_info``,
``get_related_entities``, ``entity_graph``) count only the mentions and facts said by those
items. Without one it writes to session ``"default"`` and reads every session of the user.
The entities and relationships themselves are stored per user: a single-valued fact said in
one session still closes the contradicting fact said in another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.compat import item_views
from cortex_pg.compat.memory_item import ITEM_FIELDS, MemoryItem, check_item_fields, item_from_note
from cortex_pg.compat.views import ReadOnlyDict, ReadOnlyList, SqlMapping
from cortex_pg.db.retry import retry_transient
from cortex_pg.entities import sql as entity_sql
from cortex_pg.entities.extract import LlmExtract, extract
from cortex_pg.entities.repository import EntityStore, entity_name
from cortex_pg.entities.sql import N_COLUMNS
from cortex_pg.errors import ConflictError, NotFoundError, ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore
from cortex_pg.store import sql as store_sql
from cortex_pg.store.filters import clean_filters_given, compile_where, item_filter
from cortex_pg.store.memory_store import facade_store, note_from_row, validation
from cortex_pg.store.records import Note

__all__ = ["MEMORY_TYPE", "EntityMemory", "MemoryItem", "item_from_note"]

MEMORY_TYPE = "entity"


class EntityMemory:
    """Entities and relationships extracted from saved texts, kept as a graph in PostgreSQL.

    Args:
        store: the :class:`MemoryStore` to use; default ``MemoryStore.open()`` (embedded server).
        max_items, enable_embeddings: accepted for calute compatibility, not used.
        user_id: the tenant (default ``"default"``).
        session_id: the session written and the only one read (see the module doc); None:
            write to ``"default"``, read every session of the user.
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
        self.store = facade_store(store, type(self).__name__)
        self.graph = EntityStore(self.store.engine)
        self.max_items = max_items
        self.enable_embeddings = enable_embeddings
        self.user_id = validation.scope_id(user_id, "user_id")
        self.session_id = validation.scope_id(session_id, "session_id")
        #: the session every read, count and delete is limited to; None = the whole user
        self.scope_session: str | None = validation.optional_scope_id(session_id, "session_id")
        self.llm_extract = llm_extract

    # ------------------------------------------------------------------ calute API
    @retry_transient
    def save(
        self,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        entities: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> MemoryItem:
        """Store a text, extract its entities (unless ``entities`` is given) and relations.

        ``entities``: explicit entity names, a list (tuple, set) of non-blank strings or one
        string, which is one entity (``"Xavier"``, not its letters); an empty list extracts.
        ``metadata["entities"]`` is set to the entity names. ``agent_id``, ``task_id`` and
        ``conversation_id`` keyword arguments are kept in the metadata; ``importance`` (in
        [0, 1]) and ``time`` (the memory's own time) go to the note. Saving the same content
        again returns the same note and counts nothing twice (and repairs a note whose entity
        indexing was interrupted).

        Raises:
            ValidationError: bad content, metadata, ``entities`` (another type, a blank or
                non-string name) or keyword argument.
            ConflictError: the session already holds this text as another kind of note (a
                plain note, another store's item); nothing is recorded.
        """
        content = validation.content(content)
        names = entity_names(entities)
        ex = extract(content, entities=names or None, llm_extract=self.llm_extract)
        meta = dict(validation.metadata(metadata))
        check_item_fields(meta, "metadata.")
        given = {k: kwargs[k] for k in ITEM_FIELDS if kwargs.get(k) is not None}
        check_item_fields(given)
        meta.update(given)
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
        if note.memory_type != MEMORY_TYPE:
            # the store deduplicates by (user, session, content): the text is another kind of note
            # of this session (a plain note, another store's item), which this memory does not hold
            raise ConflictError.other_kind(note.session_id, nid, MEMORY_TYPE)
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

        ``entity_filter`` takes names as :meth:`save`'s ``entities`` does (one string is one name).

        Score (``relevance_score``) = fraction of the query entities the text mentions, in
        (0, 1], computed in SQL; best first, then newest. With no query entities: full-text
        search on the query's words, score = ts_rank_cd / (1 + ts_rank_cd) in [0, 1); a blank
        query returns [] (never "everything").

        Raises:
            ValidationError: ``query`` not a string, or longer than 10,000 characters, holding
                NUL or not valid Unicode (field ``query``); a bad ``limit``, ``entity_filter`` or
                filter.
        """
        lim = validation.limit(limit)
        query = validation.query_or_blank(query)
        targets = entity_names(entity_filter, "entity_filter")
        if not targets and query:
            targets = extract(query, llm_extract=self.llm_extract).names
        if targets:
            rows = self.graph.notes_mentioning(
                self.user_id,
                targets,
                limit=lim,
                memory_type=MEMORY_TYPE,
                filters=item_filter(filters),
                session_id=self.scope_session,
            )
        elif query:
            rows = self.graph.notes_matching_text(
                self.user_id,
                query,
                limit=lim,
                memory_type=MEMORY_TYPE,
                filters=item_filter(filters),
                session_id=self.scope_session,
            )
        else:
            return []
        return [item_from_note(note_from_row(r), float(r["score"])) for r in rows]

    def retrieve(
        self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None, limit: int = 10
    ) -> MemoryItem | list[MemoryItem] | None:
        """One item by id (None when no item of this memory has it, malformed ids included), or
        up to ``limit`` items matching ``filters``, newest first.

        Raises:
            ValidationError: a bad ``limit`` or filter (field ``filters``).
        """
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

        An id that names no item of this memory (malformed ids included) gives False.

        Raises:
            ValidationError: ``updates`` not a dict, an unknown key or a bad value.
        """
        if not isinstance(updates, Mapping):
            raise ValidationError("updates", f"must be a dict, got {type(updates).__name__}")
        note = self._note(memory_id)
        if note is None:
            return False
        unknown = set(updates) - {"content", "metadata", "entities", "importance"}
        if unknown:
            raise ValidationError(
                sorted(unknown)[0], "not updatable; use content, metadata, entities, importance"
            )
        content = updates.get("content", note.content)
        fields: dict[str, Any] = {}
        meta = dict(validation.metadata(updates.get("metadata")))
        check_item_fields(meta, "updates.metadata.")
        reindex = "content" in updates or "entities" in updates
        ex = None
        if reindex:
            names = entity_names(updates.get("entities"))
            ex = extract(content, entities=names or None, llm_extract=self.llm_extract)
            meta["entities"] = ex.names
            fields["content"] = content
        if meta:
            fields["metadata"] = meta
        if "importance" in updates:
            fields["importance"] = updates["importance"]

        def index(conn: Connection) -> None:  # in the update's transaction: a killed process
            # left the new text with the old text's entities
            self.graph.index_note(
                self.user_id, note.id, content, ex, seen_at=note.created_at, replace=True, conn=conn
            )

        if fields:
            self.store.update(
                note.id, user_id=self.user_id, in_same_transaction=None if ex is None else index, **fields
            )
        return True

    def delete(self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete one item by id, or every item matching ``filters`` (non-empty). Returns the count.

        Mentions, frequencies and relationships follow (trigger ``notes_forget_entities``).
        No id and no filters (or filters whose keys are all unset) deletes nothing (use
        :meth:`clear`); an id that names no item of this memory deletes nothing (0).

        Raises:
            ValidationError: a bad filter (field ``filters``).
        """
        if memory_id is not None:
            note = self._note(memory_id)
            return int(note is not None and self.store.delete(note.id, user_id=self.user_id))
        if not clean_filters_given(filters):
            return 0
        return self._delete_items(filters)

    def clear(self) -> None:
        """Delete every entity item of this user (of this session, when the memory has one);
        entities no longer mentioned go with them."""
        self._delete_items(None)

    @retry_transient  # one transaction of its own
    def _delete_items(self, filters: Mapping[str, Any] | None) -> int:
        """Delete this memory's items matching ``filters`` (all for None) and return their
        number: the scope locks of their sessions first, then the items (``DELETE_ITEMS``), then,
        in the same transaction, the context embeddings of the notes that followed them in their
        sessions (as :meth:`MemoryStore.delete` writes its note's successor's)."""
        values = {"user_id": self.user_id, "mt": MEMORY_TYPE, "session_id": self.scope_session}
        with translate_db_errors(), self.store.engine.begin() as conn:
            where = f"{self.WHERE} AND ({compile_where(conn, item_filter(filters))})"
            sessions = list(
                conn.execute(text(entity_sql.ITEM_SESSIONS.format(where=where)), values).scalars()
            )
            if not sessions:
                return 0
            conn.execute(
                text(store_sql.LOCK_SCOPES), {"users": [self.user_id] * len(sessions), "sessions": sessions}
            )
            statement = entity_sql.DELETE_ITEMS.format(where=where)
            gone = conn.execute(text(statement), {**values, "sessions": sessions}).all()
            self.store.contexts_after_delete(conn, self.user_id, gone)
        return len(gone)

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
        record = self.graph.entity(self.user_id, entity, session_id=self.scope_session)
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
        for rel in self.graph.relationships(
            self.user_id, record.name, as_of=as_of, session_id=self.scope_session
        ):
            if rel.source == record.name:
                info["relationships"].append({"relation": rel.relation, "target": rel.target})
            else:
                info["relationships"].append({"relation": f"inverse_{rel.relation}", "target": rel.source})
        return info

    def get_related_entities(self, entity: str, max_depth: int = 2) -> set[str]:
        """Names of the entities within ``max_depth`` hops (either direction), the start excluded."""
        related = self.graph.related_entities(self.user_id, entity, max_depth, session_id=self.scope_session)
        return {r.name for r in related}

    def entity_graph(self, **kwargs: Any) -> Any:
        """This user's (session's) graph as a ``networkx.MultiDiGraph`` (see
        :meth:`EntityStore.entity_graph`)."""
        kwargs.setdefault("session_id", self.scope_session)
        return self.graph.entity_graph(self.user_id, **kwargs)

    # ------------------------------------------------------------------ calute attributes
    WRITE_METHODS = "EntityMemory.save / update / delete / clear"

    @property
    def entities(self) -> SqlMapping:
        """calute's ``entities``: entity name -> ``{"name", "kind", "first_seen", "last_seen",
        "frequency", "contexts"}`` (as :meth:`get_entity_info`, without mentions and
        relationships), for every entity the items mention (this session's, when the memory has
        one), oldest first. A read-only view read from SQL on every access (any process's
        writes are seen); a key is looked up by normalised name (``"alice"`` finds ``"Alice"``).
        Writing raises :class:`~cortex_pg.errors.ReadOnlyError` naming the methods to use."""
        keep = ("name", "kind", "first_seen", "last_seen", "frequency", "contexts")

        def get(name: str) -> ReadOnlyDict | None:
            info = self._entity_row(name)
            return (
                None
                if info is None
                else ReadOnlyDict({k: info[k] for k in keep}, "EntityMemory.entities", self.WRITE_METHODS)
            )

        def load() -> dict[str, Any] | None:
            rows = self._entity_table()
            return {
                r["name"]: ReadOnlyDict({k: r[k] for k in keep}, "EntityMemory.entities", self.WRITE_METHODS)
                for r in rows
            }

        return SqlMapping("EntityMemory.entities", self.WRITE_METHODS, self._entity_names, get, load)

    @property
    def entity_mentions(self) -> SqlMapping:
        """calute's ``entity_mentions``: entity name -> ids of the items that mention it (UUID
        strings, oldest first); keys as :attr:`entities`. A read-only view of SQL (see there)."""
        view = "EntityMemory.entity_mentions"

        def get(name: str) -> ReadOnlyList | None:
            info = self._entity_row(name)
            return None if info is None else ReadOnlyList(info["mentions"], view, self.WRITE_METHODS)

        def load() -> dict[str, Any]:
            return {
                r["name"]: ReadOnlyList(r["mentions"], view, self.WRITE_METHODS) for r in self._entity_table()
            }

        return SqlMapping(view, self.WRITE_METHODS, self._entity_names, get, load)

    @property
    def relationships(self) -> SqlMapping:
        """calute's ``relationships``: relation -> ``[(source, target), ...]``, the facts valid
        now (one pair per fact, however many items state it; a single-valued fact replaced by a
        later one is gone), oldest first; this session's facts when the memory has one. A
        read-only view of SQL (see :attr:`entities`)."""
        view = "EntityMemory.relationships"

        def load() -> dict[str, Any]:
            grouped: dict[str, list[tuple[str, str]]] = {}
            for rel in self.graph.relationships(self.user_id, session_id=self.scope_session):
                grouped.setdefault(rel.relation, []).append((rel.source, rel.target))
            return {k: ReadOnlyList(v, view, self.WRITE_METHODS) for k, v in grouped.items()}

        return SqlMapping(view, self.WRITE_METHODS, lambda: list(load()), lambda k: load().get(k), load)

    def _entity_names(self) -> list[str]:
        with translate_db_errors(), self.store.engine.connect() as conn:
            rows = conn.execute(
                text(entity_sql.ENTITY_NAMES), {"user_id": self.user_id, "session_id": self.scope_session}
            )
            return [r.name for r in rows]

    def _entity_row(self, name: str) -> dict[str, Any] | None:
        try:
            record = self.graph.entity(self.user_id, name, session_id=self.scope_session)
        except ValidationError:
            return None
        if record is None or record.frequency <= 0:
            return None
        return {
            "name": record.name,
            "kind": record.kind,
            "first_seen": record.first_seen,
            "last_seen": record.last_seen,
            "frequency": record.frequency,
            "contexts": list(record.contexts),
            "mentions": list(record.mentions),
        }

    def _entity_table(self) -> list[dict[str, Any]]:
        if self.scope_session is not None:
            rows = [self._entity_row(n) for n in self._entity_names()]
            return [r for r in rows if r is not None]
        with translate_db_errors(), self.store.engine.connect() as conn:
            rows = conn.execute(text(entity_sql.ENTITY_TABLE), {"user_id": self.user_id}).mappings().all()
        return [{**dict(r), "contexts": list(r["contexts"]), "mentions": list(r["mentions"])} for r in rows]

    # ------------------------------------------------------------------ calute Memory base
    def get_context(self, limit: int = 10, format_type: str = "text") -> str:
        """The newest ``limit`` items, oldest first, in calute's formats (``text``, ``json``,
        ``markdown``; see :func:`~cortex_pg.compat.item_views.render_context`).

        Raises:
            ValidationError: ``limit`` not a positive integer, or an unknown ``format_type``.
        """
        lim = validation.limit(limit)
        fmt = item_views.format_type(format_type)
        rows = self._select(
            "SELECT {cols}, 'ltm' AS memory_tier FROM cortex.notes n WHERE {where} "
            "ORDER BY n.created_at DESC, n.id DESC LIMIT :limit",
            None,
            limit=lim,
        )
        return item_views.render_context([item_from_note(note_from_row(r)) for r in reversed(rows)], fmt)

    def get_statistics(self) -> dict[str, Any]:
        """calute's statistics, counted in SQL: ``total_items``, ``max_items``, ``memory_types``,
        ``unique_agents``, ``unique_users``, ``unique_conversations`` (see
        :func:`~cortex_pg.compat.item_views.item_statistics`)."""
        rows = f"SELECT {item_views.ROW_COLUMNS} FROM cortex.notes n WHERE {self.WHERE} AND n.merged_into IS NULL"
        params = {"user_id": self.user_id, "mt": MEMORY_TYPE, "session_id": self.scope_session}
        with self.store.engine.connect() as conn:
            stats = item_views.item_statistics(conn, rows, params)
        return {"max_items": self.max_items, **stats}

    def __len__(self) -> int:
        rows = self._select("SELECT count(*) AS n FROM cortex.notes n WHERE {where}", None)
        return int(rows[0]["n"])

    def __repr__(self) -> str:
        return (
            f"EntityMemory(user_id={self.user_id!r}, session_id={self.scope_session!r}, max={self.max_items})"
        )

    # ------------------------------------------------------------------ helpers
    def _note(self, memory_id: object) -> Note | None:
        """The item with this id, or None when the id names no item of this memory (malformed,
        another tenant's, another memory type or session)."""
        try:
            note = self.store.get(validation.note_id(memory_id, "memory_id"), user_id=self.user_id)
        except (NotFoundError, ValidationError):
            return None
        if note.memory_type != MEMORY_TYPE:
            return None
        if self.scope_session is not None and note.session_id != self.scope_session:
            return None
        return note

    WHERE = (
        "n.user_id = :user_id AND n.memory_type = :mt"
        " AND (CAST(:session_id AS text) IS NULL OR n.session_id = :session_id)"
    )

    def _select(
        self, template: str, filters: Mapping[str, Any] | None, **params: Any
    ) -> list[dict[str, Any]]:
        """Run ``template`` with ``{cols}`` = the note columns and ``{where}`` = this memory's
        items matching ``filters`` (compiled by :func:`~cortex_pg.store.filters.compile_where`)."""
        values = {"user_id": self.user_id, "mt": MEMORY_TYPE, "session_id": self.scope_session, **params}
        with translate_db_errors(), self.store.engine.connect() as conn:
            where = f"{self.WHERE} AND ({compile_where(conn, item_filter(filters))})"
            statement = template.format(cols=N_COLUMNS, where=where)
            return [dict(r) for r in conn.execute(text(statement), values).mappings().all()]


def entity_names(value: object, field: str = "entities") -> list[str]:
    """Explicit entity names: None -> [], one string -> that one name, a list / tuple / set
    of strings -> the names (blank-free, in order).

    Raises:
        ValidationError: another type (a dict, bytes, a number, ...), or a blank, non-string
            or over-long name.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [entity_name(value, field)]
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValidationError(field, f"must be a string or a list of strings, got {type(value).__name__}")
    items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
    return [entity_name(v, field) for v in items]
