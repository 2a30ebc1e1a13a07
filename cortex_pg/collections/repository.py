"""Reading collections and category counts, and queueing collection jobs (one SQL statement each).

Every statement filters on ``user_id``; a user never sees another's collections.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

LIST = """
SELECT c.path, c.description, c.query_helper, c.memory_count, c.source, c.created_at, c.refreshed_at,
       coalesce(cc.note_count, 0) AS note_count
FROM cortex.collections c
LEFT JOIN cortex.category_counts cc ON cc.user_id = c.user_id AND cc.path = c.path
WHERE c.user_id = :user_id ORDER BY c.path
"""

CATEGORY_COUNTS = """
SELECT path, note_count FROM cortex.category_counts WHERE user_id = :user_id
ORDER BY note_count DESC, path LIMIT :limit
"""

# The user's collections nearest a query vector, best first (cosine = 1 - pgvector's <=>).
# A collection with a descendant of the same count holds the same notes (a descendant's notes
# are among its ancestor's): only the deepest of them is discovered, so the discovery's places
# and searches go to distinct sets of notes.
DISCOVER = """
SELECT c.path, c.description, c.query_helper, c.memory_count,
       1 - (c.centroid <=> CAST(:embedding AS vector)) AS similarity
FROM cortex.collections c
WHERE c.user_id = :user_id AND c.model = :model AND c.centroid IS NOT NULL
  AND 1 - (c.centroid <=> CAST(:embedding AS vector)) >= :min_similarity
  AND NOT EXISTS (
      SELECT 1 FROM cortex.collections d
      WHERE d.user_id = c.user_id AND d.model = c.model AND d.centroid IS NOT NULL
        AND left(d.path, length(c.path) + 1) = c.path || '.' AND d.memory_count = c.memory_count)
ORDER BY c.centroid <=> CAST(:embedding AS vector), c.path
LIMIT :limit
"""

# The collection nearest a stored note (its text embedding, first window). Collections as near
# as each other (to 1e-6: a prefix with a single child category has the child's members, hence
# its centroid) go to the deepest path, so a note joins "work.programming", not "work".
NEAREST_TO_NOTE = """
SELECT c.path, 1 - (c.centroid <=> e.embedding) AS similarity
FROM cortex.embeddings e
JOIN cortex.collections c ON c.user_id = e.user_id AND c.model = e.model AND c.centroid IS NOT NULL
WHERE e.user_id = :user_id AND e.note_id = CAST(:note_id AS uuid) AND e.model = :model
  AND e.kind = 'text' AND e.window_no = 0
ORDER BY round((c.centroid <=> e.embedding)::numeric, 6), cardinality(string_to_array(c.path, '.')) DESC, c.path
LIMIT 1
"""


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """A collection as listed (no centroid).

    Attributes:
        path: the category prefix (dot path).
        memory_count: member notes at the last refresh (what the description and centroid
            were made from).
        source: ``"llm"`` or ``"offline"`` (who wrote description and query_helper).
        created_at, refreshed_at: aware UTC.
        note_count: member notes now (current long-term notes under the path, kept exact by
            triggers; a refresh follows when it grew enough or a day passed, see the SQL).
    """

    path: str
    description: str
    query_helper: str
    memory_count: int
    source: str
    created_at: datetime
    refreshed_at: datetime
    note_count: int = 0


@dataclass(frozen=True, slots=True)
class CollectionHit:
    """A collection found for a query: ``similarity`` = cosine(query, centroid) in [-1, 1]."""

    path: str
    description: str
    query_helper: str
    memory_count: int
    similarity: float


def list_collections(conn: Connection, user_id: str) -> list[CollectionInfo]:
    """The user's collections, by path."""
    return [CollectionInfo(**r) for r in conn.execute(text(LIST), {"user_id": user_id}).mappings()]


def category_counts(conn: Connection, user_id: str, limit: int = 50) -> list[tuple[str, int]]:
    """The user's category prefixes with their note counts, most notes first (at most ``limit``)."""
    rows = conn.execute(text(CATEGORY_COUNTS), {"user_id": user_id, "limit": limit}).all()
    return [(r.path, int(r.note_count)) for r in rows]


def discover(
    conn: Connection, user_id: str, model: str, embedding: str, *, min_similarity: float, limit: int
) -> list[CollectionHit]:
    """The user's ``limit`` collections nearest ``embedding`` (a vector literal of ``model``'s
    dimension) with cosine >= ``min_similarity``, best first."""
    rows = conn.execute(
        text(DISCOVER),
        {
            "user_id": user_id,
            "model": model,
            "embedding": embedding,
            "min_similarity": min_similarity,
            "limit": limit,
        },
    ).mappings()
    return [CollectionHit(**{**r, "similarity": float(r["similarity"])}) for r in rows]


def nearest_to_note(conn: Connection, user_id: str, note_id: str, model: str) -> tuple[str, float] | None:
    """(path, cosine) of the collection nearest the note's text embedding, or None (no collection
    or no embedding)."""
    row = conn.execute(
        text(NEAREST_TO_NOTE), {"user_id": user_id, "note_id": note_id, "model": model}
    ).first()
    return None if row is None else (row.path, float(row.similarity))


def enqueue_job(conn: Connection, user_id: str, path: str) -> bool:
    """Queue a create/refresh job for ``path`` in the caller's transaction (not when one is queued
    or running); True when queued. Jobs are otherwise queued by the count triggers."""
    return bool(
        conn.execute(
            text("SELECT cortex.enqueue_collection_job(:u, :p)"), {"u": user_id, "p": path}
        ).scalar_one()
    )
