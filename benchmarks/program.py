"""The full standing program: P processes x N mixed operations over every public entry point
(Python API, facades, CLI, SQL functions), then the database checked against what every
operation acknowledged. Prints the figures — operations (per entry point and per operation),
escaped exceptions, API retries (deadlocks, serialization failures), CLI calls, notes
acknowledged / deleted / stored / lost / extra, context frames — the wall time, and every
invariant that failed; exits 1 when one did.

    .venv/bin/python benchmarks/program.py --processes 8 --ops 500 [--url URL] [--json PATH]

With no URL (and no DATABASE_URL) a temporary embedded server is used (started, migrated,
stopped and removed); a URL must name an empty database (the checks read every row).
The operations and checks are those of ``tests/test_program.py`` (``tests/helpers/program.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the program lives in tests/helpers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--ops", type=int, default=500, help="operations per process")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()

    from _database import database_url

    from cortex_pg.db import migrate
    from cortex_pg.db.engine import create_engine_for
    from tests.helpers import program

    with database_url(args.url, prefix="cortex-program-") as url:
        engine = create_engine_for(url)
        migrate.upgrade(engine)
        engine.dispose()
        t0 = time.perf_counter()
        results = program.run(url, args.processes, args.ops, args.seed)
        wall = time.perf_counter() - t0
        figures, problems = program.check(url, results)
    figures = {"processes": args.processes, "ops_per_process": args.ops, **figures}
    figures["wall_s"] = round(wall, 1)
    figures["ops_per_s"] = round(figures["operations"] / wall, 1)
    figures["problems"] = problems
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {json.dumps(value) if isinstance(value, dict | list) else value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
