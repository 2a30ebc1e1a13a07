"""An ``evolve`` job asks its decider outside its transaction (no row lock held while an LLM
answers), and applies the decision only if the neighbourhood it was made on is unchanged."""

from __future__ import annotations

import threading

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


def test_a_neighbourhood_that_keeps_changing_is_decided_under_the_lock(store):
    """After STALE_DECISIONS dropped answers the job decides with the note locked, so it ends."""
    a, b, new = _notes(store)
    calls: list[int] = []

    def decider(note, hood):  # noqa: ANN001, ANN202
        calls.append(len(calls) + 1)
        if len(calls) <= STALE_DECISIONS + 1:  # every answer made outside the lock goes stale
            with store.engine.begin() as conn:
                conn.execute(
                    text("UPDATE cortex.notes SET tags = :t WHERE user_id = 'u' AND id = CAST(:id AS uuid)"),
                    {"t": [f"v{len(calls)}"], "id": b},
                )
        return _answer(hood, f"answer {len(calls)}")

    worker = Worker(store, decider=decider, listen=False)
    assert worker.process_available() == 1
    assert len(calls) == STALE_DECISIONS + 2  # the last one under the lock
    assert store.get(a, user_id="u").context == f"answer {STALE_DECISIONS + 2}"
    assert worker.stats.done == 1
