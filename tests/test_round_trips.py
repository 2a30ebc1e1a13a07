"""Fewer round trips: a search is one statement in autocommit mode (``steps.Alone``), and the
pool checks a connection's socket instead of pinging the server before every use."""

from __future__ import annotations

import asyncio
import logging
import tempfile

import psycopg
import pytest
from psycopg import pq
from sqlalchemy import Engine, text

from cortex_pg import DatabaseUnavailableError, ValidationError
from cortex_pg.db import engine as engines
from cortex_pg.db import tenancy
from cortex_pg.db.steps import Alone, Query, Transaction, arun, driver_sql, run
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from cortex_pg.store.async_store import AsyncMemoryStore
from tests.conftest import _libpq

OWN_TRANSACTION = "SELECT CAST(:a AS int) AS a, current_setting('cortex.user_id', true) AS tenant"


def _alone() -> object:
    (row,) = yield Alone(OWN_TRANSACTION, {"a": 1})
    return row


def _traced(engine: Engine, plan: object) -> tuple[object, list[str]]:
    """Run ``plan`` on ``engine`` (a pool of one connection) and return its result with the
    messages the client sent the server (libpq's trace of the protocol)."""
    with engine.connect() as conn:
        pgconn = conn.connection.driver_connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            result = run(engine, plan)
        finally:
            pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t", 3)[2:] for line in trace.read().splitlines() if line.startswith("F\t")]
    return result, [" ".join(" ".join(m).split()) for m in sent]


def test_driver_sql_names_parameters_the_drivers_way(db_url):
    # text()'s rule: not after a colon or backslash, nor before a colon
    assert driver_sql("SELECT CAST(:a AS int), x::text, 5 % 2, :b_2, '\\:c', :d::int, :ef::int") == (
        "SELECT CAST(%(a)s AS int), x::text, 5 %% 2, %(b_2)s, ':c', :d::int, :ef::int"
    )
    engine = engines.create_engine_for(db_url)

    def plan(sql: str, params: dict) -> object:
        return (yield Alone(sql, params))

    try:  # a literal % reaches the server as written, with parameters or without
        assert run(engine, plan("SELECT '5%' || format('%s!', 'a') AS v", {})) == [{"v": "5%a!"}]
        assert run(engine, plan("SELECT '5%' || format('%s!', CAST(:a AS text)) AS v", {"a": "x"})) == [
            {"v": "5%x!"}
        ]
    finally:
        engine.dispose()


def test_a_statement_alone_is_its_own_transaction(db_url):
    engine = engines.create_engine_for(db_url, pool_size=1)
    try:
        row, sent = _traced(engine, _alone())
        assert row["a"] == 1
        # one round trip: the statement and its Sync, no BEGIN or COMMIT around it
        assert [m.split(" ")[0] for m in sent] == ["Parse", "Bind", "Describe", "Execute", "Sync"], sent
        assert sent[0].startswith('Parse "" "SELECT CAST($1 AS int)'), sent
    finally:
        engine.dispose()


def test_a_statement_alone_keeps_the_tenant_of_rls(db_url):
    """Under isolation='rls' the tenant is set at each transaction's start (a ``begin``
    listener): the statement runs in a transaction, so the setting holds for it."""
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False, isolation="rls")
    try:
        with tenancy.tenant_scope("alice"):
            row = run(store.engine, _alone())
        assert (row["a"], row["tenant"]) == (1, "alice")
    finally:
        store.close()


def test_a_statement_alone_on_asyncio(db_url):
    async def main() -> tuple[bool, bool]:
        store = await AsyncMemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
        try:
            plain = (await arun(store.engine, _alone()))["a"] == 1
            nid = await store.add("searched on asyncio", user_id="a")
            found = [r.id for r in await store.search("searched on asyncio", user_id="a")] == [nid]
            return plain, found
        finally:
            await store.close()

    assert asyncio.run(main()) == (True, True)


# every type a search returns, by the driver's cursor and by SQLAlchemy's result (a real such as
# 0.7 is 0.7 in both: read in binary it would be the float32 0.699999988...)
TYPED = """
SELECT gen_random_uuid() AS id, 'a' AS t, ARRAY['x', 'y'] AS arr, '{"k": [1, {"n": null}]}'::jsonb AS j,
       0.7::real AS r, 1.0 / 3 AS f8, 7 AS i, now() AS ts, NULL::text AS nothing, true AS b
"""


def test_a_statement_alone_reads_what_sqlalchemy_reads(db_url):
    engine = engines.create_engine_for(db_url)

    def plan() -> object:
        rows = yield Alone(
            TYPED.replace("gen_random_uuid()", "'8c9b5b7e-8d0e-4a4e-9f1a-1d2c3b4a5f60'::uuid").replace(
                "now()", "'2026-01-02 03:04:05.678+02'::timestamptz"
            )
        )
        return rows

    def reference() -> object:
        return (yield Transaction(_query()))

    def _query() -> object:
        sql = TYPED.replace("gen_random_uuid()", "'8c9b5b7e-8d0e-4a4e-9f1a-1d2c3b4a5f60'::uuid").replace(
            "now()", "'2026-01-02 03:04:05.678+02'::timestamptz"
        )
        return (yield Query(sql, {}, "mappings"))

    try:
        (got,) = run(engine, plan())
        (want,) = run(engine, reference())
        assert type(got) is dict and got == dict(want)
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in dict(want).items()}
    finally:
        engine.dispose()


