"""Graph traversal along note links: ``cortex.linked_notes`` and search expansion.

The walk itself is one recursive CTE in SQL (``sql/functions/linked_notes/v1.sql``): outgoing
links up to ``depth`` hops, cycles cut by the visited path, path strength = product of the
link strengths.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import Plan, operation, plan_of, statement
from cortex_pg.errors import ValidationError
from cortex_pg.store import sql, validation
from cortex_pg.store.records import Note, SearchResult
from cortex_pg.store.rows import tenant_scoped

if TYPE_CHECKING:
    from cortex_pg.store.memory_store import MemoryStore

LINKED = f"""
SELECT {", ".join("n." + c.strip() for c in sql.NOTE_COLUMNS.split(","))},
       'ltm' AS memory_tier, n.merged_into, n.evolution_history,
       l.hops, l.path_strength, l.via_id, l.link_type, l.link_strength, l.link_reason, l.path
FROM cortex.linked_notes(:user_id, :id, :depth, CAST(:min_strength AS real)) l
JOIN cortex.notes n ON n.user_id = :user_id AND n.id = l.id
ORDER BY l.hops, l.path_strength DESC, l.id
"""

# Direct links of several results at once, in the results' order (best first).
EXPANSION = f"""
SELECT r.ord, l.id AS linked_id, l.path_strength, l.link_type, l.link_strength, l.link_reason, l.via_id,
       {", ".join("n." + c.strip() for c in sql.NOTE_COLUMNS.split(","))},
       'ltm' AS memory_tier, n.merged_into, n.evolution_history
FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS r(root, ord)
CROSS JOIN LATERAL cortex.linked_notes(:user_id, r.root, :depth, CAST(0 AS real)) l
JOIN cortex.notes n ON n.user_id = :user_id AND n.id = l.id
WHERE CAST(:session_id AS text) IS NULL OR n.session_id = :session_id
ORDER BY r.ord, l.hops, l.path_strength DESC, l.id
"""


@dataclass(frozen=True, slots=True)
class LinkedNote:
    """A note reached along links.

    Attributes:
        hops: links on the shortest path from the start note, >= 1.
        path_strength: product of the link strengths on that path, in [0, 1].
        via: the note the last link starts from; link_type/strength/reason: that last link.
        path: note ids from the start note to this one.
    """

    note: Note
    hops: int
    path_strength: float
    via: str
    link_type: str
    link_strength: float
    link_reason: str | None
    path: list[str]


@retry_transient
@tenant_scoped
@operation
def linked_notes(
    store: MemoryStore,
    note_id: str | uuid.UUID,
    *,
    depth: int = 2,
    min_strength: float = 0.0,
    user_id: str | None = None,
) -> Plan[list[LinkedNote]]:
    """Notes reachable from ``note_id`` within ``depth`` links (``cortex.linked_notes``).

    Args:
        depth: maximum hops, 1..10.
        min_strength: drop paths whose strength product is below this, in [0, 1].
        user_id: owner (None: looked up from the note).

    Returns:
        One entry per reachable current note, nearest first (hops, then path strength).

    Raises:
        NotFoundError: no such note. ValidationError: bad depth or min_strength.
    """
    from cortex_pg.store.memory_store import note_from_row

    nid = validation.note_id(note_id)
    hops = validation.limit(depth, "depth")
    if hops > 10:
        raise ValidationError("depth", "must be at most 10")
    floor = validation.unit_interval(min_strength, "min_strength")
    owner = (yield from plan_of(store.get, nid, user_id=user_id)).user_id
    rows = yield statement(
        LINKED, {"user_id": owner, "id": nid, "depth": hops, "min_strength": floor}, "mappings"
    )
    return [
        LinkedNote(
            note=note_from_row(r),
            hops=int(r["hops"]),
            path_strength=float(r["path_strength"]),
            via=str(r["via_id"]),
            link_type=r["link_type"],
            link_strength=float(r["link_strength"]),
            link_reason=r["link_reason"],
            path=[str(p) for p in r["path"]],
        )
        for r in rows
    ]


def expand_results(
    conn: Connection,
    user_id: str,
    results: Sequence[SearchResult],
    *,
    extra: int,
    depth: int = 1,
    session_id: str | None = None,
) -> list[SearchResult]:
    """Linked notes of ``results`` (best result first), not already among them, at most ``extra``.

    Each appended result has ``is_linked=True``, ``linked_from`` (the result it was reached
    from), the last link's ``relationship_type``/``_strength``/``_reason``, and
    ``score = score(linked_from) * path_strength`` (the other scores are 0 or None).

    Args:
        depth: hops followed from each result (1 = direct links, as the Prem Cortex CLI).
        session_id: only linked notes of this session (None: any of the user's sessions).
    """
    from cortex_pg.store.memory_store import note_from_row

    if not results or extra <= 0:
        return []
    seen = {r.id for r in results}
    params: dict[str, Any] = {
        "user_id": user_id,
        "ids": [r.id for r in results],
        "depth": depth,
        "session_id": session_id,
    }
    out: list[SearchResult] = []
    for row in conn.execute(text(EXPANSION), params).mappings():
        linked = str(row["linked_id"])
        if linked in seen:
            continue
        seen.add(linked)
        parent = results[int(row["ord"]) - 1]
        base = SearchResult(
            note=note_from_row(row),
            score=parent.score * float(row["path_strength"]),
            relevance_score=0.0,
            semantic_score=None,
            distance=None,
            text_score=0.0,
            recency_score=0.0,
            vector_rank=None,
            text_rank=None,
        )
        out.append(
            replace(
                base,
                is_linked=True,
                linked_from=parent.id,
                relationship_type=row["link_type"],
                relationship_strength=float(row["link_strength"]),
                relationship_reason=row["link_reason"],
            )
        )
        if len(out) >= extra:
            break
    return out
