"""One evolution step: a note, its k nearest neighbours, a decision, and its effects as rows.

Everything is written in the caller's transaction (the worker's, which also marks the job done),
so the effects of a job are committed together or not at all. The decision is made on the
neighbourhood read without a lock (:func:`read_neighbourhood`, :func:`decide`), by a worker with
a slow decider (an LLM call may take seconds) before that transaction; it is applied once the
notes it writes are locked in the touching reads' order and the notes it was shown are found
unchanged (:class:`StaleDecision` otherwise). Order as in Prem Cortex
``process_memory``: strengthen (tags of the new note, links with reciprocals), update_neighbor
(neighbour tags and context — persisted here, the original only changed an in-process copy),
then merge (the new note into one neighbour; its fresh links move to the target).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.embeddings.base import Embedder
from cortex_pg.errors import CortexPGError
from cortex_pg.evolution.decide import (
    ENTITY_MIN_IDF,
    Decider,
    Decision,
    NoteView,
    parse_decision,
    resolve,
)
from cortex_pg.evolution.merge import merge_in
from cortex_pg.store import links as note_links
from cortex_pg.store import sql as store_sql

log = logging.getLogger(__name__)

DEFAULT_K = 4
#: Notes beyond the k nearest that share a specific entity with the note, shown as well.
ENTITY_CANDIDATES = 4

READ_NOTE = """
SELECT id, user_id, session_id, content, keywords, tags, context, category, merged_into
FROM cortex.notes WHERE user_id = :user_id AND id = :id
"""
LOCK_NOTE = READ_NOTE + "FOR NO KEY UPDATE\n"

# Exact k-NN among the current notes of the same user and session (the note itself excluded),
# by cosine distance of the stored embeddings of one model. Written as materialised steps
# (the note's vector, the user's merged ids, the k nearest, then their rows) so the plan stays
# one index range scan of the user's embeddings even before the tables have statistics.
NEIGHBOURS = """
WITH me AS MATERIALIZED (
    SELECT embedding, session_id FROM cortex.embeddings
    WHERE user_id = :user_id AND note_id = :id AND model = :model AND kind = 'text' AND window_no = 0
), merged AS MATERIALIZED (
    SELECT coalesce(array_agg(id), '{}') AS ids FROM cortex.notes
    WHERE user_id = :user_id AND merged_into IS NOT NULL
), near AS MATERIALIZED (
    SELECT e.note_id, e.embedding <=> me.embedding AS dist
    FROM me, merged, cortex.embeddings e
    WHERE e.user_id = :user_id AND e.model = :model AND e.session_id = me.session_id
      AND e.kind = 'text' AND e.window_no = 0 AND e.note_id <> :id AND e.note_id <> ALL (merged.ids)
    ORDER BY 2, 1
    LIMIT :k
)
SELECT n.id, n.content, n.keywords, n.tags, n.context, n.category, 1 - near.dist AS cosine
FROM near JOIN cortex.notes n ON n.user_id = :user_id AND n.id = near.note_id
ORDER BY near.dist, n.id
"""

# The notes of the same user and session that share with note :id an entity of idf
# ln((N + 1) / df) >= :min_idf, where N = the user's current notes and df = the entity's
# frequency (notes mentioning it, kept by the entity counters). Per note: its most specific
# shared entity, idf / ln(N + 1), and the cosine of the stored embeddings. The k nearest
# (:hood) come first so that they are annotated, then the others by idf and cosine, bounded
# by :limit. Mentions are read through their (user_id, entity_id) index; an entity above the
# idf cut (a speaker in half the notes) is never expanded.
SHARED_ENTITIES = """
WITH me AS MATERIALIZED (
    SELECT embedding, session_id FROM cortex.embeddings
    WHERE user_id = :user_id AND note_id = :id AND model = :model AND kind = 'text' AND window_no = 0
), total AS MATERIALIZED (  -- N from the tenant's corpus counter (kept by the BM25 triggers)
    SELECT coalesce((SELECT doc_count FROM cortex.bm25_corpus WHERE user_id = :user_id), 0) + 1.0 AS n1
), mine AS MATERIALIZED (
    SELECT e.id, e.name, ln(total.n1 / e.frequency) AS idf, ln(total.n1) AS max_idf
    FROM cortex.entity_mentions m
    JOIN cortex.entities e ON e.user_id = m.user_id AND e.id = m.entity_id
    CROSS JOIN total
    WHERE m.user_id = :user_id AND m.note_id = :id AND e.frequency >= 2
      AND ln(total.n1 / e.frequency) >= :min_idf
), shared AS (
    SELECT m.note_id, (array_agg(mine.name ORDER BY mine.idf DESC, mine.name))[1] AS entity,
           max(mine.idf) AS idf, max(mine.idf / nullif(mine.max_idf, 0)) AS specificity
    FROM mine
    JOIN cortex.entity_mentions m ON m.user_id = :user_id AND m.entity_id = mine.id
    WHERE m.note_id <> :id
    GROUP BY m.note_id
)
SELECT n.id, n.content, n.keywords, n.tags, n.context, n.category,
       1 - (e.embedding <=> me.embedding) AS cosine, shared.entity, shared.idf, shared.specificity
