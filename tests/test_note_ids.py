"""Note ids never cross tenants: the cortex.note_ids registry and its foreign keys."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from cortex_pg import AgenticMemorySystem, ConflictError, NotFoundError, ValidationError
from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore


def _owners(store: MemoryStore, nid: str) -> list[str]:
    with store.engine.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT user_id FROM cortex.notes WHERE id = :i "
                    "UNION ALL SELECT user_id FROM cortex.stm_notes WHERE id = :i"
                ),
                {"i": nid},
            )
        ]


def test_one_id_for_two_tenants_in_one_batch_is_refused_naming_both_items(store):
    nid = str(uuid.uuid4())
    with pytest.raises(ValidationError) as err:
        store.add_many(
            [{"content": "a", "user_id": "alice", "id": nid}, {"content": "b", "user_id": "bob", "id": nid}]
        )
    assert err.value.field == "items[1].id" and "items[0]" in err.value.reason
    assert store.count(user_id="alice") == 0 and store.count(user_id="bob") == 0


def test_the_same_id_twice_in_one_batch_is_a_validation_error(store):
    nid = str(uuid.uuid4())
    with pytest.raises(ValidationError) as err:
        store.add_many([{"content": "one", "id": nid}, {"content": "two", "id": nid}])
    assert err.value.field == "items[1].id"


def test_an_id_used_by_another_tenant_is_a_conflict(store):
    nid = store.add("alice's note", user_id="alice")
    with pytest.raises(ConflictError):
        store.add("bob's note", user_id="bob", id=nid)
    with pytest.raises(ConflictError):
        store.add_many([{"content": "bob again", "id": nid}], user_id="bob")
    with pytest.raises(ConflictError):
        store.add("bob stm only", user_id="bob", id=nid, to_ltm=False)
    assert _owners(store, nid) == ["alice", "alice"]


def test_a_deleted_notes_id_stays_with_its_tenant(store):
    nid = store.add("short-lived", user_id="alice")
    assert store.delete(nid, user_id="alice")
    with pytest.raises(ConflictError):
        store.add("taken over", user_id="bob", id=nid)
    assert store.add("back again", user_id="alice", id=nid) == nid


def test_a_short_term_note_under_an_id_the_tenant_uses_is_a_conflict(store):
    """add(to_ltm=False) with an id of one of the tenant's notes and another text: a conflict,
    as the long-term path's (it kept the stored text and returned the id, or wrote a second
    text under a long-term note's id)."""
    both = store.add("The boiler service is on Thursday", user_id="alice", session_id="s1")
    ltm_only = store.add("Car is parked on level 3", user_id="alice", session_id="s2", to_stm=False)
    for nid, session in ((both, "s1"), (ltm_only, "s2")):
        with pytest.raises(ConflictError) as err:
            store.add(
                "Dentist appointment on Monday", user_id="alice", session_id=session, id=nid, to_ltm=False
            )
        assert err.value.field == "id"
    assert [n.content for n in store.list_notes(user_id="alice", session_id="s1", memory_source="stm")] == [
        "The boiler service is on Thursday"
    ]
    assert store.list_notes(user_id="alice", session_id="s2", memory_source="stm") == []
    # and the other way round: a long-term note under an STM-only note's id, with another text
    stm_only = store.add("The meeting is on Monday.", user_id="alice", session_id="s3", to_ltm=False)
    for session, text_ in (("s4", "The meeting is on Tuesday."), ("s3", "Another text")):
        with pytest.raises(ConflictError) as err:
            store.add(text_, user_id="alice", session_id=session, id=stm_only)
        assert err.value.field == "id"
    assert store.add("The meeting is on Monday.", user_id="alice", session_id="s3", id=stm_only) == stm_only
    assert store.get(stm_only, user_id="alice").content == "The meeting is on Monday."
    # the same text under its own id is the note itself; a deleted note's id is free again
    assert (
        store.add("Car is parked on level 3", user_id="alice", session_id="s2", id=ltm_only, to_ltm=False)
        == ltm_only
    )
    assert store.delete(both, user_id="alice")
    assert store.add("Dentist appointment", user_id="alice", session_id="s1", id=both, to_ltm=False) == both


def test_plain_sql_cannot_reuse_another_tenants_id(store):
    nid = store.add("alice's", user_id="alice")
    with pytest.raises(Exception) as err, store.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO cortex.notes (id, user_id, content) VALUES (:i, 'bob', 'forged')"), {"i": nid}
        )
    assert "note_ids" in str(err.value)
    with store.engine.begin() as conn:  # a plain insert without an id is registered by the trigger
        new = conn.execute(
            text("INSERT INTO cortex.notes (user_id, content) VALUES ('carol', 'plain') RETURNING id")
        ).scalar_one()
        owner = conn.execute(
            text("SELECT user_id FROM cortex.note_ids WHERE id = :i"), {"i": new}
        ).scalar_one()
    assert owner == "carol"


def test_concurrent_adds_of_one_id_for_two_tenants_store_exactly_one(db_url):
    stores = [MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) for _ in range(2)]
    try:
        for _ in range(10):
            nid = str(uuid.uuid4())
            barrier = threading.Barrier(2)
            outcome: dict[str, object] = {}

            def write(
                i: int,
                user: str,
                nid: str = nid,
                barrier: threading.Barrier = barrier,
                outcome: dict[str, object] = outcome,
            ) -> None:
                barrier.wait()
                try:
                    stores[i].add(f"{user}'s note {nid}", user_id=user, id=nid)
                    outcome[user] = "stored"
                except ConflictError as exc:
                    outcome[user] = exc

            threads = [threading.Thread(target=write, args=(i, u)) for i, u in enumerate(("alice", "bob"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(v == "stored" for v in outcome.values()) == [False, True], outcome
            owners = set(_owners(stores[0], nid))
            assert len(owners) == 1
            (winner,) = owners
            assert stores[0].get(nid).user_id == winner
            loser = "bob" if winner == "alice" else "alice"
            with pytest.raises(NotFoundError):
                stores[0].get(nid, user_id=loser)
    finally:
        for s in stores:
            s.close()


def test_prem_delete_by_id_touches_one_tenant(db_url, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=False
    )
    try:
        nid = system.add_note("alice likes tea", user_id="alice")
        system.add_note("bob likes coffee", user_id="bob")
        with pytest.raises(ConflictError):
            system.store.add("bob's copy", user_id="bob", id=nid)
        assert system.delete(nid)
        assert system.store.count(user_id="bob") == 1
        assert system.store.count(user_id="alice") == 0
    finally:
        system.shutdown()


def test_upgrade_stops_when_an_id_is_already_shared(empty_db_url):
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine, "0008")
        nid = str(uuid.uuid4())
        with engine.begin() as conn:
            for user in ("alice", "bob"):
                conn.execute(
                    text("INSERT INTO cortex.notes (id, user_id, content) VALUES (:i, :u, 'x')"),
                    {"i": nid, "u": user},
                )
        with pytest.raises(Exception) as err:
            migrate.upgrade(engine)
        assert nid in str(err.value)
        assert migrate.current_revision(engine) == "0008"
    finally:
        engine.dispose()
