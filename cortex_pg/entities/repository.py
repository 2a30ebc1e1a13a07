"""EntityStore: the knowledge graph (entities, mentions, relationships) of a MemoryStore's database.

Every method filters on ``user_id`` and runs in one transaction; errors leave through
:func:`~cortex_pg.errors.translate_db_errors`. Names are matched by
``cortex.normalize_entity_name`` (case- and whitespace-folded). "Valid now" facts are the
relationships with ``valid_from <= now < valid_to`` (``valid_to`` NULL = still valid);
``as_of`` asks about another instant.

Scope of facts: entities and relationships belong to the user, not to the session (scope)
of the note that states them. They describe one world, so a single-valued fact (works_at,
lives_in, reports_to) said in one session closes the same relation of the same source said
in another session of that user, as it would in the same session; other users are never
touched. The ``session_id`` of the reads selects the facts that a session's notes said and
then applies the same validity: a fact closed by another session's later note is history
in its own session too (``history=True`` or an earlier ``as_of`` shows it), and deleting
the closing note reopens it. This is the calute behaviour, kept on purpose: scoping facts
like their notes would let one user hold two current employers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, text

from cortex_pg.entities import sql
from cortex_pg.entities.extract import Extraction, fold
from cortex_pg.errors import CortexPGError, ValidationError, translate_db_errors
from cortex_pg.store import validation
from cortex_pg.store.filters import compile_where
from cortex_pg.temporal import parse_instant

if TYPE_CHECKING:
    import networkx

MAX_DEPTH = 10
SNIPPET_CHARS = 100


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """An entity as stored.

    Attributes:
        first_seen / last_seen: times (aware UTC) of the earliest / latest note mentioning it.
        frequency: number of notes that mention it.
        contexts: snippets (<= 100 characters) of the last 10 mentions, oldest first.
        mentions: ids (UUID strings) of the notes that mention it, oldest first.
    """

    name: str
    kind: str
    first_seen: datetime
    last_seen: datetime
    frequency: int
    contexts: list[str]
    mentions: list[str]


@dataclass(frozen=True, slots=True)
class RelationshipRecord:
    """A fact ``source --relation--> target``, valid in [valid_from, valid_to) (valid_to None = open).

    Attributes:
        weight: number of assertions (notes) behind the row.
        source_note_id: the first note that said it (UUID string), None when added from SQL.
    """

    source: str
    relation: str
    target: str
    weight: float
    valid_from: datetime
    valid_to: datetime | None
    source_note_id: str | None


@dataclass(frozen=True, slots=True)
class RelatedEntity:
    """An entity reached by :meth:`EntityStore.related_entities`; depth = hops on the shortest walk."""

    name: str
    kind: str
    depth: int


def snippet(content: str, offset: int | None, width: int = SNIPPET_CHARS) -> str:
    """Up to ``width`` characters of ``content`` around ``offset`` (from 40 characters before it)."""
    start = max(0, (offset or 0) - 40)
    return " ".join(content[start : start + width].split())[:width]


class EntityStore:
    """Entities, mentions and relationships on the engine of a :class:`~cortex_pg.store.MemoryStore`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # ------------------------------------------------------------------ writes
    def index_note(
        self,
        user_id: str,
        note_id: str | uuid.UUID,
        content: str,
        extraction: Extraction,
        *,
        seen_at: datetime | str | None = None,
        replace: bool = False,
        conn: Connection | None = None,
    ) -> list[str]:
        """Record what a note says: its entity mentions and relations (idempotent per note).

        Args:
            user_id: the note's tenant. note_id: the note's id (LTM or STM).
            content: the note's text (for the snippets stored in ``contexts``).
            extraction: entities and relations of the note (:func:`~cortex_pg.entities.extract.extract`).
            seen_at: the note's own time (aware, or naive = UTC); default now. Becomes the
                entities' first/last_seen and the relationships' ``valid_from``.
            replace: forget what this note said before (after a content change).
            conn: run inside this open transaction instead of a new one.

        Returns:
            The entity names recorded, as given in ``extraction``.

        Raises:
            ValidationError: bad user_id or note id.
        """
        uid = validation.scope_id(user_id, "user_id")
        nid = str(validation.note_id(note_id, "note_id"))
        at = parse_instant(seen_at, "seen_at") or datetime.now(UTC)
        mentions = [m for m in extraction.entities if m.name.strip() and len(m.name) <= 200]
        names = [m.name for m in mentions]
        rows = [
            {
                "name": m.name,
                "kind": m.kind,
                "char_offset": m.offset,
                "snippet": snippet(content, m.offset),
            }
            for m in mentions
        ]
        params = {"user_id": uid, "note_id": nid, "seen_at": at, "rows": json.dumps(rows)}
        with translate_db_errors(), self._tx(conn) as c:
            if replace:
                c.execute(text(sql.FORGET_NOTES), {"user_id": uid, "note_ids": [nid]})
            if rows:
                c.execute(text(sql.ENSURE_ENTITIES), params)
                c.execute(text(sql.ADD_MENTIONS), params)
            known = {fold(n) for n in names}
            relations = [
                r for r in extraction.relations if fold(r.source) in known and fold(r.target) in known
            ]
            for r in sorted(relations, key=lambda r: (fold(r.source), r.relation, fold(r.target))):
                c.execute(
                    text(sql.ASSERT_RELATIONSHIP),
                    {
                        "user_id": uid,
                        "source": r.source,
                        "relation": r.relation,
                        "target": r.target,
                        "seen_at": at,
                        "note_id": nid,
                        "single_valued": r.single_valued,
                    },
                )
        return names

    def forget_notes(self, user_id: str, note_ids: Iterable[str | uuid.UUID]) -> int:
        """Remove what these notes said (mentions, their share of counters and relationships).

        Deleting a note does this by itself (trigger); call it to re-extract a kept note.

        Returns:
            The number of mentions removed.
        """
        uid = validation.scope_id(user_id, "user_id")
        ids = [str(validation.note_id(n, "note_ids")) for n in note_ids]
        with translate_db_errors(), self.engine.begin() as c:
            return int(c.execute(text(sql.FORGET_NOTES), {"user_id": uid, "note_ids": ids}).scalar_one())

    # ------------------------------------------------------------------ reads
    def entity(self, user_id: str, name: str, *, session_id: str | None = None) -> EntityRecord | None:
        """The entity with this (normalised) name, or None.

        Args:
            session_id: count only the mentions by notes of this session (frequency, first /
                last seen, contexts, mentions); None when that session never mentions it.
        """
        uid, nm = validation.scope_id(user_id, "user_id"), entity_name(name)
        sid = validation.optional_scope_id(session_id, "session_id")
        statement = sql.ENTITY_INFO if sid is None else sql.ENTITY_INFO_IN_SESSION
        with translate_db_errors(), self.engine.connect() as c:
            row = (
                c.execute(text(statement), {"user_id": uid, "name": nm, "session_id": sid}).mappings().first()
            )
        if row is None:
            return None
        return EntityRecord(
            name=row["name"],
            kind=row["kind"],
            first_seen=row["first_seen"],
            last_seen=row["last_seen"],
            frequency=int(row["frequency"]),
            contexts=list(row["contexts"]),
            mentions=list(row["mentions"]),
        )

    def entities(self, user_id: str, *, limit: int = 100) -> list[EntityRecord]:
        """A user's entities, most frequent first (``mentions`` left empty)."""
        uid, lim = validation.scope_id(user_id, "user_id"), validation.limit(limit)
        with translate_db_errors(), self.engine.connect() as c:
            rows = c.execute(text(sql.LIST_ENTITIES), {"user_id": uid, "limit": lim}).mappings().all()
        return [
            EntityRecord(
                r["name"],
                r["kind"],
                r["first_seen"],
                r["last_seen"],
                int(r["frequency"]),
                list(r["contexts"]),
                [],
            )
            for r in rows
        ]

    def relationships(
        self,
        user_id: str,
        name: str | None = None,
        *,
        as_of: datetime | str | None = None,
        history: bool = False,
        session_id: str | None = None,
    ) -> list[RelationshipRecord]:
        """Facts of a user (touching ``name`` as source or target, when given), oldest first.

        Args:
            as_of: the instant the facts must hold at (default now).
            history: every row, closed ones included (``as_of`` is then ignored).
            session_id: only facts said (also) by a note of this session.
        """
        uid = validation.scope_id(user_id, "user_id")
        nm = None if name is None else entity_name(name)
        at = parse_instant(as_of, "as_of")
        sid = validation.optional_scope_id(session_id, "session_id")
        params = {"user_id": uid, "name": nm, "as_of": at, "history": bool(history), "session_id": sid}
        with translate_db_errors(), self.engine.connect() as c:
            rows = c.execute(text(sql.RELATIONSHIPS), params).mappings().all()
        return [
            RelationshipRecord(
                r["source"],
                r["relation"],
                r["target"],
                float(r["weight"]),
                r["valid_from"],
                r["valid_to"],
                r["source_note_id"],
            )
            for r in rows
        ]

    def related_entities(
        self,
        user_id: str,
        name: str,
        max_depth: int = 2,
        *,
        as_of: datetime | str | None = None,
        session_id: str | None = None,
    ) -> list[RelatedEntity]:
        """Entities within ``max_depth`` hops of ``name``, either direction, the start excluded.

        One call of ``cortex.related_entities`` (a recursive CTE with cycle detection) over the
        facts valid at ``as_of`` (default now).

        Args:
            max_depth: hops, 0..10 (0 returns nothing).
            session_id: walk only the facts said by notes of this session (the facts are read
                in one query and walked breadth-first here, same order as the SQL function).

        Returns:
            Nearest first (by depth, then name). Empty for an unknown name.

        Raises:
            ValidationError: max_depth outside 0..10, blank name.
        """
        uid, nm = validation.scope_id(user_id, "user_id"), entity_name(name)
        depth = _depth(max_depth)
        at = parse_instant(as_of, "as_of")
        sid = validation.optional_scope_id(session_id, "session_id")
        if depth == 0:
            return []
        if sid is not None:
            return self._related_in_session(uid, nm, depth, at, sid)
        params = {"user_id": uid, "name": nm, "max_depth": depth, "as_of": at}
        with translate_db_errors(), self.engine.connect() as c:
            rows = c.execute(text(sql.RELATED), params).mappings().all()
        return [RelatedEntity(r["name"], r["kind"], int(r["depth"])) for r in rows]

    def _related_in_session(
        self, uid: str, name: str, depth: int, at: datetime | None, sid: str
    ) -> list[RelatedEntity]:
        params = {"user_id": uid, "as_of": at, "session_id": sid}
        with translate_db_errors(), self.engine.connect() as c:
            rows = c.execute(text(sql.SESSION_EDGES), params).mappings().all()
        names: dict[str, tuple[str, str]] = {}
        neighbours: dict[str, set[str]] = {}
        for r in rows:
            s, t = fold(r["source"]), fold(r["target"])
            names.setdefault(s, (r["source"], r["source_kind"]))
            names.setdefault(t, (r["target"], r["target_kind"]))
            neighbours.setdefault(s, set()).add(t)
            neighbours.setdefault(t, set()).add(s)
        start = fold(name)
        seen = {start: 0}
        frontier = [start]
        for level in range(1, depth + 1):
            frontier = sorted({n for f in frontier for n in neighbours.get(f, ()) if n not in seen})
            for n in frontier:
                seen[n] = level
        found = [RelatedEntity(names[k][0], names[k][1], d) for k, d in seen.items() if k != start]
        return sorted(found, key=lambda e: (e.depth, e.name))

    def notes_mentioning(
        self,
        user_id: str,
        names: Sequence[str],
        *,
        limit: int = 10,
        memory_type: str | None = None,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """LTM notes that mention any of ``names``, scored in SQL by the fraction mentioned.

        ``filters`` (here and in :meth:`notes_matching_text`): a where_filter
        (:mod:`cortex_pg.store.filters`); errors name the field ``filters``.

        Returns:
            Note rows (``store.memory_store.note_from_row`` shape) with ``score`` in (0, 1] =
            distinct query entities the note mentions / distinct query entities; best first,
            then newest.
        """
        return self._notes(
            sql.NOTES_BY_ENTITIES,
            user_id,
            {"names": [entity_name(n) for n in names]},
            limit,
            memory_type,
            filters,
            session_id,
        )

    def notes_matching_text(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        memory_type: str | None = None,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """LTM notes whose full text matches any lexeme of ``query``; score = ts_rank_cd/(1+ts_rank_cd).

        ``session_id`` (here and in :meth:`notes_mentioning`): only notes of that session.
        """
        return self._notes(
            sql.NOTES_BY_TEXT,
            user_id,
            {"query": validation.content(query, "query")},
            limit,
            memory_type,
            filters,
            session_id,
        )

    def _notes(
        self,
        statement: str,
        user_id: str,
        extra: dict[str, Any],
        limit: int,
        memory_type: str | None,
        filters: Mapping[str, Any] | None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        params = {
            "user_id": validation.scope_id(user_id, "user_id"),
            "session_id": validation.optional_scope_id(session_id, "session_id"),
            "limit": validation.limit(limit),
            "memory_type": None if memory_type is None else validation.memory_type(memory_type),
            **extra,
        }
        with translate_db_errors(), self.engine.connect() as c:
            where = compile_where(c, filters, field="filters")
            statement = statement.replace("/*filters*/ true", where)
            return [dict(r) for r in c.execute(text(statement), params).mappings().all()]

    def entity_graph(
        self,
        user_id: str,
        *,
        as_of: datetime | str | None = None,
        history: bool = False,
        session_id: str | None = None,
    ) -> networkx.MultiDiGraph:
        """The user's knowledge graph as a ``networkx.MultiDiGraph`` (for analytics and drawing).

        Nodes are entity names (attributes kind, frequency, first_seen, last_seen); edges
        ``source -> target`` keyed by relation (attributes weight, valid_from, valid_to).
        Only facts valid at ``as_of`` (default now) unless ``history``. With ``session_id``,
        only the entities mentioned and the facts said by notes of that session (node counters
        over those notes).

        Raises:
            CortexPGError: networkx is not installed (``pip install 'cortex-pg[graph]'``).
        """
        try:
            import networkx as nx
        except ImportError as exc:
            raise CortexPGError(
                "entity_graph needs networkx; install it with `pip install 'cortex-pg[graph]'`"
            ) from exc
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        graph = nx.MultiDiGraph(user_id=uid)
        nodes = sql.GRAPH_NODES if sid is None else sql.GRAPH_NODES_IN_SESSION
        with translate_db_errors(), self.engine.connect() as c:
            for r in c.execute(text(nodes), {"user_id": uid, "session_id": sid}).mappings():
                graph.add_node(
                    r["name"],
                    kind=r["kind"],
                    frequency=int(r["frequency"]),
                    first_seen=r["first_seen"],
                    last_seen=r["last_seen"],
                )
        for rel in self.relationships(uid, as_of=as_of, history=history, session_id=sid):
            graph.add_edge(
                rel.source,
                rel.target,
                key=rel.relation if not history else f"{rel.relation}@{rel.valid_from.isoformat()}",
                relation=rel.relation,
                weight=rel.weight,
                valid_from=rel.valid_from,
                valid_to=rel.valid_to,
            )
        return graph

    # ------------------------------------------------------------------ helpers
    def _tx(self, conn: Connection | None) -> Any:
        if conn is not None:
            from contextlib import nullcontext

            return nullcontext(conn)
        return self.engine.begin()


def entity_name(value: object, field: str = "entity") -> str:
    """A validated entity name: a non-blank string of at most 200 characters, no NUL."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a non-empty string")
    if "\x00" in value or len(value) > 200:
        raise ValidationError(field, "must be at most 200 characters without NUL")
    return value


def _depth(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DEPTH:
        raise ValidationError("max_depth", f"must be an integer in 0..{MAX_DEPTH}, got {value!r}")
    return value
