"""``cortex-pg serve`` as a user runs it: a real process on a loopback port, over the test
database; and the options it refuses before opening anything."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from cortex_pg.cli import app as cli
from cortex_pg.cli.serve import is_loopback
from cortex_pg.server.keys import create_key
from tests.helpers.service import bearer, owner_engine  # noqa: F401


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_with_keys_and_never_logs_them(db_url, owner_engine):  # noqa: F811
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": db_url, "CORTEX_PG_EMBEDDER": "hashing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pg", "serve", "--port", str(port), "--log-level", "debug"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    key = create_key(owner_engine, "alice").key
    try:
        for _ in range(600):  # up to ~60 s to start
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("cortex-pg serve did not answer /health")
        added = httpx.post(f"{base}/notes", json={"content": "served note"}, headers=bearer(key))
        assert added.status_code == 201 and added.json()["user_id"] == "alice"
        found = httpx.post(f"{base}/search", json={"query": "served note"}, headers=bearer(key)).json()
        assert [r["note"]["content"] for r in found["results"]] == ["served note"]
        assert httpx.get(f"{base}/notes", headers=bearer(key[:-1] + "x")).status_code == 401
        assert httpx.get(f"{base}/notes").status_code == 401
        assert "cortex-pg inspector" in httpx.get(f"{base}/ui").text
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -15), err  # uvicorn ends by re-raising the SIGTERM it handled
    assert f"cortex-pg serving on http://127.0.0.1:{port} (API keys required" in err
    assert '"POST /notes HTTP/1.1" 201' in out + err and "Application shutdown complete" in err
    assert key not in out + err and key[4:] not in out + err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--no-auth", "--user", "u", "--host", "0.0.0.0"], "--host"),
        (["--no-auth"], "--user"),
        (["--user", "u"], "--user"),
    ],
)
def test_serve_refuses_options_that_would_open_the_store_to_anyone(args, flag):
    result = CliRunner().invoke(cli, ["serve", *args], env={"DATABASE_URL": "postgresql://nowhere.invalid/x"})
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {flag}: "), result.output


def test_loopback_hosts():
    assert all(map(is_loopback, ["127.0.0.1", "127.8.0.1", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.org", ""]))


@pytest.mark.parametrize(
    ("args", "flag"), [(["--port", "{busy}"], "--port"), (["--host", "nosuchhost.invalid"], "--host")]
)
def test_serve_refuses_a_port_in_use_or_an_unknown_host_before_announcing(db_url, args, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        args = [a.replace("{busy}", busy) for a in args]
        result = CliRunner().invoke(
            cli, ["--embedder", "hashing", "serve", *args], env={"DATABASE_URL": db_url}
        )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flag}: ") and result.stderr.count("\n") == 1, result.stderr
    assert "serving on" not in result.output
    if flag == "--port":
        assert f"{busy} is already in use" in result.stderr


def test_serve_on_port_0_announces_the_port_it_listens_on(db_url):
    env = {**os.environ, "DATABASE_URL": db_url, "CORTEX_PG_EMBEDDER": "hashing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pg", "serve", "--port", "0", "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()  # the announcement, once the store is open
        assert line.startswith("cortex-pg serving on http://127.0.0.1:"), line
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None
            time.sleep(0.1)
        else:
            pytest.fail("cortex-pg serve --port 0 did not answer /health on the port it announced")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
