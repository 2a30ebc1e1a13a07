"""Bytes per note on disk, by part (row, tsvector, GIN, embedding, HNSW), at one or more dimensions.

    python benchmarks/note_size.py --notes 10000 --dims 384 1536 [--json out.json]

Each dimension gets a fresh database (``DATABASE_URL``'s server, else an embedded server in a
temporary directory) at the Alembic head, filled through ``MemoryStore.add_many`` with
synthetic notes: 12 to 30 words drawn from a 5,000-word Zipf(1.1) vocabulary (fixed seed),
10 tenants, the deterministic hashing embedder of that dimension (unit vectors, the same
storage and index size as any model's), LTM only (STM is capped per scope and not part of a
tenant's growth). After ``VACUUM ANALYZE`` the sizes come from ``pg_relation_size`` /
``pg_total_relation_size`` and ``pg_column_size``, divided by the number of notes:

- notes row: heap + TOAST of ``cortex.notes`` without the tsvector column's bytes;
- tsvector: ``avg(pg_column_size(tsv))`` (stored in the row, reported apart);
- GIN: the full-text index ``ix_notes_tsv``; other notes indexes (primary key, id, dedup, ...);
- embedding: heap + TOAST of ``cortex.embeddings`` (the vector plus its keys);
- HNSW: the model's partial index (m = 16, ef_construction = 64); other embeddings indexes;
- history: ``cortex.note_history`` (one insert row per note, written by trigger).

The figures feed the scale arithmetic in docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from _database import database_url
from sqlalchemy import text
from sqlalchemy.engine import make_url

from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for, normalize_url
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore

SIZES = """
SELECT
  pg_relation_size('cortex.notes') + coalesce(pg_total_relation_size(
      (SELECT reltoastrelid FROM pg_class WHERE oid = 'cortex.notes'::regclass)), 0) AS notes_heap,
  (SELECT coalesce(sum(pg_column_size(tsv)), 0) FROM cortex.notes) AS tsv_bytes,
  pg_relation_size('cortex.ix_notes_tsv') AS gin,
  (SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_index
    WHERE indrelid = 'cortex.notes'::regclass AND indexrelid <> 'cortex.ix_notes_tsv'::regclass) AS notes_other_ix,
  pg_relation_size('cortex.embeddings') + coalesce(pg_total_relation_size(
      (SELECT reltoastrelid FROM pg_class WHERE oid = 'cortex.embeddings'::regclass)), 0) AS emb_heap,
  (SELECT coalesce(sum(pg_column_size(embedding)), 0) FROM cortex.embeddings) AS vector_bytes,
  (SELECT pg_relation_size(format('cortex.%I', index_name)::regclass)
     FROM cortex.embedding_models WHERE active) AS hnsw,
  (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i
    WHERE i.indrelid = 'cortex.embeddings'::regclass
      AND i.indexrelid NOT IN (SELECT format('cortex.%I', index_name)::regclass FROM cortex.embedding_models)
  ) AS emb_other_ix,
  pg_total_relation_size('cortex.note_history') AS history,
  (SELECT count(*) FROM cortex.notes) AS n
"""


def _words(rng: random.Random, vocab: list[str], weights: list[float]) -> str:
    return " ".join(rng.choices(vocab, weights=weights, k=rng.randint(12, 30)))


def _libpq(url: str) -> dict[str, Any]:
    u = make_url(url)
    params = {"dbname": u.database, "user": u.username, "password": u.password, "port": u.port}
    params["host"] = u.host or u.query.get("host")
    return {k: v for k, v in params.items() if v is not None}


def measure(server_url: str, dim: int, notes: int, seed: int = 7) -> dict[str, float]:
    """Fill a fresh database with ``notes`` notes of dimension ``dim``; return bytes per note by part."""
    name = f"cortex_size_{dim}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(**_libpq(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        engine = create_engine_for(url)
        migrate.upgrade(engine)
        engine.dispose()
        rng = random.Random(seed)
        vocab = [f"w{i:04d}{''.join(rng.choices('abcdefghij', k=3))}" for i in range(5000)]
        weights = [1 / (r + 1) ** 1.1 for r in range(5000)]
        store = MemoryStore.open(url, embedder=HashingEmbedder(dim), auto_migrate=False)
        started = time.perf_counter()
        try:
            for start in range(0, notes, 1000):
                batch = [
                    {"content": _words(rng, vocab, weights), "user_id": f"tenant{(start + i) % 10}"}
                    for i in range(min(1000, notes - start))
                ]
                store.add_many(batch, to_stm=False, batch_size=500)
            elapsed = time.perf_counter() - started
            with store.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
                row = conn.execute(text(SIZES)).mappings().one()
        finally:
            store.close()
    finally:
        with psycopg.connect(**_libpq(server_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    n = row["n"]
    per = {k: float(row[k]) / n for k in row if k != "n"}
    per["notes_row"] = per["notes_heap"] - per["tsv_bytes"]
    per["total"] = (
        per["notes_heap"]
        + per["gin"]
        + per["notes_other_ix"]
        + per["emb_heap"]
        + per["hnsw"]
        + per["emb_other_ix"]
        + per["history"]
    )
    per["notes"] = n
    per["dim"] = dim
    per["ingest_notes_per_s"] = n / elapsed
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=10000)
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 1536])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import os

    dsn = os.environ.get("DATABASE_URL")
    with database_url(normalize_url(dsn) if dsn else None, prefix="cortex-size-") as server:
        results = [measure(server, dim, args.notes) for dim in args.dims]
    parts = [
        ("notes row (heap+TOAST, without tsvector)", "notes_row"),
        ("tsvector (in the row)", "tsv_bytes"),
        ("GIN ix_notes_tsv", "gin"),
        ("other notes indexes", "notes_other_ix"),
        ("embeddings heap+TOAST", "emb_heap"),
        ("  of which the vector", "vector_bytes"),
        ("HNSW (m 16)", "hnsw"),
        ("other embeddings indexes", "emb_other_ix"),
        ("note_history", "history"),
        ("total", "total"),
    ]
    print(f"{'bytes per note':44}" + "".join(f"{r['dim']:>10} d" for r in results))
    for label, key in parts:
        print(f"{label:44}" + "".join(f"{r[key]:>12,.0f}" for r in results))
    print(
        f"{'add_many notes/s (this machine)':44}"
        + "".join(f"{r['ingest_notes_per_s']:>12,.0f}" for r in results)
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