FROM shared
CROSS JOIN me
JOIN cortex.notes n ON n.user_id = :user_id AND n.id = shared.note_id
JOIN cortex.embeddings e ON e.user_id = :user_id AND e.note_id = n.id AND e.model = :model
                        AND e.kind = 'text' AND e.window_no = 0
WHERE n.merged_into IS NULL AND n.session_id = me.session_id
ORDER BY n.id = ANY (CAST(:hood AS uuid[])) DESC, shared.idf DESC, cosine DESC, n.id
LIMIT :limit
"""

SET_FIELDS = """
UPDATE {table} SET tags = :tags, context = :context WHERE user_id = :user_id AND id = :id
"""


def _view(row: Any, cosine: float = 1.0) -> NoteView:
    return NoteView(
        id=row.id,
        content=row.content,
        keywords=list(row.keywords or []),
        tags=list(row.tags or []),
        context=row.context,
        category=row.category,
        cosine=float(cosine),
    )


def neighbours(conn: Connection, user_id: str, note_id: uuid.UUID, model: str, k: int) -> list[NoteView]:
    """The ``k`` nearest current notes of the same user and session, most similar first."""
    rows = conn.execute(text(NEIGHBOURS), {"user_id": user_id, "id": note_id, "model": model, "k": k})
    return [_view(r, r.cosine) for r in rows]


def neighbours_sharing_entities(
    conn: Connection,
    user_id: str,
    note_id: uuid.UUID,
    model: str,
    hood: Sequence[NoteView],
    *,
    limit: int = ENTITY_CANDIDATES,
    min_idf: float = ENTITY_MIN_IDF,
) -> list[NoteView]:
    """``hood`` annotated with the specific entities each shares with the note, plus up to
    ``limit`` notes of the same session beyond it that share one (most specific first).

    A shared entity counts when idf = ln((N + 1) / df) >= ``min_idf`` (default ln 10), N the
    user's current notes, df the notes mentioning the entity (``cortex.entities.frequency``);
    the counts are read in SQL (:data:`SHARED_ENTITIES`). Notes without extracted entities
    leave ``hood`` as it is.

    Returns:
        ``hood`` (same order, ``shared_entity`` / ``shared_idf`` / ``specificity`` set where
        one is shared), then the extra notes.
    """
    params = {
        "user_id": user_id,
        "id": note_id,
        "model": model,
        "hood": [str(n.id) for n in hood],
        "min_idf": float(min_idf),
        "limit": limit + len(hood),
    }
    rows = {r.id: r for r in conn.execute(text(SHARED_ENTITIES), params)}
    if not rows:
        return list(hood)

    def annotated(view: NoteView, r: Any) -> NoteView:
        return replace(
            view, shared_entity=r.entity, shared_idf=float(r.idf), specificity=float(r.specificity or 0.0)
        )

    out = [annotated(n, rows.pop(n.id)) if n.id in rows else n for n in hood]
    extra = [annotated(_view(r, r.cosine), r) for r in list(rows.values())[:limit]]
    return out + extra


def _set_fields(conn: Connection, user_id: str, nid: uuid.UUID, tags: list[str], context: str | None) -> None:
    params = {"user_id": user_id, "id": nid, "tags": tags, "context": context}
    for table in ("cortex.notes", "cortex.stm_notes"):
        conn.execute(text(SET_FIELDS.format(table=table)), params)


def _effects(
    note: NoteView, hood: Sequence[NoteView], decision: Decision
) -> tuple[list[note_links.Link], list[tuple[uuid.UUID, list[str], str | None]], list[str]]:
    """The links ``decision`` adds, the neighbours it changes (id, tags, context) and the refs
    it names that resolve to no note shown."""
    forward: list[note_links.Link] = []
    dropped: list[str] = []
    if decision.should_evolve and "strengthen" in decision.actions:
        for s in decision.suggested_connections:
            target = resolve(s.ref, note, hood)
            if target is None:
                dropped.append(s.ref)
                continue
            forward.append(note_links.Link(note.id, target.id, s.type, s.strength, s.reason))
    changes = []
    if decision.should_evolve and "update_neighbor" in decision.actions:
        for i, n in enumerate(hood):
            tags = decision.new_tags_neighborhood[i] if i < len(decision.new_tags_neighborhood) else n.tags
            ctx = (
                decision.new_context_neighborhood[i]
                if i < len(decision.new_context_neighborhood)
                else n.context
            )
            if tags != n.tags or ctx != n.context:
                changes.append((n.id, tags, ctx))
    return forward, changes, dropped


def _lock_notes(conn: Connection, user_id: str, ids: Sequence[uuid.UUID]) -> None:
    """Lock notes in the store's order: their sessions' scope locks (a merge deletes an STM
    copy, and a writer of the session holds that lock while it waits for the rows a merge
    changed; see ``LOCK_SCOPES``), then LTM rows by id, then STM rows by id (the touching reads'
    order, see ``cortex.touch_notes``), so a writer or a touching search waits for the job or
    the job for it, never both."""
    params = {"user_id": user_id, "ids": list(ids)}
    conn.execute(text(store_sql.LOCK_NOTE_SCOPES), params)
    for lock in (store_sql.LOCK_LTM_NOTES, store_sql.LOCK_STM_NOTES):
        conn.execute(text(lock), params)


def notes_written(note: NoteView, hood: Sequence[NoteView], decision: Decision) -> set[uuid.UUID]:
    """Every note ``decision`` may write: the note, the notes it links to, the neighbours it
    changes and its merge candidates."""
    forward, changes, _ = _effects(note, hood, decision)
    ids = {note.id} | {link.target for link in forward} | {nid for nid, _, _ in changes}
    if decision.should_evolve and "merge_memories" in decision.actions:
        ids |= {t.id for m in decision.merge_candidates if (t := resolve(m.ref, note, hood)) is not None}
    return ids


def apply_decision(
    conn: Connection,
    embedder: Embedder,
    note: NoteView,
    user_id: str,
    hood: Sequence[NoteView],
    decision: Decision,
) -> dict[str, Any]:
    """Write the effects of ``decision`` (see the module doc); returns counts of what changed.
    The caller has locked the notes it writes (:func:`notes_written`)."""
    out: dict[str, Any] = {"links": 0, "neighbours_updated": 0, "merged_into": None, "dropped_ids": []}
    if not decision.should_evolve:
        return out
    forward, changes, out["dropped_ids"] = _effects(note, hood, decision)
    conn.execute(text("SELECT set_config('cortex.change_reason', 'evolve', true)"))
    if "strengthen" in decision.actions:
        if decision.tags_to_update and decision.tags_to_update != note.tags:
            _set_fields(conn, user_id, note.id, decision.tags_to_update, note.context)
        out["links"] = note_links.write_links(conn, user_id, forward, repoint_merged=True)
    for nid, tags, ctx in changes:
        _set_fields(conn, user_id, nid, tags, ctx)
        out["neighbours_updated"] += 1
    conn.execute(text("SELECT set_config('cortex.change_reason', '', true)"))
    if "merge_memories" in decision.actions:
        for m in decision.merge_candidates:
            target = resolve(m.ref, note, hood)
            if target is None:
                out["dropped_ids"].append(m.ref)
                continue
            try:
                merged = merge_in(
                    conn, embedder, user_id, note.id, target.id, strategy=m.strategy, reasoning=m.reasoning
                )
            except CortexPGError as exc:  # refused before any write (e.g. target merged meanwhile)
                out["merge_refused"] = str(exc)
                log.info("evolution of note %s: merge into %s refused: %s", note.id, target.id, exc)
                continue
            out["merged_into"] = str(target.id)
            out["links_moved"] = merged["links_moved"]
            break
    return out


class StaleDecision(Exception):
    """A note the decision was made on changed (or went) between the read the decider was shown
    and the job's lock; the decision is not applied (the worker reads and decides again)."""


