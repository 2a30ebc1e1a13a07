"""Short-term memory emptied by crash recovery is reported, never silent.

A real embedded server of its own, killed with SIGKILL (no shutdown checkpoint) and started
again (crash recovery empties the UNLOGGED tables); a clean restart in between shows that
what a clean restart keeps is not reported. Pinned: the first store opened after the crash
warns with the counts (typed ``STMLostWarning``, logged), later opens do not; ``stats()``,
``stm_losses``/``stm_lost_at`` and ``cortex.stm_losses`` report per user and session, with
the crash recovery (as the server started again) as the time; the facades' short-term reads
warn while nothing was written to the scope since, once per store; writing again ends that
for the scope written, keeps the time, and a second crash moves the time of the scopes it
emptied only; long-term memory and users without STM are untouched.

A backend killed with SIGKILL (the OOM killer) makes the postmaster run crash recovery without
restarting (``pg_postmaster_start_time()`` stays): each loss is still counted by one open only,
dated at that crash recovery (never before the session's STM began), whether an open or a write
finds it first; a later crash counts only the sessions written since. An upgrade from the
revision that compared times to tell a counted loss pins the losses it had counted.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex_pg import STMLostWarning
from cortex_pg.compat.calute.short_term import ShortTermMemory
from cortex_pg.compat.prem import AgenticMemorySystem
from cortex_pg.db import embedded, migrate
from cortex_pg.db.engine import create_engine_for
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from tests.helpers.server_crash import crash_backend, kill_server

pytestmark = pytest.mark.crash


def _open(url: str) -> MemoryStore:
    return MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=True)


def _stm_warnings(record: list[warnings.WarningMessage]) -> list[STMLostWarning]:
    return [w.message for w in record if isinstance(w.message, STMLostWarning)]


@pytest.fixture
def server():
    data = Path(tempfile.mkdtemp(prefix="cortex-stm-loss-"))
    try:
        yield data, embedded.start(data)
    finally:
        embedded.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_stm_lost_to_crash_recovery_is_reported(server, caplog):
    data, url = server
    first = _open(url)  # migrates the new database
    first.add("alice told the assistant her flight leaves at nine", user_id="alice", session_id="s1")
    alice_s2 = ShortTermMemory(store=first, user_id="alice", session_id="s2")
    alice_s2.save("alice is drafting the quarterly report")
    prem = AgenticMemorySystem(store=first, enable_background_processing=False)
    prem.add_note("bob prefers tea in the afternoon", user_id="bob")
    first.add("carol keeps only long-term notes", user_id="carol", to_stm=False)
    assert first.stats()["stm_notes"] == 3 and first.stats()["ltm_notes"] == 3
    # STM emptied on purpose before the crash has nothing to lose: never reported
    dave = first.add("dave's passing thought", user_id="dave", session_id="d1")
    first.delete(dave, user_id="dave")
    first.add("erin's note", user_id="erin", session_id="e1")
    assert first.delete_where(user_id="erin", session_id="e1") >= 1

    # a clean restart keeps UNLOGGED tables: nothing to report
    embedded.stop(data)
    embedded.start(data)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        clean = _open(url)
    assert _stm_warnings(record) == []
    assert clean.stats()["stm_notes"] == 3
    assert clean.stats()["stm_lost_at"] is None and clean.stm_losses() == []
    clean.close()

    # a crash: the postmaster killed, crash recovery at the next start
    killed_at = datetime.now(UTC)
    kill_server(data)
    embedded.start(data)
    restarted = datetime.now(UTC)
    caplog.set_level(logging.WARNING, logger="cortex_pg.store.stm_loss")
    with pytest.warns(STMLostWarning) as record:
        after = _open(url)
    [opened] = _stm_warnings(record)
    assert (opened.user_id, opened.sessions, opened.users) == (None, 3, 2)
    assert killed_at <= opened.lost_at <= restarted  # the recovery, as the server started
    assert "3 session(s) of 2 user(s)" in caplog.text
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _open(url).close()  # the loss was reported by the first open after the crash
    assert _stm_warnings(record) == []

    lost_at = opened.lost_at
    stats = after.stats()
    assert (stats["stm_notes"], stats["ltm_notes"]) == (0, 3)  # STM emptied, LTM intact
    assert (stats["stm_lost_at"], stats["stm_lost_sessions"]) == (lost_at, 3)
    assert after.stats(user_id="alice")["stm_lost_sessions"] == 2
    assert after.stats(user_id="carol")["stm_lost_at"] is None  # never had STM
    assert [(x.user_id, x.session_id, x.written_since) for x in after.stm_losses()] == [
        ("alice", "s1", False),
        ("alice", "s2", False),
        ("bob", "default", False),
    ]
    assert after.stm_lost_at(user_id="alice", session_id="s2") == lost_at
    with after.engine.connect() as conn:  # the same from SQL
        rows = conn.execute(text("SELECT session_id, lost_at FROM cortex.stm_losses('alice')")).all()
    assert rows == [("s1", lost_at), ("s2", lost_at)]

    # the facades' short-term reads say so: the store opened before the crash reconnects
    with pytest.warns(STMLostWarning) as record:
        assert alice_s2.search("quarterly report") == []
    [read] = _stm_warnings(record)
    assert (read.user_id, read.sessions, read.lost_at) == ("alice", ("s2",), lost_at)
    assert alice_s2.stm_lost_at == lost_at
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert alice_s2.get_recent() == []  # said once per store and loss
        assert prem.search("tea", user_id="bob", memory_source="ltm")  # LTM: nothing to say
    assert _stm_warnings(record) == []
    with pytest.warns(STMLostWarning, match="'bob'"):
        assert prem.search("tea", user_id="bob", memory_source="stm") == []

    # writing to a scope ends the warnings for it; the loss stays on record
    after.add("alice landed safely", user_id="alice", session_id="s1")
    fresh = _open(url)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ShortTermMemory(store=fresh, user_id="alice", session_id="s1").get_recent()
    assert _stm_warnings(record) == []
    losses = {x.session_id: x for x in fresh.stm_losses(user_id="alice")}
    assert (losses["s1"].written_since, losses["s1"].lost_at) == (True, lost_at)
    assert losses["s2"].written_since is False
    assert fresh.stats()["stm_lost_sessions"] == 2
    fresh.close()
    after.close()

    # a second crash: the scope written since gets the new time, the others keep theirs
    kill_server(data)
    embedded.start(data)
    with pytest.warns(STMLostWarning) as record:
        second = _open(url)
    [again] = _stm_warnings(record)
    assert (again.sessions, again.users) == (1, 1)  # only alice/s1 had STM to lose
    assert again.lost_at > lost_at
    losses = {(x.user_id, x.session_id): x.lost_at for x in second.stm_losses()}
    assert losses == {("alice", "s1"): again.lost_at, ("alice", "s2"): lost_at, ("bob", "default"): lost_at}
    second.close()
    prem.shutdown()
    first.close()


def _began(store: MemoryStore, user_id: str, session_id: str) -> datetime:
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT began_at FROM cortex.stm_scopes WHERE user_id = :u AND session_id = :s"),
            {"u": user_id, "s": session_id},
        ).scalar_one()


def _postmaster_started(store: MemoryStore) -> datetime:
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT pg_postmaster_start_time()")).scalar_one()


def _lost(store: MemoryStore) -> dict[tuple[str, str], datetime]:
    return {(x.user_id, x.session_id): x.lost_at for x in store.stm_losses()}


def test_a_backend_crash_is_dated_at_its_recovery_and_counted_once(server):
    """The QA case (qa/stm_backend_crash_twice.py): a backend killed, the postmaster stays."""
    _data, url = server
    first = _open(url)
    first.add("alice's flight leaves at nine", user_id="alice", session_id="s1")
    first.add("bob prefers tea", user_id="bob", session_id="b1")
    began = {k: _began(first, *k) for k in [("alice", "s1"), ("bob", "b1")]}
    postmaster = _postmaster_started(first)
    assert all(t > postmaster for t in began.values())  # the sessions began after the server started

    killed_at = crash_backend(url)
    recovered = datetime.now(UTC)
    assert _postmaster_started(first) == postmaster  # no postmaster restart: a crash-restart cycle
    # seen before any open (not yet counted): dated at the crash recovery
    assert first.stats()["stm_notes"] == 0
    assert all(killed_at <= t <= recovered for t in _lost(first).values())
    with pytest.warns(STMLostWarning) as record:
        after = _open(url)
    [opened] = _stm_warnings(record)
    assert (opened.sessions, opened.users) == (2, 2)
    assert killed_at <= opened.lost_at <= recovered
    assert _lost(after) == {("alice", "s1"): opened.lost_at, ("bob", "b1"): opened.lost_at}
    assert all(opened.lost_at >= t for t in began.values())

    # a session begun after the first crash, then a second one: only it is counted and moved
    after.add("carol's note", user_id="carol", session_id="c1")
    carol_began = _began(after, "carol", "c1")
    killed_again = crash_backend(url)
    with pytest.warns(STMLostWarning) as record:
        second = _open(url)
    [again] = _stm_warnings(record)
    assert (again.sessions, again.users) == (1, 1)
    assert again.lost_at >= killed_again > carol_began
    expected = {
        ("alice", "s1"): opened.lost_at,
        ("bob", "b1"): opened.lost_at,
        ("carol", "c1"): again.lost_at,
    }
    assert _lost(second) == expected

    # a third crash with nothing written since: nothing to report, no time moves
    crash_backend(url)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        third = _open(url)
    assert _stm_warnings(record) == []
    assert _lost(third) == expected

    # a write that finds an uncounted loss before any open dates it at the crash recovery
    third.add("alice is back", user_id="alice", session_id="s1")
    assert third.stm_lost_at(user_id="alice", session_id="s1") == opened.lost_at  # kept
    alice_began = _began(third, "alice", "s1")
    killed_last = crash_backend(url)
    third.add("alice is back again", user_id="alice", session_id="s1")
    [alice] = third.stm_losses(user_id="alice")
    assert alice.written_since and alice.lost_at >= killed_last > alice_began
    with pytest.warns(STMLostWarning) as record:  # found by the write: still counted, once
        _open(url).close()
    [found] = _stm_warnings(record)
    assert (found.sessions, found.users, found.lost_at) == (1, 1, alice.lost_at)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _open(url).close()  # counted before: the others, and now alice/s1
    assert _stm_warnings(record) == []
    assert _lost(third) == {**expected, ("alice", "s1"): alice.lost_at}
    for s in (third, second, after, first):
        s.close()


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "reset-not-yet-checked"])
def test_upgrade_pins_the_losses_counted_before(empty_db_url, checked):
    """Revision 0038 told a counted loss from its times (lost_at >= began_at). A backend crash
    dated a loss before its session began, so such a scope (no mark, lost_at < began_at) had
    been counted when the server's check ran since the last reset: the upgrade pins it, at
    its began_at (the earliest it can have been lost), and the next reset counts only what
    was written since. Before that check the upgrade cannot tell it from a scope written
    again and lost anew: it is left to be counted (once more rather than never)."""
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine, "0038")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO cortex.stm_scopes (user_id, session_id, began_at, lost_at) VALUES "
                    "('u', 'bug', now() - interval '1 hour', now() - interval '2 hours'), "
                    "('u', 'live', now() - interval '1 hour', now() - interval '2 hours'), "
                    "('v', 'counted', now() - interval '3 hours', now() - interval '2 hours'), "
                    "('w', 'uncounted', now() - interval '3 hours', NULL)"
                )
            )
            conn.execute(text("INSERT INTO cortex.stm_marks VALUES ('u', 'live')"))
            if not checked:
                conn.execute(text("DELETE FROM cortex.stm_server"))
        before = _scopes(engine)
        migrate.upgrade(engine)
        after = _scopes(engine)
        assert after["live"] == (*before["live"][:2], False)
        assert after["counted"] == (*before["counted"][:2], True)
        assert after["uncounted"] == (*before["uncounted"][:2], False)
        if checked:
            began_at = before["bug"][0]
            assert after["bug"] == (began_at, began_at, True)
        else:
            assert after["bug"] == (*before["bug"][:2], False)
        with engine.begin() as conn:  # a reset: marks and the check's row emptied
            conn.execute(text("DELETE FROM cortex.stm_marks"))
            conn.execute(text("DELETE FROM cortex.stm_server"))
            counted = conn.execute(text("SELECT sessions, users FROM cortex.stm_check()")).one()
        assert tuple(counted) == ((2, 2) if checked else (3, 2))  # live and uncounted (and bug)
        lost = _scopes(engine)
        assert all(lost_at >= began_at and pinned for began_at, lost_at, pinned in lost.values())
    finally:
        engine.dispose()


def _scopes(engine) -> dict[str, tuple]:
    with engine.connect() as conn:
        cols = "began_at, lost_at" + (", lost_pinned" if _has_pinned(conn) else ", NULL")
        rows = conn.execute(text(f"SELECT session_id, {cols} FROM cortex.stm_scopes")).all()
    return {r[0]: tuple(r[1:]) for r in rows}


def _has_pinned(conn) -> bool:
    return conn.execute(
        text(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'cortex' "
            "AND table_name = 'stm_scopes' AND column_name = 'lost_pinned')"
        )
    ).scalar_one()


def _reset(store: MemoryStore) -> None:
    """What crash recovery does to the tables of the bookkeeping: the UNLOGGED ones emptied."""
    with store.engine.begin() as conn:
        conn.execute(text("TRUNCATE cortex.stm_notes, cortex.stm_marks, cortex.stm_server"))


def _check(store: MemoryStore) -> tuple[int, int] | None:
    with store.engine.begin() as conn:
        row = conn.execute(text("SELECT sessions, users FROM cortex.stm_check()")).first()
    return None if row is None else (row.sessions, row.users)


def test_a_check_that_waits_for_a_writer_counts_what_the_write_found(db_url):
    """A writer re-marking a lost session holds its scope row while the first check after the
    reset runs: the check waits, then counts the loss as found by the write, and the STM the
    write began is counted again when a second reset empties it (not taken for counted)."""
    import threading

    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    try:
        store.add("before the crash", user_id="u", session_id="a")
        _reset(store)
        writer = store.engine.connect()
        tx = writer.begin()
        writer.execute(
            text("INSERT INTO cortex.stm_notes (user_id, session_id, content) VALUES ('u', 'a', 'after it')")
        )
        counted: list = []
        checker = threading.Thread(target=lambda: counted.append(_check(store)))
        checker.start()
        checker.join(1.0)
        assert checker.is_alive()  # waiting for the writer's scope row
        tx.commit()
        writer.close()
        checker.join(30)
        assert counted == [(1, 1)]
        [loss] = store.stm_losses(user_id="u")
        assert loss.written_since
        _reset(store)  # the STM written after the first loss is lost in its turn
        assert _check(store) == (1, 1)
        assert _check(store) is None  # counted once
    finally:
        store.close()


def test_a_loss_a_write_found_is_counted_even_if_that_stm_is_emptied_before_the_check(db_url):
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    try:
        store.add("before the crash", user_id="u", session_id="b")
        _reset(store)
        again = store.add("after it", user_id="u", session_id="b")
        [found] = store.stm_losses(user_id="u")
        store.delete(again, user_id="u")  # its STM emptied on purpose, before any check
        assert _check(store) == (1, 1)
        assert [(x.session_id, x.lost_at) for x in store.stm_losses(user_id="u")] == [("b", found.lost_at)]
        assert _check(store) is None
    finally:
        store.close()


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "reset-not-yet-checked"])
def test_upgrade_leaves_a_loss_a_write_found_since_the_last_reset_to_the_check(empty_db_url, checked):
    """Revision 0038's trigger dated a loss a write found, and its check counted only scopes
    without their mark. A scope written again after the last crash recovery, before the check
    that follows it, is left to that check by the upgrade (even after a clean restart, which
    moves the postmaster's start but not the recovery's time); once the check has run, it is not."""
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine, "0038")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO cortex.stm_scopes (user_id, session_id, began_at, lost_at) VALUES "
                    "('u', 'found', now(), now() - interval '1 minute'), "
                    "('u', 'old', now() - interval '400 days', now() - interval '500 days')"
                )
            )
            conn.execute(text("INSERT INTO cortex.stm_marks VALUES ('u', 'found'), ('u', 'old')"))
            if not checked:
                conn.execute(text("DELETE FROM cortex.stm_server"))
        migrate.upgrade(engine)
        with engine.begin() as conn:
            reported = dict(
                conn.execute(text("SELECT session_id, lost_reported FROM cortex.stm_scopes")).all()
            )
            assert reported == {"found": checked, "old": True}
            conn.execute(text("DELETE FROM cortex.stm_server"))  # the check runs again, marks kept
            counted = conn.execute(text("SELECT sessions FROM cortex.stm_check()")).scalar()
        assert counted == (None if checked else 1)
    finally:
        engine.dispose()


def test_a_found_loss_then_a_second_crash_is_dated_at_the_second(server):
    """A write finds a loss (dated at the first crash recovery); a second backend crash empties
    what it wrote before any open: the loss counted is dated at the second, not before that STM
    began (the QA case qa/stm_write_found_then_second_crash.py)."""
    _data, url = server
    first = _open(url)
    first.add("before the first crash", user_id="u", session_id="c")
    crash_backend(url)
    first.add("between the crashes", user_id="u", session_id="c")
    began = _began(first, "u", "c")
    second_crash = crash_backend(url)
    with pytest.warns(STMLostWarning) as record:
        after = _open(url)
    [warned] = _stm_warnings(record)
    assert (warned.sessions, warned.users) == (1, 1)
    assert warned.lost_at >= second_crash > began
    assert _lost(after) == {("u", "c"): warned.lost_at}
    after.close()
    first.close()
