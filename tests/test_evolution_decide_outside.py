"""An ``evolve`` job asks its decider outside its transaction (no row lock held while an LLM
answers), and applies the decision only if the neighbourhood it was made on is unchanged."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import text

from cortex_pg.evolution import Worker
from cortex_pg.evolution.worker import STALE_DECISIONS

# sessions of this database waiting for a lock
WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


def _answer(hood, context: str) -> dict:  # noqa: ANN001 - an LLM-shaped decision
    return {
        "should_evolve": True,
        "actions": ["update_neighbor"],
        "new_tags_neighborhood": [list(n.tags) for n in hood],
        "new_context_neighborhood": [context for _ in hood],
    }


def _notes(store) -> tuple[str, str, str]:  # noqa: ANN001
    scope = {"user_id": "u", "session_id": "s", "to_stm": False}
    a = store.add("harbour boats wind rain", tags=["sea"], **scope)
    b = store.add("harbour boats wind sail", tags=["sea"], **scope)
    new = store.add("sail tide moon harbour", enqueue_evolution=True, **scope)
    return a, b, new


def test_touching_reads_do_not_wait_for_a_slow_decider(store):
    """While the decider answers, a search that touches the note and its neighbours and a
    touching get of the note complete; before, the job held the note's lock through the call."""
    a, b, new = _notes(store)
    asked, release = threading.Event(), threading.Event()

    def decider(note, hood):  # noqa: ANN001, ANN202 - blocks like a slow LLM call
        asked.set()
        release.wait(60)
        return _answer(hood, "a harbour note")

    worker = Worker(store, decider=decider, listen=False)
    job = threading.Thread(target=worker.process_available)
    job.start()
    try:
        assert asked.wait(30)
        found: dict = {}
        reader = threading.Thread(
            target=lambda: found.update(
                search={str(r.id) for r in store.search("harbour sail tide", user_id="u", limit=3)},
                get=store.get(new, user_id="u", touch=True).access_count,
            )
        )
        reader.start()
        reader.join(20)
        alive = reader.is_alive()
        with store.engine.connect() as conn:
            waiting = conn.execute(text(WAITING)).scalar_one()
    finally:
        release.set()
        job.join(60)
        reader.join(60)
    assert not alive and waiting == 0, "the touching reads waited for the decider"
    assert found["search"] == {a, b, new} and found["get"] >= 1
    assert worker.stats.done == 1
    assert {store.get(i, user_id="u").context for i in (a, b)} == {"a harbour note"}


def test_a_decision_on_a_changed_neighbourhood_is_made_again(store):
    """A neighbour's tags change while the decider answers: that answer is dropped and the
    decider asked again on the neighbourhood as it now is; only the second answer is applied."""
    a, b, new = _notes(store)
    seen: list[dict] = []

    def decider(note, hood):  # noqa: ANN001, ANN202
        seen.append({str(n.id): list(n.tags) for n in hood})
        if len(seen) == 1:  # another writer changes a neighbour meanwhile
            store.update(a, user_id="u", tags=["sea", "storm"])
        return _answer(hood, f"answer {len(seen)}")

    worker = Worker(store, decider=decider, listen=False)
    assert worker.process_available() == 1
    assert len(seen) == 2
    assert seen[0][a] == ["sea"] and seen[1][a] == ["sea", "storm"]
    assert {store.get(i, user_id="u").context for i in (a, b)} == {"answer 2"}
    assert store.get(a, user_id="u").tags == ["sea", "storm"]  # the other writer's change kept
    assert worker.stats.done == 1


def test_a_neighbourhood_that_keeps_changing_is_decided_under_the_lock(store, caplog):
    """After STALE_DECISIONS dropped answers the job decides with the note and every note shown
    locked, in the touching reads' order, so it ends: a touching search of the notes waits for
    that answer and does not deadlock, even when the answer links to a lower id than the note's."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    low, middle, note = (f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))
    scope = {"user_id": "u", "session_id": "s", "to_stm": False}
    store.add("harbour boats wind rain", id=low, tags=["sea"], **scope)
    store.add("pelican quartz marmalade", id=middle, tags=["bird"], **scope)
    store.add("harbour boats wind sail", id=note, enqueue_evolution=True, **scope)
    calls: list[int] = []
    found: dict = {}

    def decider(view, hood):  # noqa: ANN001, ANN202
        calls.append(len(calls) + 1)
        if len(calls) <= STALE_DECISIONS:  # every answer made outside the lock goes stale
            with store.engine.begin() as conn:
                conn.execute(
                    text("UPDATE cortex.notes SET tags = :t WHERE user_id = 'u' AND id = CAST(:id AS uuid)"),
                    {"t": [f"v{len(calls)}"], "id": middle},
                )
        else:  # under the lock: a touching search of the low note and the note waits for it
            reader = threading.Thread(
                target=lambda: found.update(
                    ids=sorted(str(r.id) for r in store.search("harbour boats wind", user_id="u", limit=2))
                )
            )
            reader.start()
            found["reader"] = reader
            with store.engine.connect() as conn:
                for _ in range(1500):
                    if conn.execute(text(WAITING)).scalar_one():
                        found["waited"] = True
                        break
                    conn.rollback()  # pg_stat_activity is read once per transaction
                    time.sleep(0.02)
        return {
            **_answer(hood, f"answer {len(calls)}"),
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": [{"id": low, "type": "related", "strength": 0.8, "reason": "harbour"}],
        }

    worker = Worker(store, decider=decider, listen=False)
    assert worker.process_available() == 1
    found["reader"].join(30)
    assert len(calls) == STALE_DECISIONS + 1  # the last one under the lock
    assert found.get("waited") and found["ids"] == [low, note]
    assert [r.getMessage() for r in caplog.records if "40P01" in r.getMessage()] == []
    assert store.get(low, user_id="u").context == f"answer {STALE_DECISIONS + 1}"
    assert worker.stats.done == 1


def test_a_note_deleted_during_the_decision_ends_its_job(store):
    """Deleting the note deletes its job; the worker ends it quietly, not as a lost lease."""
    a, b, new = _notes(store)

    def decider(note, hood):  # noqa: ANN001, ANN202
        store.delete(new, user_id="u")
        return _answer(hood, "never written")

    worker = Worker(store, decider=decider, listen=False)
    assert worker.process_available() == 1
    assert (worker.stats.done, worker.stats.lost, worker.stats.failed) == (1, 0, 0)
    assert {store.get(i, user_id="u").context for i in (a, b)} == {None}


def test_a_job_taken_over_is_not_decided_again(store):
    """A worker whose lease expired during a slow decision stops at its next read: it does not
    ask the decider again for a job another worker has taken."""
    a, b, new = _notes(store)
    calls: list[str] = []

    def decider(note, hood):  # noqa: ANN001, ANN202
        calls.append("first")
        if len(calls) == 1:
            store.update(a, user_id="u", tags=["sea", "storm"])  # so this answer goes stale
            with store.engine.begin() as conn:  # another worker takes the job over meanwhile
                conn.execute(
                    text("UPDATE cortex.evolution_jobs SET locked_by = 'other', attempts = attempts + 1")
                )
        return _answer(hood, "late")

    worker = Worker(store, decider=decider, listen=False)
    assert worker.process_available() == 1
    assert calls == ["first"] and worker.stats.lost == 1
