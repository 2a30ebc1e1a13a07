"""Crashing the embedded server for the tests: SIGKILL its postmaster, then wait (on process
state, not on a clock) until every process of the dead server is gone, so that the next call
of a client cannot still reach a backend that has not yet noticed, and a restart does not
find the old shared memory in use. Or SIGKILL one backend (what the OOM killer does): the
postmaster stays and goes through crash recovery itself."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import psycopg
from sqlalchemy.engine import make_url

GONE_WITHIN_S = 120.0  # a generous bound: processes exit at once, unless the machine is starved


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def kill_server(data_dir: Path) -> None:
    """SIGKILL the postmaster of the embedded server in ``data_dir`` (a crash: no shutdown
    checkpoint, crash recovery at the next start) and wait until it and every backend it had
    started have exited.

    Raises:
        AssertionError: a process of the server is still there after :data:`GONE_WITHIN_S`.
    """
    pid = postmaster_pid(data_dir)
    postmaster = psutil.Process(pid)
    children = postmaster.children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    # backends notice the postmaster's death (its pipe closes) and exit on their own
    deadline = time.monotonic() + GONE_WITHIN_S
    alive = [postmaster, *children]
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.05)
    assert not alive, f"processes of the killed server still run: {alive}"


def _running(proc: psutil.Process) -> bool:
    """Still running: a zombie (exited, not yet reaped by its new parent) is not. The
    postmaster's zombie still holds the lock file; ``embedded.start`` waits for it to be reaped."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def crash_backend(url: str) -> datetime:
    """SIGKILL one backend of the server at ``url`` (a SQLAlchemy or libpq URL), as the OOM
    killer does: the postmaster is not restarted (``pg_postmaster_start_time()`` stays) but
    ends every other backend, runs crash recovery (which empties the UNLOGGED tables) and
    accepts connections again. Waits (on process state, then on the server accepting a
    connection) until it does. Needs the rights to signal the server's processes (its OS user,
    or root).

    Returns:
        The time just before the kill (UTC).

    Raises:
        AssertionError: the backend is not reaped, or the server does not accept connections
            again, within :data:`GONE_WITHIN_S`.
    """
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    victim = psycopg.connect(dsn, autocommit=True)
    backend = psutil.Process(victim.info.backend_pid)
    killed_at = datetime.now(UTC)
    os.kill(backend.pid, signal.SIGKILL)
    deadline = time.monotonic() + GONE_WITHIN_S
    # reaped by the postmaster (gone, not a zombie): it has seen the crash and refuses
    # connections until crash recovery is over
    while backend.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not backend.is_running(), f"the killed backend {backend.pid} was not reaped"
    victim.close()
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
            return killed_at
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "the server did not recover from the backend's crash"
            time.sleep(0.1)
