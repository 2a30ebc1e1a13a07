"""The durable queue and the in-process worker: enqueue, decisions, exactly-once, retries, stale locks."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.db.steps import in_transaction
from cortex_pg.evolution import Worker, get_links, heuristic_decider
from cortex_pg.evolution.decide import NoteView, heuristic_decision, parse_decision
from cortex_pg.store import jobs as jobq
from cortex_pg.store import validation


def _jobs(store):
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT note_id, status, attempts, error, result FROM cortex.evolution_jobs ORDER BY id")
        ).all()


def test_enqueue_in_the_insert_transaction(store):
    store.add("no job by default", user_id="q")
    assert _jobs(store) == []
    a = store.add("first note with a job", user_id="q", enqueue_evolution=True)
    assert store.add("first note with a job", user_id="q", enqueue_evolution=True) == a  # duplicate
    ids = store.add_many(
        [{"content": f"batch note {i}"} for i in range(3)], user_id="q", enqueue_evolution=True
    )
    jobs = _jobs(store)
    assert [str(j.note_id) for j in jobs] == [a, *ids]
    assert {j.status for j in jobs} == {"queued"}
    # rolled back together with the notes
    note = validation.new_note({"content": "never committed", "user_id": "q"})
    with store.engine.connect() as conn:
        tx = conn.begin()
        in_transaction(conn, store._insert_batch([note], to_stm=False, enqueue=True))
        tx.rollback()
    assert len(_jobs(store)) == 4
    with store.engine.begin() as conn:
        assert jobq.counts(conn) == {
            "queued": 4,
            "running": 0,
            "done": 0,
            "failed": 0,
            "run_again": 0,
            "prem_queued": 0,
        }


def _view(cos: float) -> NoteView:
    return NoteView(uuid.uuid4(), "x", [], [], None, None, cos)


def test_heuristic_thresholds():
    note = _view(1.0)
    d = heuristic_decision(note, [_view(0.5), _view(0.97), _view(0.8), _view(0.96), _view(0.7)])
    assert d["merge_candidates"] == [
        {"id": "1", "merge_strategy": "augment", "reasoning": d["merge_candidates"][0]["reasoning"]}
    ]
    assert [(c["id"], c["strength"]) for c in d["suggested_connections"]] == [("2", 0.8), ("4", 0.7)]
    assert d["should_evolve"] and d["actions"] == ["strengthen", "merge_memories"]
    assert heuristic_decision(note, [_view(0.69)])["should_evolve"] is False
    parse_decision(d)  # the heuristic speaks the validated shape


def test_parse_decision_validates():
    with pytest.raises(ValidationError):
        parse_decision("not json")
    with pytest.raises(ValidationError):
        parse_decision({"should_evolve": "yes"})
    with pytest.raises(ValidationError):
        parse_decision({"should_evolve": True, "suggested_connections": [{"id": "0", "strength": "high"}]})
    d = parse_decision(
        '{"should_evolve": true, "actions": ["strengthen", "dance"], '
        '"suggested_connections": [{"id": "0", "type": "", "strength": 1.7, "reason": "r"}], '
        '"merge_candidates": [{"id": "1", "merge_strategy": "??"}]}'
    )
    assert d.actions == ("strengthen",)
    assert d.suggested_connections[0].type == "related" and d.suggested_connections[0].strength == 1.0
    assert d.merge_candidates[0].strategy == "combine"


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"tags_to_update": ["pe\u0000ts"]}, "decision.tags_to_update[0]"),
        ({"new_tags_neighborhood": [["ok"], ["pe\u0007ts"]]}, "decision.new_tags_neighborhood[1][0]"),
        ({"new_context_neighborhood": ["P\ud800ets"]}, "decision.new_context_neighborhood[0]"),
        (
            {"suggested_connections": [{"id": "0", "type": "t\u0000", "strength": 1, "reason": "r"}]},
            "decision.suggested_connections[0].type",
        ),
        (
            {"suggested_connections": [{"id": "0", "type": "t", "strength": 1, "reason": "r\ud800"}]},
            "decision.suggested_connections[0].reason",
        ),
        (
            {"merge_candidates": [{"id": "0", "reasoning": "r\u0000"}]},
            "decision.merge_candidates[0].reasoning",
        ),
    ],
)
def test_parse_decision_refuses_text_the_store_cannot_hold(bad, field):
    """A NUL or a lone surrogate in any string it would write, or a control character in a
    tag, is a malformed decision (a DatabaseError or UnicodeEncodeError of the job before, or a
    tag the store refuses written anyway)."""
    with pytest.raises(ValidationError) as err:
        parse_decision({"should_evolve": True, "actions": ["strengthen", "update_neighbor"], **bad})
    assert err.value.field == field


def test_llm_shaped_decision_is_applied(store):
    """A decider returning the Prem Cortex JSON: typed links, neighbour updates, unknown ids dropped."""
    n1 = store.add("Paris is the capital of France", user_id="e", tags=["geo"])
    n2 = store.add("The Eiffel tower is in Paris", user_id="e", tags=["landmark"])
    new = store.add("Paris hosts the Louvre museum", user_id="e", enqueue_evolution=True)
    seen = {}

    def decider(note, hood):
        seen["hood"] = [str(h.id) for h in hood]
        return {
            "should_evolve": True,
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": [
                {"id": "0", "type": "supports", "strength": 0.9, "reason": "both about Paris"},
                {"id": str(uuid.uuid4()), "type": "related", "strength": 0.9, "reason": "invented"},
            ],
            "tags_to_update": ["paris", "museum"],
            "new_context_neighborhood": ["French geography", "Paris landmarks"],
            "new_tags_neighborhood": [["geo", "paris"], ["landmark", "paris"]],
            "merge_candidates": [],
        }

    w = Worker(store, decider=decider, listen=False)
    assert w.process_available() == 1
    assert sorted(seen["hood"]) == sorted([n1, n2])  # k nearest of the same user and session
    first = seen["hood"][0]
    assert get_links(store, new, user_id="e")[first]["type"] == "supports"
    assert get_links(store, first, user_id="e")[new]["type"] == "supported_by"
    assert store.get(new, user_id="e").tags == ["paris", "museum"]
    assert "paris" in store.get(n1, user_id="e").tags and "paris" in store.get(n2, user_id="e").tags
    assert {store.get(n1).context, store.get(n2).context} == {"French geography", "Paris landmarks"}
    assert "evolve" in [h["op"] for h in store.history(n1, user_id="e")]
    (job,) = _jobs(store)
    assert job.status == "done" and job.attempts == 1
    assert job.result["links"] == 2 and job.result["neighbours_updated"] == 2
    assert len(job.result["dropped_ids"]) == 1


def test_heuristic_merge_and_link_through_the_worker(store):
    base = "Caroline went to the LGBTQ support group meeting on Tuesday evening"
    old = store.add(base, user_id="h")
    near = store.add("Melanie painted a sunrise over the lake last weekend", user_id="h")
    new = store.add(base + ".", user_id="h", enqueue_evolution=True)  # near duplicate
    w = Worker(store, decider=heuristic_decider(link_threshold=0.0), listen=False)
    w.process_available()
    (job,) = _jobs(store)
    assert job.result["merged_into"] == old
    assert store.get(new, user_id="h").merged_into == old
    assert store.get(old, user_id="h").content == base + "\n\n\n" + base + "."
    # the link the new note got to `near` was moved to the merge target
    assert new not in get_links(store, near, user_id="h")
    assert old in get_links(store, near, user_id="h")


def test_two_workers_never_take_one_job(store):
    n = 120
    ids = store.add_many(
        [{"content": f"independent note number {i} {uuid.uuid4()}"} for i in range(n)],
        user_id="c",
        enqueue_evolution=True,
    )
    calls: list[str] = []
    lock = threading.Lock()

    def decider(note, hood):
        with lock:
            calls.append(str(note.id))
        time.sleep(0.002)
        return {"should_evolve": False}

    workers = [Worker(store, decider=decider, concurrency=3, listen=False) for _ in range(2)]
    for w in workers:
        w.start(exit_when_idle=True)
    for w in workers:
        w.join()
    assert sorted(calls) == sorted(ids)  # each job decided exactly once
    jobs = _jobs(store)
    assert len(jobs) == n and {(j.status, j.attempts) for j in jobs} == {("done", 1)}
    assert sum(w.stats.done for w in workers) == n
    assert all(w.stats.done > 0 for w in workers)


def test_failures_retry_with_backoff_then_fail(store):
    store.add("a neighbour", user_id="f")
    store.add("the note", user_id="f", enqueue_evolution=True)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cortex.evolution_jobs SET max_attempts = 2"))

    w = Worker(store, decider=lambda note, hood: "{broken", listen=False, backoff_base=30)
    assert w.run_one() is True
    (job,) = _jobs(store)
    assert job.status == "queued" and job.attempts == 1 and "not valid JSON" in job.error
    assert w.run_one() is False  # backoff: run_after is 30 s away
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cortex.evolution_jobs SET run_after = now()"))
    assert w.run_one() is True
    (job,) = _jobs(store)
    assert job.status == "failed" and job.attempts == 2 and "ValidationError" in job.error
    assert w.stats.retried == 1 and w.stats.failed == 1
    with store.engine.begin() as conn:
        assert jobq.retry_failed(conn) == 1
    assert Worker(store, listen=False).process_available() == 1
    assert _jobs(store)[0].status == "done"


def test_stale_lock_is_taken_again_and_the_old_lease_is_void(store):
    store.add("neighbour", user_id="l")
    store.add("orphaned job note", user_id="l", enqueue_evolution=True)
    with store.engine.begin() as conn:
        (dead,) = jobq.take(conn, "dead-worker")
    w = Worker(store, listen=False, lock_timeout=0.3)
    assert w.run_one() is False  # the lock is fresh
    time.sleep(0.4)
    assert w.run_one() is True
    (job,) = _jobs(store)
    assert job.status == "done" and job.attempts == 2
    with store.engine.begin() as conn:
        assert jobq.finish(conn, dead, {}) is False  # the dead worker can no longer finish it


def _max_attempts(store):  # noqa: ANN001, ANN202
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT max_attempts FROM cortex.evolution_jobs")).scalar_one()


def test_a_job_asked_for_again_while_it_runs_runs_again(store):
    """A note changed while its job runs: the job read the note before the change, so an
    enqueue then marks it to run again, and its end queues it (with max_attempts more
    attempts; the attempt number keeps counting, as a lease is a worker and an attempt number)
    instead of ending it; while the job is only queued, an enqueue adds nothing."""
    nid = store.add("the note", user_id="r", enqueue_evolution=True)
    with store.engine.begin() as conn:
        assert jobq.enqueue(conn, ["r"], [nid]) == 0  # queued: it will read the note as it is
    with store.engine.begin() as conn:
        (job,) = jobq.take(conn, "w1")
    with store.engine.begin() as conn:  # asked for again while it runs (twice: one more run)
        assert jobq.enqueue(conn, ["r", "r"], [nid, nid]) == 0
        assert jobq.enqueue(conn, ["r"], [nid]) == 0
    with store.engine.begin() as conn:
        assert (jobq.counts(conn)["running"], jobq.counts(conn)["run_again"]) == (1, 1)
        assert jobq.counts(conn, user_id="other")["run_again"] == 0
    from typer.testing import CliRunner

    from cortex_pg.cli import app

    shown = CliRunner().invoke(app, ["--database-url", store.engine.url.render_as_string(False), "jobs"])
    assert shown.exit_code == 0 and "running  1 (1 to run again)" in shown.output, shown.output
    with store.engine.begin() as conn:
        assert jobq.finish(conn, job, {"seen": "before the change"}) is True
    (row,) = _jobs(store)
    assert (row.status, row.attempts, _max_attempts(store)) == ("queued", 1, 6)  # 5 more attempts
    with store.engine.begin() as conn:
        (again,) = jobq.take(conn, "w1")  # the same worker takes it again: attempt 2
        assert (again.id, again.attempts) == (job.id, 2)
    with store.engine.begin() as conn:  # the first run's lease is void: its attempt number differs
        assert jobq.finish(conn, job, {"seen": "a stale holder"}) is False
    with store.engine.begin() as conn:
        assert jobq.finish(conn, again, {"seen": "after"}) is True
    (row,) = _jobs(store)
    assert (row.status, row.result) == ("done", {"seen": "after"})


def test_a_failed_job_asked_for_again_is_queued_with_a_fresh_budget(store):
    nid = store.add("the failing note", user_id="r", enqueue_evolution=True)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cortex.evolution_jobs SET max_attempts = 1"))
        (job,) = jobq.take(conn, "w1")
    with store.engine.begin() as conn:
        jobq.enqueue(conn, ["r"], [nid])
    with store.engine.begin() as conn:  # its last attempt: failed for good, were it not asked again
        assert jobq.fail(conn, job, "boom", backoff=30) == "queued"
    (row,) = _jobs(store)
    assert (row.status, row.attempts, _max_attempts(store)) == ("queued", 1, 2)
    assert Worker(store, listen=False).process_available() == 1  # at once, not after the backoff
    assert _jobs(store)[0].status == "done"


def test_jobs_on_a_schema_behind_says_to_upgrade(db_url):
    """``cortex-pg jobs`` reads the queue's current columns; on an older schema it says to
    upgrade (exit status 2) instead of failing on a missing column, and migrates nothing."""
    from typer.testing import CliRunner

    from cortex_pg.cli import app
    from cortex_pg.db import migrate
    from cortex_pg.db.engine import create_engine_for

    engine = create_engine_for(db_url)
    try:
        migrate.downgrade(engine, "0030")
        shown = CliRunner().invoke(app, ["--database-url", db_url, "jobs"])
        assert shown.exit_code == 2 and "cortex-pg db upgrade" in shown.output, shown.output
        assert migrate.current_revision(engine) == "0030"
    finally:
        migrate.upgrade(engine)
        engine.dispose()


def test_bad_job_kinds_are_refused(store, db_url):
    """enqueue_evolution is a bool or a note job's kind; a worker's kinds are a sequence, and
    one that takes ``prem`` jobs needs the Prem analysis as its preprocess."""
    from cortex_pg.embeddings import HashingEmbedder
    from cortex_pg.errors import ValidationError
    from cortex_pg.store import MemoryStore

    for bad in (2, 1.5, [1], "bogus", "collection", "PREM"):
        with pytest.raises(ValidationError) as err:
            store.add("a note", user_id="k", enqueue_evolution=bad)
        assert err.value.field == "enqueue_evolution"
    for call in (
        lambda: MemoryStore.open(
            db_url, embedder=HashingEmbedder(), auto_migrate=False, enqueue_evolution="bogus"
        ),
        lambda: store.add("an STM note", user_id="k", to_ltm=False, enqueue_evolution="bogus"),
        lambda: store.add_many([], enqueue_evolution="bogus", bulk=True),
    ):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == "enqueue_evolution"
    assert store.count(user_id="k") == 0
    store.add("a note", user_id="k", enqueue_evolution="prem")
    with store.engine.connect() as conn:
        assert jobq.counts(conn, user_id="k")["prem_queued"] == 1
    for bad in ("prem", None, ("evolv",)):
        with pytest.raises(ValueError, match="sequence"):
            Worker(store, kinds=bad)
    assert Worker(store, kinds=(k for k in ("evolve",))).kinds == ("evolve",)
    with pytest.raises(ValueError, match="preprocess"):
        Worker(store, kinds=["prem"])
    assert Worker(store, listen=False).run_one() is False  # a plain worker leaves the prem job
