"""Writers that update several notes lock them in the touching reads' order (LTM rows by id,
then STM rows by id; see cortex.touch_notes), so a touching search or read waits for them, and
they for it, without a deadlock.

Each test arranges the interleaving that deadlocked before: a third transaction holds a row
lock so that the touching read and the writer each take part of their rows and then wait.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from cortex_pg import NotFoundError
from cortex_pg.compat.calute import LongTermMemory
from cortex_pg.evolution.evolve import decide, evolve_note, read_neighbourhood

IDS = [f"00000000-0000-4000-8000-00000000000{i}" for i in range(1, 4)]  # in uuid order
HOLD = "SELECT 1 FROM {table} WHERE id = CAST(:id AS uuid) FOR SHARE"
# sessions of this database waiting for a lock (a row lock shows as a transactionid or tuple wait)
WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


def _deadlocks(caplog) -> list[str]:  # noqa: ANN001
    return [
        r.getMessage() for r in caplog.records if r.name == "cortex_pg.db.retry" and "40P01" in r.getMessage()
    ]


def _session_notes(store, **contents: str) -> None:  # noqa: ANN001
    """Store notes of user u, session s, named after IDS in order (the first keyword gets
    IDS[0], ...), LTM only, no evolution job."""
    for nid, content in zip(IDS, contents.values(), strict=False):
        store.add(content, id=nid, user_id="u", session_id="s", enqueue_evolution=False, to_stm=False)


def _race(store, held, first, second, table: str = "cortex.notes", hold: str | None = None) -> dict:  # noqa: ANN001
    """Run ``first``, then ``second``, in threads while a third transaction holds ``held`` (a
    row, FOR SHARE; or, with ``hold``, what that statement locks, ``held`` its parameters): each
    is started once the one before waits for a lock, and the lock is released once both wait.
    Returns each call's result or the error it raised."""
    out: dict = {}

    def run(name: str, fn) -> None:  # noqa: ANN001
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out[name] = exc

    with store.engine.connect() as holder, store.engine.connect() as watcher:
        holder.execute(text(hold or HOLD.format(table=table)), held if hold else {"id": held})
        threads = [
            threading.Thread(target=run, args=(n, f)) for n, f in (("first", first), ("second", second))
        ]
        for waiting, t in enumerate(threads, start=1):
            t.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                count = watcher.execute(text(WAITING)).scalar_one()
                watcher.rollback()  # pg_stat_activity is read once per transaction
                if count >= waiting:
                    break
                time.sleep(0.02)
        holder.commit()
    for t in threads:
        t.join(30)
    return out


def test_calute_merge_similar_beside_a_touching_read_does_not_deadlock(store, caplog):
    """The read touches K, M, D in id order and waits on M; merge_similar (keep K, drop D) used to
    update D, then wait on K: a cycle once M was free. It now locks K and D in id order first."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    keep, middle, drop = IDS
    scope = {"user_id": "u", "session_id": "s", "memory_type": "long_term", "to_stm": False}
    store.add("alpha bravo charlie delta echo foxtrot", id=keep, **scope)
    store.add("pelican quartz marmalade", id=middle, **scope)
    store.add("alpha bravo charlie delta echo", id=drop, **scope)  # 5 of 6 words: merged into keep
    ltm = LongTermMemory(store=store, user_id="u", session_id="s")

    out = _race(store, middle, lambda: len(ltm.retrieve(limit=10)), lambda: ltm.merge_similar(0.8))

    assert out == {"first": 3, "second": 1}
    assert _deadlocks(caplog) == []
    with pytest.raises(NotFoundError):  # merged away: deleted, as calute removes it
        store.get(drop, user_id="u")
    assert store.get(keep, user_id="u").access_count == 2  # its own touch and the dropped item's


@pytest.mark.parametrize("actions", [["update_neighbor"], ["strengthen", "update_neighbor"]])
def test_evolution_updating_neighbours_beside_a_touching_search_does_not_deadlock(store, caplog, actions):
    """The search touches H and M in id order and waits on one of them; the job on N used to
    update its neighbours by distance (M, the nearer, then H), or to take a share lock on its link
    target M first: holding M, it waited on H while the search, holding H, waited on M. It now
    locks every note it links to or updates in id order before its first write."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    far, near, note = IDS
    _session_notes(
        store, far="harbour boats wind rain", near="harbour boats wind sail", note="sail tide moon"
    )

    def decider(view, hood):  # noqa: ANN001, ANN202 - what an LLM decider answers
        return {
            "should_evolve": True,
            "actions": actions,
            "suggested_connections": [
                {"id": near, "type": "related", "strength": 0.8, "reason": "same harbour"}
            ],
            "tags_to_update": list(view.tags),
            "new_tags_neighborhood": [["harbour"] for _ in hood],
            "new_context_neighborhood": ["a harbour note" for _ in hood],
        }

    def evolve() -> int:
        with store.engine.begin() as conn:
            return evolve_note(conn, store.embedder, decider, "u", note)["neighbours_updated"]

    def search() -> list[str]:
        return sorted(str(r.id) for r in store.search("harbour boats wind", user_id="u", limit=2))

    out = _race(store, near if "strengthen" in actions else far, search, evolve)

    assert out == {"first": [far, near], "second": 2}
    assert _deadlocks(caplog) == []
    assert {store.get(i, user_id="u").context for i in (far, near)} == {"a harbour note"}


