"""Time to compile where_filters with long value lists, against version 7's compiler.

Usage:
    python benchmarks/filter_compile.py [--size 500] [--database-url URL]

Compiles, with ``cortex.compile_filter``, filters whose value lists hold ``--size`` values:
two ``$in`` lists in a conjunction that share one value, an ``$in`` and a ``$nin`` list of one
field (text, and metadata numbers). Each is compiled by the head revision (since version 8,
lists matched by ``cortex.filter_key``, hashed) and, in a transaction rolled back afterwards,
with version 7's pairwise checks in place of the keyed ones (``compile_filter_clauses_v7`` and
``filter_conjunction_problem_v7``, which compare the lists pair by pair), on the same server.
Prints milliseconds for each and their ratio, and checks that both compile the same text.
Runs against ``--database-url`` (``DATABASE_URL``) or a temporary embedded server.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from _database import database_url
from sqlalchemy import text

from cortex_pg.db.engine import create_engine_for
from cortex_pg.db.migrate import upgrade

#: the head revision's two keyed functions set aside, version 7's pairwise ones in their place
SWAP = [
    "ALTER FUNCTION cortex.compile_filter_clauses(jsonb, text, text) RENAME TO compile_filter_clauses_head",
    "ALTER FUNCTION cortex.compile_filter_clauses_v7(jsonb, text, text) RENAME TO compile_filter_clauses",
    "ALTER FUNCTION cortex.filter_conjunction_problem(text, jsonb) RENAME TO filter_conjunction_problem_head",
    "ALTER FUNCTION cortex.filter_conjunction_problem_v7(text, jsonb) RENAME TO filter_conjunction_problem",
]


def filters(size: int) -> dict[str, dict]:
    first = [f"c{i}" for i in range(size)]
    second = [f"c{i}" for i in range(size - 1, 2 * size)]
    numbers = list(range(size))
    return {
        "$and of two $in lists": {"$and": [{"category": {"$in": first}}, {"category": {"$in": second}}]},
        "$in and $nin, text": {"category": {"$in": first, "$nin": [f"d{i}" for i in range(size)]}},
        "$in and $nin, metadata numbers": {"n": {"$in": numbers, "$nin": [x + 0.5 for x in numbers]}},
    }


def timed(conn, flt: dict) -> tuple[float, str]:  # noqa: ANN001
    t = time.perf_counter()
    compiled = conn.execute(
        text("SELECT cortex.compile_filter(CAST(:f AS jsonb), 'n', 'where_filter')"), {"f": json.dumps(flt)}
    ).scalar_one()
    return (time.perf_counter() - t) * 1000, compiled


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=500)
    ap.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    args = ap.parse_args(argv)
    with database_url(args.database_url, prefix="cortex-pg-filters-") as url:
        engine = create_engine_for(url)
        upgrade(engine, "head")
        print(
            f"{'filter (' + str(args.size) + ' values a list)':40s} {'head ms':>10s} {'v7 ms':>10s} {'v7 / head':>10s}"
        )
        for name, flt in filters(args.size).items():
            with engine.connect() as conn:
                new_ms, new_sql = timed(conn, flt)
                conn.rollback()
                for stmt in SWAP:  # in the transaction, rolled back below
                    conn.execute(text(stmt))
                old_ms, old_sql = timed(conn, flt)
                conn.rollback()
            same = "" if new_sql == old_sql else "   (compiled text differs!)"
            print(f"{name:40s} {new_ms:10.1f} {old_ms:10.1f} {old_ms / new_ms:9.0f}x{same}", flush=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
