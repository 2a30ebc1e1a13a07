"""The standing program: crashes. A client killed in the middle of ``add_many``; the embedded
server killed (SIGKILL) during an ingest and restarted (crash recovery); the database gone
mid-operation. Marked ``crash`` (``pytest -m crash`` runs them alone); they run in the default
``scripts/test`` run too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex_pg import DatabaseUnavailableError
from cortex_pg.db import embedded, migrate
from cortex_pg.db.engine import create_engine_for
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from tests.helpers.server_crash import kill_server

pytestmark = pytest.mark.crash
ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("CORTEX_PG_CRASH_ROUNDS", "2"))


def _client(*args: str, stdout=subprocess.PIPE) -> subprocess.Popen:  # noqa: ANN001
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.crash_client", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=stdout,
        text=True,
    )


def _count(store: MemoryStore, user: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM cortex.notes WHERE user_id = :u"), {"u": user}
        ).scalar()


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_killed_client_in_add_many_leaves_all_or_nothing(store, db_url, round_):
    user = f"killed{round_}"
    proc = _client("add_many", db_url, user, "400", "hold")
    assert proc.stdout.readline().strip() == "batch"  # one batch written; the client now waits
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _count(store, user) == 0  # the call's transaction died with the client
    finished = _client("add_many", db_url, user, "120")
    out, _ = finished.communicate(timeout=300)
    assert out.strip().endswith("done")
    assert _count(store, user) == 120


def test_server_killed_during_ingest_loses_no_acknowledged_note(tmp_path):
    data = Path(tempfile.mkdtemp(prefix="cortex-crash-"))
    try:
        url = embedded.start(data)
        engine = create_engine_for(url)
        migrate.upgrade(engine)
        engine.dispose()
        store = MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
        store.add("in short-term memory before the crash", user_id="watcher")
        acks = tmp_path / "acks.txt"
        acks.touch()
        lost = 0
        acknowledged: set[str] = set()
        for _round in range(ROUNDS):
            client = _client("ingest", url, "ingest", str(acks), stdout=subprocess.DEVNULL)
            wanted = len(acks.read_text().splitlines()) + 20
            deadline = time.monotonic() + 600  # a bound for a starved machine, not an expectation
            while len(acks.read_text().splitlines()) < wanted and client.poll() is None:
                assert time.monotonic() < deadline, "the ingest client acknowledged nothing"
                time.sleep(0.1)
            assert client.poll() is None  # still ingesting
            kill_server(data)  # the server dies mid-ingest; every one of its processes is gone
            with pytest.raises(DatabaseUnavailableError):  # typed, not a driver error
                store.add("while the server is down", user_id="watcher")
            client.wait(timeout=600)  # the client's calls fail (typed) and it ends
            embedded.start(data)  # restart: crash recovery (waits for the old postmaster to be reaped)
            lines = acks.read_text().splitlines()
            acknowledged |= {x for x in lines if not x.startswith("!")}
            failures = {x for x in lines if x.startswith("!")}
            assert failures <= {"!DatabaseUnavailableError"}, failures
            with store.engine.connect() as conn:  # the next call reconnects
                stored = {
                    r[0]
                    for r in conn.execute(text("SELECT id::text FROM cortex.notes WHERE user_id = 'ingest'"))
                }
                jobs = conn.execute(
                    text("SELECT count(*) FROM cortex.evolution_jobs WHERE user_id = 'ingest'")
                ).scalar()
                stm = conn.execute(text("SELECT count(*) FROM cortex.stm_notes")).scalar()
            lost += len(acknowledged - stored)
            assert acknowledged <= stored  # every acknowledged note survived
            assert jobs >= len(acknowledged)  # and its evolution job
            assert stm == 0  # UNLOGGED: emptied by crash recovery
            assert store.search("short-term", user_id="watcher", memory_source="stm") == []
            # and said: the watcher's session lost what it held, nothing was written since
            [loss] = store.stm_losses(user_id="watcher")
            assert (loss.session_id, loss.written_since) == ("default", False)
        assert lost == 0
        # queued jobs resume after the restarts
        from cortex_pg.evolution.worker import Worker

        worker = Worker(store, listen=False)
        assert worker.process_available(max_jobs=5) == 5
        store.add("after the crashes", user_id="watcher")
        store.close()
    finally:
        embedded.stop(data)
        shutil.rmtree(data, ignore_errors=True)