@pytest.mark.parametrize("ahead", [True, False], ids=["decided-before", "decided-in-transaction"])
def test_evolution_job_locks_its_note_in_id_order_beside_a_touching_search(store, caplog, ahead):
    """The search touches A and the job's note N (A < N) and waits on A; a job used to lock N
    first, then A to write to it: holding N, it waited on A while the search, holding A, waited
    on N. It now locks every note the decision writes, N among them, in id order, whether the
    decision was made before its transaction (a slow decider) or in it."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    near, other, note = IDS
    _session_notes(
        store,
        near="harbour boats wind rain",
        other="pelican quartz marmalade",
        note="harbour boats wind sail",
    )

    def decider(view, hood):  # noqa: ANN001, ANN202
        return {
            "should_evolve": True,
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": [{"id": near, "type": "related", "strength": 0.8, "reason": "harbour"}],
            "tags_to_update": ["harbour"],
            "new_tags_neighborhood": [["harbour"] for _ in hood],
            "new_context_neighborhood": ["a harbour note" for _ in hood],
        }

    decided = None
    if ahead:  # decided before the job's transaction, as the worker does with a slow decider
        with store.engine.begin() as conn:
            decided = decide(decider, read_neighbourhood(conn, "u", uuid.UUID(note), store.embedder.name))

    def evolve() -> int:
        with store.engine.begin() as conn:
            out = evolve_note(conn, store.embedder, decider, "u", note, decided=decided, on_stale="raise")
        return out["neighbours_updated"]

    def search() -> list[str]:
        return sorted(str(r.id) for r in store.search("harbour boats wind", user_id="u", limit=2))

    out = _race(store, near, search, evolve)

    assert out == {"first": [near, note], "second": 2}
    assert _deadlocks(caplog) == []
    assert store.get(note, user_id="u").tags == ["harbour"]


def test_delete_where_beside_a_touching_search_does_not_deadlock(store, caplog):
    """The search touches A, B, C in id order and waits on B; delete_where deleted in its plan's
    order (C, the first stored, first): holding C, it waited on B, then the search on C. It now
    locks the session's notes in id order before it deletes them."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    first, middle, last = IDS
    for nid in (last, middle, first):  # stored newest id first
        store.add(f"harbour boats wind, note {nid[-1]}", id=nid, user_id="u", session_id="s", to_stm=False)

    def search() -> int:
        return len(store.search("harbour boats wind", user_id="u", limit=3))

    out = _race(store, middle, search, lambda: store.delete_where(user_id="u", session_id="s"))

    assert out == {"first": 3, "second": 3}
    assert _deadlocks(caplog) == []
    assert store.count(user_id="u", session_id="s") == 0


