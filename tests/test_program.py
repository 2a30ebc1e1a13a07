"""The standing program: concurrency over every public entry point, table-driven.

``CORTEX_PG_PROGRAM_PROCESSES`` processes (default 3) x ``CORTEX_PG_PROGRAM_OPS`` mixed
operations (default 60; the full program is 8 x 500: ``benchmarks/program.py``, which also
prints the wall time) on overlapping users, through the Python API, the facades, the CLI and
the SQL functions (:mod:`tests.helpers.program_worker`). Every acknowledged effect must be in
the database, counts add up exactly, no exception escapes (:mod:`tests.helpers.program`).
"""

from __future__ import annotations

import os

from tests.helpers import program, program_worker

PROCESSES = int(os.environ.get("CORTEX_PG_PROGRAM_PROCESSES", "3"))
OPS = int(os.environ.get("CORTEX_PG_PROGRAM_OPS", "60"))


def test_concurrent_operations_over_every_entry_point_add_up(db_url):
    results = program.run(db_url, PROCESSES, OPS)
    figures, problems = program.check(db_url, results)
    assert problems == []
    assert figures["operations"] == PROCESSES * OPS
    assert figures["lost"] == figures["extra"] == 0
    if len(program_worker.TABLE) <= OPS:  # process 0 ran the whole table at least once
        assert set(figures["by_entry_point"]) == {"api", "facade", "cli", "sql"}
        assert figures["cli_calls"] >= 3  # add, ingest and search at least
    assert figures["acknowledged"] > 0
