"""Stores on one URL share one engine (one pool) per process; connection failures are typed."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text

from cortex_pg import DatabaseError, DatabaseUnavailableError, ServerError
from cortex_pg.db.engine import shared_users
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from tests.conftest import _libpq


def _backends(url: str) -> int:
    with psycopg.connect(**_libpq(url), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def test_many_opens_share_one_pool(db_url):
    stores = [MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) for _ in range(150)]
    try:
        assert len({id(s.engine) for s in stores}) == 1
        assert shared_users(stores[0].engine) == 150
        stores[-1].add("hello", user_id="u")
        assert _backends(db_url) <= 10  # pool_size 5 + overflow 5, not one pool per store
    finally:
        for s in stores:
            s.close()
    assert shared_users(stores[0].engine) == 0


def test_close_keeps_the_engine_for_the_other_stores(db_url):
    a = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    b = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    a.close()
    a.close()  # a second close does not release b's share
    assert shared_users(b.engine) == 1
    nid = b.add("still works", user_id="u")
    assert b.get(nid, user_id="u").content == "still works"
    b.close()
    assert shared_users(b.engine) == 0


def test_rls_stores_get_their_own_engine(db_url):
    plain = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    rls = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False, isolation="rls")
    try:
        assert rls.engine is not plain.engine
        with plain.engine.connect() as conn:  # the shared engine does not act as the app role
            assert conn.execute(text("SELECT current_user = session_user")).scalar()
    finally:
        rls.close()
        plain.close()


def test_exhausted_pool_is_a_typed_error(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    s.engine.pool._timeout = 0.2  # fail fast in the test
    held = [s.engine.connect() for _ in range(10)]  # pool_size + max_overflow
    try:
        with pytest.raises(DatabaseUnavailableError, match="pool"):
            s.add("no connection left", user_id="u")
    finally:
        for c in held:
            c.close()
        s.close()


def test_a_server_that_is_down_is_a_typed_error():
    url = "postgresql://nobody@127.0.0.1:1/none"
    with pytest.raises(DatabaseUnavailableError) as info:
        MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
    assert isinstance(info.value, DatabaseError)
    assert "check that it runs" in str(info.value)


def test_too_many_clients_is_a_typed_error(server_url, db_url):
    """The server's connection limit reached by others: a DatabaseUnavailableError saying what
    to do, not psycopg's OperationalError."""
    with psycopg.connect(**_libpq(server_url), autocommit=True) as admin:
        limit = admin.execute("SHOW max_connections").fetchone()[0]
        reserved = admin.execute("SHOW superuser_reserved_connections").fetchone()[0]
        in_use = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        ).fetchone()[0]
    hogs = []
    try:
        for _ in range(int(limit) - int(reserved) - int(in_use) + 5):
            try:
                hogs.append(psycopg.connect(**_libpq(db_url)))
            except psycopg.OperationalError:
                break
        with pytest.raises((DatabaseUnavailableError, ServerError)) as info:
            MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
        assert "close stores" in str(info.value) or "too many" in str(info.value)
    finally:
        for h in hogs:
            h.close()