def test_calute_delete_beside_a_touching_read_does_not_deadlock(store, caplog):
    """calute's filtered delete took its row locks in scan order (high id first here): holding
    the high item, it waited on the low one while the touching read, holding the low item,
    waited on the high one. It now locks the items it deletes in id order first."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    low, middle, high = IDS
    scope = {"user_id": "u", "session_id": "s", "memory_type": "long_term", "to_stm": False}
    store.add("delete me alpha", id=high, metadata={"gone": True}, **scope)
    store.add("keep me bravo", id=middle, **scope)
    store.add("delete me charlie", id=low, metadata={"gone": True}, **scope)
    ltm = LongTermMemory(store=store, user_id="u", session_id="s")

    out = _race(
        store, middle, lambda: len(ltm.retrieve(limit=10)), lambda: ltm.delete(filters={"gone": True})
    )

    assert out["second"] == 2 and out["first"] in (1, 3)  # the read saw the items before or after
    assert _deadlocks(caplog) == []
    assert [n.id for n in store.list_notes(user_id="u", session_id="s")] == [middle]


@pytest.mark.parametrize("how", ["expire", "trim", "both"])
def test_calute_cleanup_beside_a_touching_read_does_not_deadlock(store, caplog, how):
    """calute's cleanup deletes the expired items and the lowest-scored over capacity in one
    statement, locking them in id order. Expiry deleted in scan order (the high item, stored
    first, first) and deadlocked here, and so did expiring the high item and then trimming the
    low one in two statements; the trim alone, in its plan's order, did not happen to."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    low, middle, high = IDS
    now = datetime.now(UTC)
    old = "2000-01-01T00:00:00Z"
    times = {  # over capacity, the newer item scores higher, so the high one goes first
        "expire": {high: old, low: old},
        "trim": {high: now - timedelta(hours=1), low: now - timedelta(hours=2)},
        "both": {high: old, low: now - timedelta(hours=2)},
    }[how]
    ltm = LongTermMemory(store=store, user_id="u", session_id="s", max_items=10, retention_days=30)
    scope = {"user_id": "u", "session_id": "s", "memory_type": "long_term", "to_stm": False}
    store.add("old item alpha", id=high, time=times[high], importance=0.0, **scope)
    store.add("kept item bravo", id=middle, importance=1.0, **scope)
    store.add("old item charlie", id=low, time=times[low], importance=0.0, **scope)
    if how != "expire":
        ltm.max_items = 1  # keeps the most important: middle

    out = _race(store, middle, lambda: len(ltm.retrieve(limit=10)), lambda: ltm.cleanup().removed)

    assert out["second"] == 2 and out["first"] in (1, 3)
    assert _deadlocks(caplog) == []
    assert [n.id for n in store.list_notes(user_id="u", session_id="s")] == [middle]
    report = ltm.last_cleanup
    expected = {"expire": ([low, high], []), "trim": ([], [low, high]), "both": ([high], [low])}[how]
    assert (sorted(report.expired), sorted(report.over_capacity)) == expected


