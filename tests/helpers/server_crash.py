"""Crashing the embedded server for the tests: SIGKILL its postmaster, then wait (on process
state, not on a clock) until every process of the dead server is gone, so that the next call
of a client cannot still reach a backend that has not yet noticed, and a restart does not
find the old shared memory in use."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

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
