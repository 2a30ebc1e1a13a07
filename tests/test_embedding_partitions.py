"""cortex.embeddings is hash-partitioned by user_id (Alembic 0013): a tenant's vector search
reads one partition; a model's index is built per partition without blocking writers, and an
interrupted build resumes; the partitions are reachable only through the tenant policy."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text

from cortex_pg.db import tenancy
from cortex_pg.db.engine import create_engine_for
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore, reembed


def _partition_of(conn, user_id: str) -> str:
    return conn.execute(
        text("SELECT tableoid::regclass::text FROM cortex.embeddings WHERE user_id = :u LIMIT 1"),
        {"u": user_id},
    ).scalar_one()


def test_a_tenants_vector_candidates_come_from_its_partition_only(store):
    for u in ("alice", "bob", "carol", "dave"):
        store.add_many(
            [{"content": f"{u} note {i} about rivers"} for i in range(30)], user_id=u, to_stm=False
        )
    with store.engine.connect() as conn:
        parts = conn.execute(
            text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'cortex.embeddings'::regclass")
        ).scalar_one()
        assert parts == 32
        home = _partition_of(conn, "alice")
        model, dim = conn.execute(text("SELECT model, dim FROM cortex.embedding_models WHERE active")).one()
        stmt = conn.execute(
            text("SELECT cortex.search_statement(:m, :d)"), {"m": model, "d": dim}
        ).scalar_one()
        vec = "[" + ",".join(["0.05"] * dim) + "]"
        # the statement's $n parameters bound as a search binds them
        args = [
            "alice",
            vec,
            "river",
            10,
            0.0,
            None,
            None,
            "2026-01-01",
            None,
            "all",
            40,
            ["river"],
            2,
            None,
            None,
            0.0,
            False,
            120.0,
            5.0,
            True,  # neighbours wanted (smoothing or expansion)
        ]
        bound = re.sub(r"\$(\d+)", lambda m: f"%(p{m.group(1)})s", stmt.replace("%", "%%"))
        with conn.connection.driver_connection.cursor() as cur:
            cur.execute("EXPLAIN " + bound, {f"p{i + 1}": a for i, a in enumerate(args)})
            plan = "\n".join(r[0] for r in cur.fetchall())
    scanned = {p for p in (f"embeddings_p{i:02d}" for i in range(32)) if p in plan}
    assert scanned == {home.split(".")[-1]}, scanned
    res = store.search("rivers", user_id="alice", limit=5, touch=False)
    assert len(res) == 5 and all(r.note.user_id == "alice" for r in res)


def test_an_interrupted_index_build_resumes(store):
    new = HashingEmbedder(dim=48, name="hashing-48")
    store.add_many([{"content": f"note {i}"} for i in range(20)], user_id="u", to_stm=False)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        steps = conn.execute(text("SELECT cortex.embedding_index_steps('hashing-48', 48)")).scalars().all()
        # parent ON ONLY, then per partition a concurrent build and an attach
        assert steps[0].startswith("CREATE INDEX IF NOT EXISTS") and " ON ONLY cortex.embeddings " in steps[0]
        assert len(steps) == 1 + 2 * 32
        assert all(s.startswith("CREATE INDEX CONCURRENTLY") for s in steps[1::2])
        assert all(s.startswith("ALTER INDEX") and "ATTACH PARTITION" in s for s in steps[2::2])
        for step in steps[:11]:  # the parent and 5 partitions: a build killed half-way
            conn.exec_driver_sql(step)
        valid = conn.execute(
            text(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('cortex.' || cortex.embedding_index_name('hashing-48'))"
            )
        ).scalar_one()
        assert valid is False
        left = conn.execute(text("SELECT cortex.embedding_index_steps('hashing-48', 48)")).scalars().all()
        assert len(left) == 2 * 27
    reembed.prepare(store.engine, new)  # finishes the build
    with store.engine.connect() as conn:
        valid = conn.execute(
            text(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('cortex.' || cortex.embedding_index_name('hashing-48'))"
            )
        ).scalar_one()
        left = conn.execute(text("SELECT cortex.embedding_index_steps('hashing-48', 48)")).scalars().all()
    assert valid is True and left == []


def test_the_application_role_cannot_read_partitions_directly(db_url):
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
    try:
        s.add("alice's secret", user_id="alice")
        s.add("bob's secret", user_id="bob")
        owner = create_engine_for(db_url)
        with owner.connect() as conn:
            home = _partition_of(conn, "bob")
        owner.dispose()
        with tenancy.tenant_scope("alice"), s.engine.begin() as conn:
            assert conn.execute(text("SELECT DISTINCT user_id FROM cortex.embeddings")).scalars().all() == [
                "alice"
            ]
        with (
            tenancy.tenant_scope("alice"),
            pytest.raises(Exception, match="permission denied"),
            s.engine.begin() as conn,
        ):
            conn.execute(text(f"SELECT user_id FROM {home}"))
    finally:
        s.close()
