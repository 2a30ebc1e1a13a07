"""Row-Level Security (isolation="rls"): an unfiltered query sees one tenant; a superuser all."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.db import tenancy
from cortex_pg.db.engine import create_engine_for
from cortex_pg.store import MemoryStore


@pytest.fixture
def rls_store(db_url):
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
    yield s
    s.close()


def test_unfiltered_queries_see_only_the_current_tenant(rls_store, db_url):
    rls_store.add("alice's secret", user_id="alice")
    rls_store.add("bob's secret", user_id="bob")
    rls_store.add_many([{"content": f"bob note {i}"} for i in range(3)], user_id="bob")
    # a deliberately unfiltered query through the API's connection
    with tenancy.tenant_scope("alice"), rls_store.engine.begin() as conn:
        rows = conn.execute(text("SELECT user_id, content FROM cortex.notes")).all()
        stm = conn.execute(text("SELECT DISTINCT user_id FROM cortex.stm_notes")).scalars().all()
        emb = conn.execute(text("SELECT DISTINCT user_id FROM cortex.embeddings")).scalars().all()
        hist = conn.execute(text("SELECT DISTINCT user_id FROM cortex.note_history")).scalars().all()
        role = conn.execute(text("SELECT current_user")).scalar_one()
        view_users = conn.execute(text("SELECT DISTINCT user_id FROM cortex.notes_current")).scalars().all()
    assert rows == [("alice", "alice's secret")]
    assert stm == emb == hist == view_users == ["alice"]
    assert role == "cortex_app"
    # no tenant set: nothing at all
    with rls_store.engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM cortex.notes")).scalar_one() == 0
    # the owner / superuser still sees every tenant
    owner = create_engine_for(db_url)
    try:
        with owner.connect() as conn:
            assert conn.execute(text("SELECT count(DISTINCT user_id) FROM cortex.notes")).scalar_one() == 2
    finally:
        owner.dispose()


def test_writes_for_another_tenant_are_refused(rls_store):
    rls_store.add("mine", user_id="alice")
    with tenancy.tenant_scope("alice"), pytest.raises(Exception) as err, rls_store.engine.begin() as conn:
        conn.execute(text("INSERT INTO cortex.notes (user_id, content) VALUES ('bob', 'forged')"))
    assert "row-level security" in str(err.value)


def test_api_works_under_rls(rls_store):
    nid = rls_store.add("under rls", user_id="carol", tags=["x"])
    assert rls_store.search("under rls", user_id="carol")[0].id == nid
    assert rls_store.search("under rls", user_id="dave") == []
    assert rls_store.get(nid, user_id="carol").tags == ["x"]
    rls_store.update(nid, user_id="carol", tags=["y"])
    assert rls_store.get(nid, user_id="carol").tags == ["y"]
    assert rls_store.count(user_id="carol") == 1
    assert rls_store.delete(nid, user_id="dave") is False
    assert rls_store.delete(nid, user_id="carol") is True
    with pytest.raises(ValidationError):
        rls_store.add_many([{"content": "a", "user_id": "u1"}, {"content": "b", "user_id": "u2"}])


def test_links_and_traversal_work_under_rls_for_the_owner_only(rls_store):
    from cortex_pg import NotFoundError
    from cortex_pg.store import links, traversal

    a = rls_store.add("rls link source", user_id="carol")
    b = rls_store.add("rls link target", user_id="carol")
    assert rls_store.set_links(a, {b: {"type": "supports", "strength": 0.7}}, user_id="carol") == 2
    assert list(rls_store.get_links(a, user_id="carol")) == [b]
    assert list(links.get_links(rls_store, b, user_id="carol")) == [a]  # the reciprocal
    assert [x.note.id for x in rls_store.linked_notes(a, user_id="carol")] == [b]
    assert [x.note.id for x in traversal.linked_notes(rls_store, b, user_id="carol")] == [a]
    for call in (
        lambda: rls_store.get_links(a, user_id="dave"),
        lambda: rls_store.set_links(a, {b: {"strength": 0.1}}, user_id="dave"),
        lambda: rls_store.linked_notes(a, user_id="dave"),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert rls_store.get_links(a, user_id="carol")[b]["strength"] == pytest.approx(0.7)


def test_unknown_isolation_is_refused(db_url):
    with pytest.raises(ValidationError) as err:
        MemoryStore.open(db_url, embedder="hashing", isolation="tenant")
    assert err.value.field == "isolation"


def test_facades_refuse_an_rls_store(rls_store):
    from cortex_pg import AgenticMemorySystem, CortexMemory, EntityMemory, ShortTermMemory

    for make in (
        lambda: AgenticMemorySystem(store=rls_store, enable_background_processing=False),
        lambda: CortexMemory(store=rls_store),
        lambda: EntityMemory(store=rls_store),
        lambda: ShortTermMemory(store=rls_store),
    ):
        with pytest.raises(ValidationError) as err:
            make()
        assert err.value.field == "store"


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM cortex.alembic_version",
        "UPDATE cortex.alembic_version SET version_num = '0001'",
        "INSERT INTO cortex.alembic_version VALUES ('x')",
        "DELETE FROM cortex.stm_server",
        "UPDATE cortex.stm_server SET started_at = now()",
    ],
)
def test_the_app_role_cannot_write_tables_no_tenant_owns(rls_store, db_url, statement):
    """A tenant's session under the application role could delete the schema's revision (every
    store then failed to open) or the STM check's row; it may only read them."""
    with tenancy.tenant_scope("mallory"), pytest.raises(Exception) as err, rls_store.engine.begin() as conn:
        conn.execute(text(statement))
    assert "permission denied" in str(err.value)
    with tenancy.tenant_scope("mallory"), rls_store.engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM cortex.alembic_version")).scalar_one() == 1
    reopened = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
    reopened.close()


def test_the_stm_check_after_a_reset_runs_with_its_owners_rights(rls_store, db_url):
    """After a reset that emptied STM (simulated: the UNLOGGED tables truncated, as crash recovery
    leaves them), no tenant can write the check's row to hide the loss, and cortex.stm_check()
    called under the application role pins every tenant's sessions (it needed to write that row
    with the caller's rights)."""
    rls_store.add("alice's short-term thought", user_id="alice", session_id="a1")
    rls_store.add("bob's short-term thought", user_id="bob", session_id="b1")
    owner = create_engine_for(db_url)
    try:
        with owner.begin() as conn:
            conn.execute(text("TRUNCATE cortex.stm_notes, cortex.stm_marks, cortex.stm_server"))
        with (
            tenancy.tenant_scope("mallory"),
            pytest.raises(Exception) as err,
            rls_store.engine.begin() as conn,
        ):
            conn.execute(text("INSERT INTO cortex.stm_server (started_at) VALUES (now())"))
        assert "permission denied" in str(err.value)
        with tenancy.tenant_scope("mallory"), rls_store.engine.begin() as conn:
            checked = conn.execute(text("SELECT sessions, users FROM cortex.stm_check()")).one()
        assert tuple(checked) == (2, 2)
        with owner.connect() as conn:
            pinned = conn.execute(
                text("SELECT user_id, session_id FROM cortex.stm_losses() ORDER BY 1")
            ).all()
        assert [tuple(r) for r in pinned] == [("alice", "a1"), ("bob", "b1")]
    finally:
        owner.dispose()
