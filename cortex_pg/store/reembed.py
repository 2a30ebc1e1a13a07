"""Changing the embedding model without downtime: back-fill a second model beside the first,
then switch in one transaction.

1. :func:`prepare` registers the new model (inactive) and builds its partial HNSW index with
   ``CREATE INDEX CONCURRENTLY`` on each partition of ``cortex.embeddings``, attached to the
   partitioned index (autocommit, no long lock; ``cortex.embedding_index_steps``).
2. :func:`backfill` embeds, in batches of its own transaction each, every current note that
   has no embedding of the new model (every window of its text, and its context as the store
   writes it), every note longer than one window stored before long notes were embedded
   window by window, and every note with a session predecessor but no context embedding (run
   it with the active model to add those windows and contexts)
   (``FOR UPDATE SKIP LOCKED``: several runs can share the
   work; a killed run resumes where the tables say it stopped). Searches keep using the
   active model meanwhile.
3. :func:`activate` catches up notes written since, re-embeds the STM rows (one inline
   embedding each), and makes the new model the active one, all in one transaction.

A write that changes a note's embeddings (its text, or its context: a note inserted before it,
its predecessor deleted, its time changed) deletes the note's rows of every other model
(``store.sql.DROP_OTHER_MODEL_ROWS``), so steps 2 and 3 find it missing and embed it again as
it now is. Such a delete waits for a back-fill batch holding the note, and :func:`activate`
holds it off from its catch-up to its switch. A process still writing with the old model after
the switch deletes the new model's rows of the notes it changes.

Processes still running with the old embedder keep searching the old embeddings (kept until
:func:`drop_model`); notes they write afterwards get old-model vectors only, so restart
writers with the new model and run the back-fill again (it is idempotent; it embeds the notes
they wrote or changed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import sql as psql
from sqlalchemy import Connection, Engine, Row, text

from cortex_pg.db.retry import retry_transient
from cortex_pg.embeddings.base import Embedder
from cortex_pg.embeddings.windows import window_chars
from cortex_pg.errors import EmbeddingDimensionError, ValidationError, translate_db_errors
from cortex_pg.store.rows import vector_literal
from cortex_pg.store.text_embeddings import NoteWindows, embed_windows, write_text_embeddings
from cortex_pg.store.writing import write_context_embeddings

# current notes lacking the model's first text window, or (stored before long notes were
# embedded window by window) longer than one window and lacking the second, or lacking the
# model's context embedding although they have a predecessor in their session (the context
# rows an older schema did not keep: a downgrade below Alembic 0011 deletes them)
MISSING = """
SELECT n.user_id, n.id, n.session_id, n.content
FROM cortex.notes n
WHERE n.merged_into IS NULL
  AND (NOT EXISTS (SELECT 1 FROM cortex.embeddings e
                   WHERE e.user_id = n.user_id AND e.note_id = n.id AND e.model = :m
                     AND e.kind = 'text' AND e.window_no = 0)
       OR (char_length(n.content) > :w
           AND NOT EXISTS (SELECT 1 FROM cortex.embeddings e
                           WHERE e.user_id = n.user_id AND e.note_id = n.id AND e.model = :m
                             AND e.kind = 'text' AND e.window_no = 1))
       OR (NOT EXISTS (SELECT 1 FROM cortex.embeddings e
                       WHERE e.user_id = n.user_id AND e.note_id = n.id AND e.model = :m
                         AND e.kind = 'context')
           AND EXISTS (SELECT 1 FROM cortex.notes p
                       WHERE p.user_id = n.user_id AND p.session_id = n.session_id
                         AND p.merged_into IS NULL AND (p.created_at, p.seq) < (n.created_at, n.seq))))
ORDER BY n.user_id, n.id
LIMIT :b
FOR UPDATE OF n SKIP LOCKED
"""


def _missing(conn: Connection, embedder: Embedder, batch_size: int) -> list[Row[Any]]:
    """Up to ``batch_size`` notes lacking text windows of ``embedder``'s model, locked (see MISSING)."""
    params = {"m": embedder.name, "w": window_chars(embedder), "b": batch_size}
    return list(conn.execute(text(MISSING), params).all())


def _embed_notes(conn: Connection, embedder: Embedder, rows: list[Row[Any]]) -> None:
    """Write every text window and the context embedding of the notes ``rows``."""
    windows = embed_windows(embedder, [r.content for r in rows])
    notes = [NoteWindows(r.user_id, str(r.id), r.session_id, w) for r, w in zip(rows, windows, strict=True)]
    # (beside the active model's rows, which stay: a back-fill drops no other model's rows)
    write_text_embeddings(conn, embedder.name, notes, drop_other_models=False)
    write_context_embeddings(
        conn,
        embedder,
        [r.user_id for r in rows],
        [str(r.id) for r in rows],
        drop_other_models=False,
        followers=False,
    )


