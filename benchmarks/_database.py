"""The server a benchmark runs against: the URL it was given, else a temporary embedded server.

    from _database import database_url  # benchmarks/ is on sys.path when a script runs

    with database_url(args.database_url, prefix="cortex-pg-mine-") as url:
        ...

Which URL a script is given (its flag, ``DATABASE_URL``, or neither) stays the script's choice;
migrating is left to it too (``MemoryStore.open(..., auto_migrate=True)`` or
``cortex_pg.db.migrate.upgrade``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def database_url(url: str | None = None, *, prefix: str = "cortex-pg-bench-") -> Iterator[str]:
    """``url`` when it is given (not None or empty); otherwise the URL of an embedded server
    started in a new temporary directory named ``prefix...``, stopped and the directory removed
    on leaving the block."""
    if url:
        yield url
        return
    from cortex_pg.db import embedded

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield embedded.start(tmp)
    finally:
        embedded.stop(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
