"""Workers in other processes: the CLI worker evolves notes; a worker killed mid-job leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

from cortex_pg.evolution import Worker, get_links

ROOT = Path(__file__).resolve().parents[1]

SLOW_WORKER = """
import sys, time
from pathlib import Path
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.evolution import Worker, heuristic_decider
from cortex_pg.store import MemoryStore

url, marker = sys.argv[1], Path(sys.argv[2])

def hold(job):  # effects written, not committed: signal the test and wait to be killed
    marker.write_text(str(job.id))
    time.sleep(120)

store = MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
Worker(store, decider=heuristic_decider(link_threshold=0.0), listen=False, before_commit=hold,
       name="doomed").run_one()
"""


def _env(db_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        CORTEX_PG_EMBEDDER="hashing",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    return env


def _wait(predicate, timeout: float = 60.0, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(step)


def _job_rows(store):
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT status, attempts, locked_by, result FROM cortex.evolution_jobs ORDER BY id")
        ).all()


def _link_count(store) -> int:
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM cortex.note_links")).scalar_one()


def test_cli_worker_in_another_process_evolves_notes(store, db_url):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cortex_pg.cli.evolution",
            "worker",
            "--concurrency",
            "2",
            "--poll-interval",
            "5",
        ],
        env=_env(db_url),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = "Melanie signed up for a pottery class to relax after work"
        first = store.add(base, user_id="p", enqueue_evolution=True)
        second = store.add(base + " on Mondays", user_id="p", enqueue_evolution=True)
        # NOTIFY wakes the worker long before its 5 s poll
        _wait(lambda: [r.status for r in _job_rows(store)] == ["done", "done"])
        links = get_links(store, second, user_id="p")
        assert first in links and links[first]["type"] == "related"
        assert 0.7 <= links[first]["strength"] < 0.95
        assert get_links(store, first, user_id="p")[second]["strength"] >= 0.65
        assert {r.locked_by for r in _job_rows(store)} == {None}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "done=2" in err

    out = subprocess.run(
        [sys.executable, "-m", "cortex_pg.cli.evolution", "jobs"],
        env=_env(db_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "done     2" in out.stdout and "failed   0" in out.stdout


def test_worker_killed_mid_job_leaves_no_links_and_job_is_retaken(store, db_url, tmp_path):
    a = store.add("Caroline researched adoption agencies for months", user_id="k")
    b = store.add("Caroline researched adoption agencies for years", user_id="k", enqueue_evolution=True)
    marker = tmp_path / "holding"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WORKER, db_url, str(marker)], env=_env(db_url), stderr=subprocess.PIPE
    )
    try:
        _wait(marker.exists)
        # links are written in the worker's open transaction: invisible from here
        assert _link_count(store) == 0
        (job,) = _job_rows(store)
        assert job.status == "running" and job.locked_by.startswith("doomed/")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert _link_count(store) == 0
    assert _job_rows(store)[0].status == "running"

    assert Worker(store, listen=False, lock_timeout=3600).run_one() is False  # lock not yet stale
    retaker = Worker(store, listen=False, lock_timeout=0.5)
    _wait(lambda: retaker.run_one(), timeout=30, step=0.2)
    (job,) = _job_rows(store)
    assert job.status == "done" and job.attempts == 2 and job.locked_by is None
    assert _link_count(store) == 2  # the pair, once
    assert b in get_links(store, a, user_id="k")


def test_worker_and_jobs_honour_the_global_cli_options(db_url):
    from typer.testing import CliRunner

    from cortex_pg.cli import app
    from cortex_pg.store import MemoryStore

    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, enqueue_evolution=True)
    s.add_many([{"content": f"global options note {i}", "user_id": "g"} for i in range(5)])
    s.close()
    runner = CliRunner()
    env = {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}  # wrong on purpose: the option wins
    r = runner.invoke(app, ["--database-url", db_url, "jobs"], env=env)
    assert r.exit_code == 0, r.output
    assert "queued   5" in r.output
    r = runner.invoke(
        app, ["--database-url", db_url, "--embedder", "hashing", "worker", "--exit-when-idle"], env=env
    )
    assert r.exit_code == 0, r.output
    assert "done=5" in r.output