@dataclass(frozen=True)
class Neighbourhood:
    """What a decider is shown: the note and its neighbours, as read at one moment."""

    note: NoteView
    hood: tuple[NoteView, ...]


@dataclass(frozen=True)
class Decided:
    """A decision made on ``seen`` (``decision`` None when ``seen`` is a skip, or a note without
    neighbours: nothing to decide)."""

    seen: Neighbourhood | dict[str, Any]
    decision: Decision | None


def read_neighbourhood(
    conn: Connection,
    user_id: str,
    note_id: uuid.UUID,
    model: str,
    *,
    k: int = DEFAULT_K,
    entity_candidates: int = ENTITY_CANDIDATES,
    lock: bool = False,
) -> Neighbourhood | dict[str, Any]:
    """The note and the neighbours a decider is shown (:func:`neighbours`, then
    :func:`neighbours_sharing_entities`); with ``lock`` the note row is locked first
    (``FOR NO KEY UPDATE``). A note that is gone or merged gives the job's ``skipped`` result.
    """
    row = conn.execute(text(LOCK_NOTE if lock else READ_NOTE), {"user_id": user_id, "id": note_id}).first()
    if row is None:
        return {"skipped": "note not found"}
    if row.merged_into is not None:
        return {"skipped": f"merged into {row.merged_into}"}
    hood = neighbours(conn, user_id, note_id, model, k)
    if hood:
        hood = neighbours_sharing_entities(conn, user_id, note_id, model, hood, limit=entity_candidates)
    return Neighbourhood(_view(row), tuple(hood))