def test_a_write_of_several_batches_evicting_from_stm_beside_a_touching_search(store, caplog):
    """STM holds A, B, C (capacity 3) with C, then A, least recently used; an add_many of two
    notes in two batches evicts both. Each batch evicted its own (C, then A): holding C, the
    write waited on A while the touching search, holding A, waited on C. The write now evicts
    once, after its last batch, locking A and C in id order."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    store.stm_capacity = 3
    a, b, c = IDS
    for nid, word in ((a, "alpha"), (b, "bravo"), (c, "charlie")):
        store.add(f"harbour boats wind {word}", id=nid, user_id="u", session_id="s")
    with store.engine.begin() as conn:  # least recently used: C, then A
        for nid, hours in ((c, 1), (a, 2), (b, 3)):
            conn.execute(
                text(
                    "UPDATE cortex.stm_notes SET last_accessed_at = now() + make_interval(hours => :h) "
                    "WHERE id = CAST(:id AS uuid)"
                ),
                {"h": hours, "id": nid},
            )

    def search() -> int:
        return len(store.search("harbour boats wind", user_id="u", limit=3, memory_source="stm"))

    def write() -> int:
        items = [{"content": "sail tide moon one"}, {"content": "sail tide moon two"}]
        return len(store.add_many(items, user_id="u", session_id="s", batch_size=1))

    out = _race(store, b, search, write, table="cortex.stm_notes")

    assert out == {"first": 3, "second": 2}
    assert _deadlocks(caplog) == []
    with store.engine.connect() as conn:
        left = {str(r[0]) for r in conn.execute(text("SELECT id FROM cortex.stm_notes WHERE user_id = 'u'"))}
    assert b in left and a not in left and c not in left and len(left) == 3


# the scope lock of (:u, :s), as writers take it (store.sql.LOCK_SCOPES)
SCOPE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(:u || chr(31) || :s, 0))"


def _write_to_scope(store) -> bool:  # noqa: ANN001
    return (
        store.add("a new note of the same session", user_id="u", session_id="s", enqueue_evolution=False) > ""
    )


@pytest.mark.parametrize("by_id", [True, False], ids=["delete", "delete_where"])
def test_a_delete_beside_a_write_of_its_scope_does_not_deadlock(store, caplog, by_id):
    """The write waits for the scope lock, held by a third transaction; the delete used to remove
    the note from both tiers (updating the tenant's BM25 counter row) and then wait for the scope
    lock in the STM trigger, behind the write, which, granted the lock, waited for the counter
    row. It now takes the scope lock before it changes anything (and runs after the write)."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    doomed = store.add("the note to delete", user_id="u", session_id="s", enqueue_evolution=False)

    def delete() -> int:
        if by_id:
            return int(store.delete(doomed, user_id="u"))
        return store.delete_where(user_id="u", session_id="s")

    out = _race(store, {"u": "u", "s": "s"}, lambda: _write_to_scope(store), delete, hold=SCOPE_LOCK)

    assert out == {"first": True, "second": 1 if by_id else 2}  # delete_where takes the new note too
    assert _deadlocks(caplog) == []
    assert store.count(user_id="u") == (1 if by_id else 0)


def test_an_evolution_merge_beside_a_write_of_its_session_does_not_deadlock(store, caplog):
    """As above, with an evolution job that merges its note into a neighbour (it removes the
    note from the BM25 corpus, then deletes its STM copy): it now takes the session's scope lock
    before its row locks."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    keep, note = IDS[0], IDS[1]
    for nid, content in ((keep, "alpha bravo charlie delta"), (note, "alpha bravo charlie delta echo")):
        store.add(content, id=nid, user_id="u", session_id="s", enqueue_evolution=False)  # both tiers

    def decider(view, hood):  # noqa: ANN001, ANN202
        return {
            "should_evolve": True,
            "actions": ["merge_memories"],
            "merge_candidates": [{"id": keep, "merge_strategy": "augment", "reasoning": "the same words"}],
        }

    def evolve() -> str | None:
        with store.engine.begin() as conn:
            return evolve_note(conn, store.embedder, decider, "u", note)["merged_into"]

    out = _race(store, {"u": "u", "s": "s"}, lambda: _write_to_scope(store), evolve, hold=SCOPE_LOCK)

    assert out == {"first": True, "second": keep}
    assert _deadlocks(caplog) == []
    assert store.get(note, user_id="u").merged_into == keep


def test_a_calute_delete_beside_a_write_of_its_scope_does_not_deadlock(store, caplog):
    """calute's delete of a short-term item (its STM row) beside a calute write of the same scope,
    which evicts from STM under the scope lock: the delete now takes the scope lock first."""
    from cortex_pg.compat.calute import ShortTermMemory

    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    stm = ShortTermMemory(capacity=1, store=store, user_id="u", session_id="s")
    doomed = stm.save("the item to delete").memory_id

    out = _race(store, {"u": "u", "s": "s"}, lambda: stm.save("the next item").memory_id != doomed,
                lambda: stm.delete(doomed), hold=SCOPE_LOCK)  # fmt: skip

    assert out["first"] is True and out["second"] in (0, 1)
    assert _deadlocks(caplog) == []


def test_two_writes_of_several_batches_take_their_scope_locks_in_one_order(store, caplog):
    """Each write's first batch takes one scope lock and waits on the tenant's BM25 counter row
    (held by a third transaction); granted the row, a write used to take its second batch's scope
    lock, held by the other write, which waited for the row: a cycle. A write of several batches
    now takes all its scope locks, sorted, before its first batch."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    store.add("the tenant's first note", user_id="u", session_id="a", enqueue_evolution=False)

    def write(first: str, second: str) -> int:
        items = [{"content": f"a note of session {s}", "session_id": s} for s in (first, second)]
        return len(store.add_many(items, user_id="u", batch_size=1, enqueue_evolution=False))

    counter_row = "SELECT 1 FROM cortex.bm25_corpus WHERE user_id = :u FOR SHARE"
    out = _race(store, {"u": "u"}, lambda: write("b", "c"), lambda: write("c", "b"), hold=counter_row)

    assert out == {"first": 2, "second": 2}
    assert _deadlocks(caplog) == []


def test_delete_where_of_a_session_waits_for_a_write_in_progress_there(store, caplog):
    """A session with no STM rows (its notes long-term only): delete_where of it still takes its
    scope lock first, so it waits for a write in progress in the session and then deletes that
    note too. It used to lock only sessions with STM rows, and a write that filled the session
    meanwhile could hold the lock while waiting for the delete's BM25 counter row."""
    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")
    store.add("a long-term note", user_id="u", session_id="s", to_stm=False, enqueue_evolution=False)

    out = _race(store, {"u": "u", "s": "s"}, lambda: _write_to_scope(store),
                lambda: store.delete_where(user_id="u", session_id="s"), hold=SCOPE_LOCK)  # fmt: skip

    assert out == {"first": True, "second": 2}  # after the write, so its note went too
    assert _deadlocks(caplog) == [] and store.count(user_id="u") == 0