def test_a_statement_alone_raises_typed_errors_and_replaces_a_broken_connection(db_url):
    engine = engines.create_engine_for(db_url)

    def plan(sql: str) -> object:
        return (yield Alone(sql, {}))

    try:
        with pytest.raises(ValidationError):  # a data exception (class 22), typed
            run(engine, plan("SELECT 1 / 0 AS x"))
        # the statement ends its own backend: the server is gone for this connection
        with pytest.raises(DatabaseUnavailableError):
            run(engine, plan("SELECT pg_terminate_backend(pg_backend_pid()) AS x"))
        # the broken connection was invalidated, not handed out again
        assert run(engine, plan("SELECT 2 AS x")) == [{"x": 2}]
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


def test_a_search_returns_what_a_read_returns(db_url):
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    try:
        nid = store.add(
            "Alice moved to Lisbon in spring.", user_id="imp", importance=0.7, metadata={"k": [1, None]}
        )
        (hit,) = store.search("Lisbon", user_id="imp", touch=False, memory_source="ltm")
        assert hit.note == store.get(nid, user_id="imp")
        assert hit.note.importance == 0.7
    finally:
        store.close()


def test_a_disconnect_replaces_every_connection_the_pool_held(db_url, monkeypatch):
    """As SQLAlchemy does on a disconnect: the server that ended one connection ended the
    others too, so each is replaced at its next use rather than failing a search each. (The
    socket check, which would find them dead first, is told they are quiet: a connection a
    firewall dropped has nothing to read.)"""
    monkeypatch.setattr(engines, "_quiet", lambda _conn: True)
    engine = engines.create_engine_for(db_url, pool_size=3)

    def plan() -> object:
        return (yield Alone("SELECT pg_backend_pid() AS pid", {}))

    try:
        held = [engine.connect() for _ in range(3)]  # three connections in the pool
        for conn in held:
            conn.close()
        libpq = _libpq(db_url)
        with psycopg.connect(**libpq, autocommit=True) as admin:
            for pid in _pids(admin, libpq["dbname"]):
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        outcomes = []
        for _ in range(4):
            try:
                run(engine, plan())
                outcomes.append("ok")
            except DatabaseUnavailableError:
                outcomes.append("unavailable")
        assert outcomes == ["unavailable", "ok", "ok", "ok"]
    finally:
        engine.dispose()


def test_a_statement_alone_on_asyncio_raises_typed_errors_and_replaces_a_broken_connection(db_url, caplog):
    async def main() -> list:
        store = await AsyncMemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)

        def plan(sql: str) -> object:
            return (yield Alone(sql, {}))

        try:
            with pytest.raises(ValidationError):
                await arun(store.engine, plan("SELECT 1 / 0 AS x"))
            with pytest.raises(DatabaseUnavailableError):
                await arun(store.engine, plan("SELECT pg_terminate_backend(pg_backend_pid()) AS x"))
            return await arun(store.engine, plan("SELECT 2 AS x"))
        finally:
            await store.close()

    with caplog.at_level(logging.ERROR, logger="sqlalchemy.pool"):
        assert asyncio.run(main()) == [{"x": 2}]
    # the broken connection was closed where its driver can await (no "Exception terminating")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def _pids(conn: psycopg.Connection, url_database: str) -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'",
            (url_database,),
        ).fetchall()
    ]


@pytest.mark.parametrize("idle_limit", [engines.PING_AFTER_IDLE, 0.0])
def test_a_connection_the_server_ended_is_replaced_before_use(db_url, monkeypatch, idle_limit):
    monkeypatch.setattr(engines, "PING_AFTER_IDLE", idle_limit)
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    pings: list[bool] = []
    ping = store.engine.dialect.do_ping

    def counted(dbapi_conn: object) -> bool:
        pings.append(True)
        return ping(dbapi_conn)

    monkeypatch.setattr(store.engine.dialect, "do_ping", counted)
    try:
        nid = store.add("still here after the backend ended", user_id="u")
        store.search("still here", user_id="u")
        store.search("still here", user_id="u")
        # a live connection used again at once is not pinged; one idle past the limit is
        assert bool(pings) == (idle_limit == 0.0)
        pings.clear()
        libpq = _libpq(db_url)
        with psycopg.connect(**libpq, autocommit=True) as admin:
            ended = _pids(admin, libpq["dbname"])
            assert ended
            for pid in ended:  # waits (5 s at most) for each backend to end
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        assert [r.id for r in store.search("still here after", user_id="u")] == [nid]
        assert pings  # the ended connection was pinged (and replaced), not used
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar() not in ended
    finally:
        store.close()


def test_a_quiet_connection_is_not_pinged_whatever_its_descriptor(db_url, monkeypatch):
    """A busy process holds many files: a pooled connection's socket numbered 1024 or above
    is still checked without a ping (select() takes no such descriptor)."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} files at most")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    engine = engines.create_engine_for(db_url)
    pings: list[bool] = []
    ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: pings.append(True) or ping(conn))
    try:
        for _ in range(3):
            with engine.connect() as conn:
                fd = conn.connection.driver_connection.pgconn.socket
                assert conn.execute(text("SELECT 1")).scalar() == 1
        assert fd >= 1024 and pings == []
    finally:
        engine.dispose()
        for f in held:
            os.close(f)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