def prepare(engine: Engine, embedder: Embedder) -> str:
    """Register ``embedder``'s model (not active) and build its HNSW index concurrently.

    Returns:
        The index name.

    Raises:
        EmbeddingDimensionError: the model is registered with another dimension.
    """
    name, dim = embedder.name, embedder.dim
    if not 1 <= dim <= 4000:
        raise ValidationError("dim", f"{dim} is outside 1..4000 (the HNSW limit of halfvec)")
    with translate_db_errors(), engine.connect() as conn:
        stored = conn.execute(
            text("SELECT dim FROM cortex.embedding_models WHERE model = :m"), {"m": name}
        ).scalar()
        if stored is not None and stored != dim:
            raise EmbeddingDimensionError(name, stored, dim)
        index = conn.execute(text("SELECT cortex.embedding_index_name(:m)"), {"m": name}).scalar_one()
    # one concurrent build per partition of cortex.embeddings, then attach; a build that was
    # interrupted is resumed (the steps are what the catalog still lacks)
    with translate_db_errors(), engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        steps = (
            conn.execute(text("SELECT cortex.embedding_index_steps(:m, :d)"), {"m": name, "d": dim})
            .scalars()
            .all()
        )
        for step in steps:
            conn.exec_driver_sql(step)
    with translate_db_errors(), engine.begin() as conn:
        conn.execute(text("SELECT cortex.register_embedding_model(:m, :d, false)"), {"m": name, "d": dim})
    return index


@retry_transient  # (a batch deadlocked with a writer: the batches done stay done)
def backfill(
    engine: Engine,
    embedder: Embedder,
    *,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed every current note lacking an embedding of ``embedder``'s model; returns the count.

    One transaction per batch (``batch_size`` notes); safe to run concurrently and to resume.
    """
    if batch_size <= 0:
        raise ValidationError("batch_size", "must be positive")
    total = 0
    while True:
        with translate_db_errors(), engine.begin() as conn:
            rows = _missing(conn, embedder, batch_size)
            if not rows:
                return total
            _embed_notes(conn, embedder, rows)
        total += len(rows)
        if progress:
            progress(len(rows))


@retry_transient  # (a writer's drop waiting on the models' lock can deadlock with its catch-up)
def activate(engine: Engine, embedder: Embedder) -> dict[str, int]:
    """Switch the active model to ``embedder``'s, in one transaction.

    Catches up notes without an embedding of the model, re-embeds every STM row, and flips
    ``embedding_models.active``.

    Returns:
        ``{"caught_up": n, "stm_reembedded": m}``.

    Raises:
        ValidationError: the model was never prepared.
    """
    import json

    with translate_db_errors(), engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('cortex.embedding_models', 0))"))
        known = conn.execute(
            text("SELECT dim FROM cortex.embedding_models WHERE model = :m"), {"m": embedder.name}
        ).scalar()
        if known is None:
            raise ValidationError("model", f"{embedder.name!r} is not prepared; run the back-fill first")
        caught = 0
        while True:
            rows = _missing(conn, embedder, 512)
            if not rows:
                break
            _embed_notes(conn, embedder, rows)
            caught += len(rows)
        stm = conn.execute(
            text(
                "SELECT user_id, id, content FROM cortex.stm_notes WHERE model IS DISTINCT FROM :m FOR UPDATE"
            ),
            {"m": embedder.name},
        ).all()
        if stm:
            vectors = [w[0] for w in embed_windows(embedder, [r.content for r in stm])]
            conn.execute(
                text(
                    "UPDATE cortex.stm_notes s SET embedding = CAST(r.embedding AS vector), model = :m "
                    "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(user_id text, id uuid, embedding text) "
                    "WHERE s.user_id = r.user_id AND s.id = r.id"
                ),
                {
                    "m": embedder.name,
                    "rows": json.dumps(
                        [
                            {"user_id": r.user_id, "id": str(r.id), "embedding": vector_literal(v)}
                            for r, v in zip(stm, vectors, strict=True)
                        ]
                    ),
                },
            )
        conn.execute(
            text("UPDATE cortex.embedding_models SET active = false WHERE active AND model <> :m"),
            {"m": embedder.name},
        )
        conn.execute(
            text("UPDATE cortex.embedding_models SET active = true WHERE model = :m"), {"m": embedder.name}
        )
    return {"caught_up": caught, "stm_reembedded": len(stm)}


def drop_model(engine: Engine, model: str) -> int:
    """Remove an inactive model: its embeddings, its index and its registry row. Returns rows deleted.

    Raises:
        ValidationError: the model is the active one, or unknown.
    """
    with translate_db_errors(), engine.begin() as conn:
        row = conn.execute(
            text("SELECT active, index_name FROM cortex.embedding_models WHERE model = :m"), {"m": model}
        ).first()
        if row is None:
            raise ValidationError("model", f"{model!r} is not registered")
        if row.active:
            raise ValidationError("model", f"{model!r} is the active model; activate another one first")
        n = conn.execute(text("DELETE FROM cortex.embeddings WHERE model = :m"), {"m": model}).rowcount
        conn.execute(text("DELETE FROM cortex.embedding_models WHERE model = :m"), {"m": model})
    # an index of a partitioned table is dropped with a short exclusive lock (PostgreSQL has no
    # DROP INDEX CONCURRENTLY for it); the model is unused by then
    with translate_db_errors(), engine.begin() as conn:
        conn.exec_driver_sql(
            psql.SQL("DROP INDEX IF EXISTS cortex.{}").format(psql.Identifier(row.index_name)).as_string(None)
        )
    return n


def models(engine: Engine) -> list[dict[str, object]]:
    """Registered models with their dimension, active flag and embedding count."""
    with translate_db_errors(), engine.connect() as conn:
        rows = (
            conn.execute(
                text(
                    "SELECT m.model, m.dim, m.active, m.index_name, "
                    "(SELECT count(*) FROM cortex.embeddings e WHERE e.model = m.model) AS embeddings "
                    "FROM cortex.embedding_models m ORDER BY m.created_at"
                )
            )
            .mappings()
            .all()
        )
    return [dict(r) for r in rows]