def decide(decider: Decider, seen: Neighbourhood | dict[str, Any]) -> Decided:
    """Ask ``decider`` about ``seen`` (no database call: a slow decider may run outside any
    transaction).

    Raises:
        ValidationError: the decider's answer is malformed.
    """
    if isinstance(seen, dict) or not seen.hood:
        return Decided(seen, None)
    return Decided(seen, parse_decision(decider(seen.note, list(seen.hood))))


# the shown notes as they are now (after their locks), to compare with what the decider saw
SHOWN_NOW = """
SELECT id, content, keywords, tags, context, category FROM cortex.notes
WHERE user_id = :user_id AND id = ANY (CAST(:ids AS uuid[])) AND merged_into IS NULL
"""


def _unchanged(conn: Connection, user_id: str, seen: Neighbourhood) -> bool:
    """Whether every note the decider was shown is still current with the same content,
    keywords, tags, context and category (the fields it decides on; a cosine changes only with
    the content, or with a re-embedding under another model, which a job does not read)."""
    views = [seen.note, *seen.hood]
    now = {
        r.id: _view(r)
        for r in conn.execute(text(SHOWN_NOW), {"user_id": user_id, "ids": [v.id for v in views]})
    }
    return all(
        v.id in now
        and replace(now[v.id], cosine=v.cosine)
        == replace(v, shared_entity=None, shared_idf=0.0, specificity=0.0)
        for v in views
    )


#: tries of the locked decision (:func:`evolve_note` with ``on_stale="decide"``): each reads the
#: neighbourhood, locks its notes and reads it again; a note that came into it between the two
#: reads (milliseconds apart) starts the next
LOCKED_TRIES = 5


def _zero(seen: Neighbourhood) -> dict[str, Any]:
    return {"neighbours": len(seen.hood), "links": 0, "neighbours_updated": 0, "merged_into": None}


