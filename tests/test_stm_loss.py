"""Short-term memory emptied by crash recovery is reported, never silent.

A real embedded server of its own, killed with SIGKILL (no shutdown checkpoint) and started
again (crash recovery empties the UNLOGGED tables); a clean restart in between shows that
what a clean restart keeps is not reported. Pinned: the first store opened after the crash
warns with the counts (typed ``STMLostWarning``, logged), later opens do not; ``stats()``,
``stm_losses``/``stm_lost_at`` and ``cortex.stm_losses`` report per user and session, with
the start of the recovered server as the time; the facades' short-term reads warn while
nothing was written to the scope since, once per store; writing again ends that for the
scope written, keeps the time, and a second crash moves the time of the scopes it emptied
only; long-term memory and users without STM are untouched.
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
from cortex_pg.db import embedded
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from tests.helpers.server_crash import kill_server

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
    assert killed_at <= opened.lost_at <= restarted  # the start of the recovered server
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
