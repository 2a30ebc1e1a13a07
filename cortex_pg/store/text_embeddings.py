"""A note's text embeddings: one ``cortex.embeddings`` row per window of its content.

Every write path (add, add_many, bulk loads, update, merge, re-embedding) goes through
:func:`embed_windows` and :func:`write_text_embeddings`, so a note of any length is embedded
whole: rows ``kind = 'text'``, ``window_no`` 0..n-1 for the n windows of
:func:`cortex_pg.embeddings.windows.text_windows` (n = 1 for a note within the embedder's
window). The context embedding (``kind = 'context'``) stays one row per note.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from cortex_pg.embeddings.base import Embedder
from cortex_pg.embeddings.windows import text_windows, window_chars
from cortex_pg.store.copying import can_copy, copy_embeddings
from cortex_pg.store.rows import vector_literal
from cortex_pg.store.sql import DROP_OTHER_MODEL_ROWS, LOCK_FOR_MODEL_DROP

UPSERT_WINDOWS = """
INSERT INTO cortex.embeddings (user_id, note_id, model, kind, window_no, session_id, embedding)
SELECT r.user_id, r.id, :model, 'text', r.window_no, r.session_id, CAST(r.embedding AS vector)
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
     AS r(user_id text, id uuid, window_no int, session_id text, embedding text)
ON CONFLICT (user_id, note_id, model, kind, window_no)
DO UPDATE SET embedding = EXCLUDED.embedding, created_at = now()
"""

# windows past a note's new count (its text got shorter), for the notes in :counts
DELETE_STALE_WINDOWS = """
DELETE FROM cortex.embeddings e
USING jsonb_to_recordset(CAST(:counts AS jsonb)) AS c(user_id text, id uuid, n int)
WHERE e.user_id = c.user_id AND e.note_id = c.id AND e.model = :model
  AND e.kind = 'text' AND e.window_no >= c.n
"""


@dataclass(frozen=True)
class NoteWindows:
    """The window vectors of one note: ``vectors[k]`` is window k's (``embedder.dim`` floats)."""

    user_id: str
    id: str
    session_id: str
    vectors: list[list[float]]


def embed_windows(embedder: Embedder, contents: Sequence[str]) -> list[list[list[float]]]:
    """Embed every window of each text in ``contents``, in one ``embedder.embed`` call.

    Returns:
        Per text, its window vectors in window order (at least one each).

    Raises:
        EmbeddingModelError, EmbeddingDimensionError: the embedder returned the wrong shape.
    """
    from cortex_pg.store.writing import check_vectors

    size = window_chars(embedder)
    per_text = [text_windows(c, size) for c in contents]
    flat = [w for windows in per_text for w in windows]
    vectors = embedder.embed(flat) if flat else []
    check_vectors(embedder, vectors, len(flat))
    out, at = [], 0
    for windows in per_text:
        out.append(vectors[at : at + len(windows)])
        at += len(windows)
    return out


def write_text_embeddings(
    conn: Connection,
    model: str,
    notes: Sequence[NoteWindows],
    *,
    replace: bool = True,
    drop_other_models: bool = True,
) -> int:
    """Write the text windows of ``notes`` (long-term notes) as embeddings of ``model`` (upsert), and with
    ``replace`` delete the windows past each note's count (left by a longer earlier text) and,
    with ``drop_other_models`` (a write; not a back-fill of another model), the notes' rows of
    every other model (``store.sql.DROP_OTHER_MODEL_ROWS``).

    ``replace=False`` is for notes inserted in the same transaction (they have no rows yet):
    the rows then go in one binary ``COPY`` when the connection allows it
    (:func:`cortex_pg.store.copying.can_copy`), else in the upsert.

    Returns:
        The number of window rows written.
    """
    if not any(n.vectors for n in notes):
        return 0
    if not replace and can_copy(conn):
        keys = [(n.user_id, n.id, n.session_id, "text", k) for n in notes for k in range(len(n.vectors))]
        flat = [v for n in notes for v in n.vectors]
        return copy_embeddings(conn, model, keys, flat, len(flat[0]))
    rows = [
        {
            "user_id": n.user_id,
            "id": n.id,
            "window_no": k,
            "session_id": n.session_id,
            "embedding": vector_literal(v),
        }
        for n in notes
        for k, v in enumerate(n.vectors)
    ]
    conn.execute(text(UPSERT_WINDOWS), {"rows": json.dumps(rows), "model": model})
    if replace:
        counts = [{"user_id": n.user_id, "id": n.id, "n": len(n.vectors)} for n in notes]
        conn.execute(text(DELETE_STALE_WINDOWS), {"counts": json.dumps(counts), "model": model})
        if drop_other_models:
            drop_other_models_rows(conn, model, [(n.user_id, n.id) for n in notes])
    return len(rows)


def drop_other_models_rows(conn: Connection, model: str, notes: Sequence[tuple[str, str]]) -> None:
    """Delete the rows of every model but ``model`` of ``notes`` (``(user_id, note id)``) whose
    embeddings a write changed, after the locks that keep it from racing a re-embedding (see
    ``store.sql.DROP_OTHER_MODEL_ROWS``). One pair of statements per tenant (one shard on Citus)."""
    by_user: dict[str, set[str]] = {}
    for user, nid in notes:
        by_user.setdefault(user, set()).add(str(nid))
    for user, ids in sorted(by_user.items()):
        params = {"user_id": user, "ids": sorted(ids), "model": model}
        conn.execute(text(LOCK_FOR_MODEL_DROP), params)
        conn.execute(text(DROP_OTHER_MODEL_ROWS), params)
