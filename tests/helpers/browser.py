"""A real browser for the inspector page's tests: Chromium from the system's package manager,
driven by Playwright (Python), and the app served by uvicorn on a loopback port.

:func:`chromium` finds ``chromium`` on PATH, else installs Debian's package itself
(``apt-get install chromium``, as root); only where neither works does the test skip, saying
why. Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

NAMES = ("chromium", "chromium-browser")
# flags for a headless run as root on a machine with no network beyond loopback
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _found() -> str | None:
    return next((p for p in map(shutil.which, NAMES) if p), None)


def chromium() -> str:
    """Path of a Chromium binary, installing the system package when missing (or skip)."""
    path = _found()
    if path:
        return path
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip("no Chromium on PATH, and it cannot be installed here (needs apt-get as root): "
                    "install the system package 'chromium' to run the browser tests")  # fmt: skip
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    steps = (
        ["apt-get", *lock, "update"],
        ["apt-get", *lock, "install", "-y", "--no-install-recommends", "chromium"],
    )
    for step in steps:
        done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            pytest.skip(f"Chromium could not be installed ({' '.join(step)} failed: {' | '.join(tail)})")
    path = _found()
    if not path:
        pytest.skip("apt-get installed 'chromium' but no chromium binary is on PATH")
    return path


@contextmanager
def serve(app) -> Iterator[str]:  # noqa: ANN001
    """Run ``app`` with uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(1500):  # up to ~30 s for the socket to be bound
        if server.started or not thread.is_alive():
            break
        time.sleep(0.02)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