def evolve_note(
    conn: Connection,
    embedder: Embedder,
    decider: Decider,
    user_id: str,
    note_id: uuid.UUID,
    *,
    k: int = DEFAULT_K,
    entity_candidates: int = ENTITY_CANDIDATES,
    decided: Decided | None = None,
    on_stale: str = "decide",
    locked: bool = False,
) -> dict[str, Any]:
    """Evolve one note in the caller's transaction (which must hold no row lock of the user's
    notes yet: the locks below are taken in the touching reads' order).

    The decision (``decided``, or the decider's answer on the neighbourhood read now, without a
    lock) is applied after every note it may write, the note among them, is locked in the
    touching reads' order (LTM rows by id, then STM rows by id; see ``cortex.touch_notes``) and
    every note it was shown is found unchanged; so two jobs of one note never interleave and a
    job never deadlocks with a touching read. The lock and check run in a savepoint: a stale
    decision releases its locks. A note that is gone or already merged is skipped.

    Args:
        embedder: re-embeds a merge target; ``embedder.name`` selects the stored embeddings.
        decider: see :mod:`cortex_pg.evolution.decide`; asked in this transaction unless
            ``decided`` holds its answer (the worker asks a slow decider, an LLM, before).
        k: nearest neighbours shown to the decider (Prem Cortex: 4).
        entity_candidates: further notes of the session shown to the decider because they
            share a specific entity with the note (:func:`neighbours_sharing_entities`; 0 for
            none). Every neighbour carries the entity it shares, if any.
        decided: a decision made before this transaction (:func:`read_neighbourhood`, then
            :func:`decide`).
        on_stale: when a note the decision was made on has changed by the time it is locked:
            ``"raise"`` raises :class:`StaleDecision`; ``"decide"`` asks ``decider`` again with
            the note and every note shown locked (in order; touching reads of them wait for
            the answer), in up to :data:`LOCKED_TRIES` tries.
        locked: go straight to that locked decision (``decided`` unused).

    Returns:
        A JSON-friendly summary (stored in ``evolution_jobs.result``): ``neighbours``,
        ``links``, ``neighbours_updated``, ``merged_into``, ``dropped_ids``, or ``skipped``.

    Raises:
        ValidationError: the decider's answer is malformed (the attempt fails and is retried).
        StaleDecision: see ``on_stale``; also when other notes came into the neighbourhood in
            every locked try.
    """
    if on_stale not in ("decide", "raise"):
        raise ValueError(f"on_stale must be 'decide' or 'raise', got {on_stale!r}")

    def read() -> Neighbourhood | dict[str, Any]:
        return read_neighbourhood(
            conn, user_id, note_id, embedder.name, k=k, entity_candidates=entity_candidates
        )

    if not locked:
        if decided is None:
            decided = decide(decider, read())
        seen, decision = decided.seen, decided.decision
        if isinstance(seen, dict):  # gone or merged: for good
            return seen
        if decision is None:  # no neighbours: nothing to decide
            return _zero(seen)
        if not decision.should_evolve:  # nothing to write
            return {**apply_decision(conn, embedder, seen.note, user_id, seen.hood, decision), **_zero(seen)}
        with conn.begin_nested() as savepoint:
            _lock_notes(conn, user_id, list(notes_written(seen.note, seen.hood, decision)))
            if _unchanged(conn, user_id, seen):
                return {
                    **_zero(seen),
                    **apply_decision(conn, embedder, seen.note, user_id, seen.hood, decision),
                }
            savepoint.rollback()  # releases the locks it took
        if on_stale == "raise":
            raise StaleDecision(f"note {note_id}: a note the decision was made on changed meanwhile")
    # decide with the note and every note shown locked (a decision writes no other note): lock
    # the notes of a read, read again, and decide when no other note has come in meanwhile
    for _ in range(LOCKED_TRIES):
        with conn.begin_nested() as savepoint:
            first = read()
            if isinstance(first, dict):
                return first
            ids = [first.note.id, *(n.id for n in first.hood)]
            _lock_notes(conn, user_id, ids)
            seen = read()  # the notes locked cannot change now
            if isinstance(seen, dict):
                return seen
            if {seen.note.id, *(n.id for n in seen.hood)} <= set(ids):
                decision = decide(decider, seen).decision
                if decision is None:
                    return _zero(seen)
                return {
                    **_zero(seen),
                    **apply_decision(conn, embedder, seen.note, user_id, seen.hood, decision),
                }
            savepoint.rollback()
    raise StaleDecision(f"note {note_id}: other notes came into its neighbourhood at every read")
