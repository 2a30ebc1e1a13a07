"""The embedding rows written by add_many: binary COPY (sync and async psycopg), the upsert
under row-level security, and bulk loads, all holding exactly the embedder's vectors."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
from sqlalchemy import text

from cortex_pg import AsyncMemoryStore
from cortex_pg.db import tenancy
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore, sql, validation
from cortex_pg.store.copying import can_copy, copy_embeddings, vector_bytes
from cortex_pg.store.text_embeddings import embed_windows

LONG = " ".join(
    f"Paragraph {i} tells of the harbour, the ships and the weather of that year." for i in range(120)
)


def _items() -> list[dict]:
    """Two tenants interleaved in one batch, two sessions each, one note of several windows."""
    items = []
    for i in range(12):
        user = "ann" if i % 2 else "bob"
        items.append(
            {
                "user_id": user,
                "session_id": f"s{i % 4 // 2}",
                "content": LONG if i == 5 else f"turn {i} of {user}: the weather of day {i}",
                "time": f"2024-03-{1 + i:02d}T10:00:00Z",
                "id": str(uuid.uuid5(uuid.NAMESPACE_OID, f"bulk-writes-{i}")),
            }
        )
    return items


def _expected(items: list[dict], embedder: HashingEmbedder) -> dict[tuple, np.ndarray]:
    """(user, note id, kind, window_no) -> float32 vector the store must hold."""
    out: dict[tuple, np.ndarray] = {}
    last: dict[tuple[str, str], str] = {}
    for item in items:  # items are in time order within each scope
        for k, vec in enumerate(embed_windows(embedder, [item["content"]])[0]):
            out[(item["user_id"], item["id"], "text", k)] = np.float32(vec)
        scope = (item["user_id"], item["session_id"])
        if scope in last:
            ctx = embedder.embed([last[scope] + "\n" + item["content"]])[0]
            out[(item["user_id"], item["id"], "context", 0)] = np.float32(ctx)
        last[scope] = item["content"]
    return out


def _stored(engine) -> dict[tuple, np.ndarray]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT user_id, note_id, kind, window_no, session_id, embedding::text AS v "
                "FROM cortex.embeddings"
            )
        ).all()
        sessions = dict(conn.execute(text("SELECT id, session_id FROM cortex.notes")).all())
    for r in rows:
        assert r.session_id == sessions[r.note_id]
    return {
        (r.user_id, str(r.note_id), r.kind, r.window_no): np.array(
            r.v.strip("[]").split(","), dtype=np.float32
        )
        for r in rows
    }


def _assert_same(stored: dict, expected: dict) -> None:
    assert sorted(stored) == sorted(expected)
    assert any(key[2] == "text" and key[3] > 0 for key in stored)  # the long note has windows
    for key, vec in expected.items():
        assert np.array_equal(stored[key], vec), key


def test_add_many_copies_the_embedders_vectors_exactly(store):
    items = _items()
    assert store.add_many(items, batch_size=5) == [i["id"] for i in items]
    with store.engine.connect() as conn:
        assert can_copy(conn)
    _assert_same(_stored(store.engine), _expected(items, store.embedder))


def test_async_add_many_copies_the_same_rows(db_url):
    items = _items()

    async def main() -> None:
        store = await AsyncMemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
        try:
            await store.add_many(items, batch_size=5)
        finally:
            await store.close()

    asyncio.run(main())
    with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as s:
        _assert_same(_stored(s.engine), _expected(items, s.embedder))


def test_under_rls_the_rows_are_upserted_with_the_same_vectors(db_url):
    items = [i for i in _items() if i["user_id"] == "ann"]
    with MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls") as s:
        with tenancy.tenant_scope("ann"), s.engine.connect() as conn:
            assert not can_copy(conn)  # PostgreSQL refuses COPY FROM into a table under RLS
        s.add_many(items, batch_size=4)
    with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as s:
        _assert_same(_stored(s.engine), _expected(items, s.embedder))


def test_bulk_and_incremental_loads_store_identical_embeddings(db_url, server_url):
    from tests.conftest import create_database, drop_database

    twin = create_database(
        server_url, "cortex_bulk_writes_twin", template=db_url.rsplit("/", 1)[1].split("?")[0]
    )
    items = _items()
    try:
        with (
            MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as bulk,
            MemoryStore.open(twin, embedder=HashingEmbedder(), auto_migrate=False) as plain,
        ):
            bulk.add_many(items, bulk=True, batch_size=3)
            for item in items:  # one note per call
                plain.add(**item)
            _assert_same(_stored(bulk.engine), _expected(items, bulk.embedder))
            _assert_same(_stored(plain.engine), _expected(items, plain.embedder))
    finally:
        drop_database(server_url, "cortex_bulk_writes_twin")


def test_copy_refuses_rows_that_exist_and_vectors_of_another_size(store):
    nid = store.add("a note", user_id="u", session_id="s")
    vec = store.embedder.embed(["a note"])[0]
    with pytest.raises(ValueError, match="expected vectors of 3 numbers"):
        vector_bytes([[0.1, 0.2]], 3)
    with store.engine.begin() as conn, pytest.raises(Exception) as err:
        copy_embeddings(conn, store.embedder.name, [("u", nid, "s", "text", 0)], [vec], store.embedder.dim)
    assert getattr(err.value.orig, "sqlstate", None) == "23505"  # no ON CONFLICT: only for new notes


INDEX_STATE = """
SELECT ix.indisvalid AS valid,
       (SELECT count(*) FROM pg_inherits WHERE inhparent = ix.indexrelid) AS attached,
       (SELECT count(*) FROM pg_inherits WHERE inhparent = 'cortex.embeddings'::regclass) AS partitions
FROM pg_index ix WHERE ix.indexrelid = to_regclass('cortex.' || cortex.embedding_index_name(:m))
"""


def test_a_bulk_load_builds_every_partitions_index_and_attaches_it(store):
    items = [{"content": f"note {i} of tenant {i % 9}", "user_id": f"t{i % 9}"} for i in range(90)]
    store.add_many(items, bulk=True, batch_size=25, to_stm=False)
    with store.engine.connect() as conn:
        state = conn.execute(text(INDEX_STATE), {"m": store.embedder.name}).one()
        # no partition index left outside the parent (each one is attached, none built twice)
        loose = conn.execute(
            text(
                "SELECT count(*) FROM pg_index ix JOIN pg_inherits p ON p.inhrelid = ix.indrelid "
                "WHERE p.inhparent = 'cortex.embeddings'::regclass AND ix.indexrelid::regclass::text "
                "LIKE '%' || left(cortex.embedding_index_name(:m), 54) || '%' "
                "AND NOT EXISTS (SELECT 1 FROM pg_inherits q WHERE q.inhrelid = ix.indexrelid)"
            ),
            {"m": store.embedder.name},
        ).scalar_one()
    assert state.valid and state.attached == state.partitions == 32 and loose == 0
    assert (
        store.search("note 7 of tenant 7", user_id="t7", limit=1, touch=False)[0].content
        == "note 7 of tenant 7"
    )


def test_partition_indexes_left_by_an_interrupted_load_are_attached_by_the_next_open(db_url):
    with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as s:
        s.add_many([{"content": f"note {i}", "user_id": f"t{i}"} for i in range(40)], to_stm=False)
        m = s.embedder.name
        with s.engine.begin() as conn:  # the load's start: the model's index dropped
            name = conn.execute(text("SELECT cortex.embedding_index_name(:m)"), {"m": m}).scalar_one()
            conn.exec_driver_sql(f'DROP INDEX cortex."{name}"')
            steps = conn.execute(
                text("SELECT cortex.embedding_index_steps(:m, :d, false)"), {"m": m, "d": 384}
            )
            builds = [x for x in steps.scalars() if x.startswith("CREATE INDEX") and " ON ONLY " not in x]
            for step in builds[:5]:  # then interrupted after 5 partitions' builds
                conn.exec_driver_sql(step)
        with s.engine.connect() as conn:
            assert conn.execute(text(INDEX_STATE), {"m": m}).first() is None
    with (
        MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as s,
        s.engine.connect() as conn,
    ):
        state = conn.execute(text(INDEX_STATE), {"m": m}).one()
        left = conn.execute(text("SELECT cortex.embedding_index_steps(:m, 384)"), {"m": m}).scalars().all()
    assert state.valid and state.attached == 32 and left == []


def test_a_bulk_load_refreshes_the_planners_statistics_as_the_store_grows(store):
    items = [{"content": f"note {i}", "user_id": f"t{i % 3}"} for i in range(600)]
    with store.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = 'cortex.notes'::regclass")).scalar()
            <= 0
        )
    store.add_many(items, bulk=True, batch_size=100, to_stm=False)
    with store.engine.connect() as conn:
        # ANALYZE after 100, 200 and 400 notes: the load doubled what the statistics knew
        known = conn.execute(
            text("SELECT reltuples FROM pg_class WHERE oid = 'cortex.notes'::regclass")
        ).scalar()
        keys = conn.execute(text("SELECT user_id, session_id, content_hash FROM cortex.notes LIMIT 50")).all()
        plan = "\n".join(
            conn.execute(
                text("EXPLAIN " + sql.FIND_EXISTING),
                {
                    "users": [k.user_id for k in keys],
                    "sessions": [k.session_id for k in keys],
                    "hashes": [k.content_hash for k in keys],
                },
            ).scalars()
        )
    assert 400 <= known <= 600
    # duplicates are not looked up by walking each tenant's session (the choice made without
    # statistics: every note of the session read once per key)
    assert "ix_notes_session_order" not in plan


def test_the_duplicate_check_is_answered_by_index_lookups(store):
    """A write's duplicate check (current notes and merged ones with the same text) must not
    read every note of the database: each half has a partial index on the content hash
    (Alembic 0033). The planner may still prefer a scan of a small table, so the check is
    planned with sequential scans off: what it can be answered by, not what a tiny table costs."""
    ids = store.add_many([{"content": f"note {i}"} for i in range(40)], user_id="u", session_id="s")
    store.add_many([{"content": f"other {i}"} for i in range(40)], user_id="v", session_id="s")
    with store.engine.begin() as conn:
        # a merged note: its text added again is the note it was merged into
        conn.execute(
            text(
                "UPDATE cortex.notes SET merged_into = CAST(:keeper AS uuid) WHERE user_id = 'u' AND id = CAST(:gone AS uuid)"
            ),
            {"keeper": ids[1], "gone": ids[0]},
        )
        conn.execute(text("ANALYZE cortex.notes"))
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        keys = conn.execute(
            text("SELECT user_id, session_id, content_hash FROM cortex.notes WHERE user_id = 'u'")
        ).all()
        params = {
            "users": [k.user_id for k in keys],
            "sessions": [k.session_id for k in keys],
            "hashes": [k.content_hash for k in keys],
        }
        plan = "\n".join(conn.execute(text("EXPLAIN " + sql.FIND_EXISTING), params).scalars())
        found = conn.execute(text(sql.FIND_EXISTING), params).all()
    assert "Seq Scan on notes" not in plan, plan
    assert "uq_notes_content_hash" in plan and "ix_notes_merged_content_hash" in plan, plan
    # and it still finds what it found: the merged note's keeper for its text, the 39 others
    gone_hash = validation.content_hash("note 0")
    assert [(r.tier, str(r.id)) for r in found if r.content_hash == gone_hash] == [("merged", ids[1])]
    assert sum(r.tier == "ltm" for r in found) == 39


def test_a_batch_copies_its_own_contexts_and_upserts_those_of_stored_notes_it_precedes(store):
    emb = store.embedder.embed
    first = store.add("we met at the station", user_id="u", session_id="s", time="2024-01-01T09:00:00Z")
    stored = store.add("then we took the train", user_id="u", session_id="s", time="2024-01-01T12:00:00Z")
    earlier, later = store.add_many(
        [
            {"content": "we bought coffee", "time": "2024-01-01T10:00:00Z"},
            {"content": "and arrived at noon", "time": "2024-01-01T13:00:00Z"},
        ],
        user_id="u",
        session_id="s",
    )
    got = _stored(store.engine)
    expect = {
        earlier: "we met at the station\nwe bought coffee",
        stored: "we bought coffee\nthen we took the train",  # was "we met at the station\n..."
        later: "then we took the train\nand arrived at noon",
    }
    for nid, context_text in expect.items():
        assert np.array_equal(got[("u", nid, "context", 0)], np.float32(emb([context_text])[0])), context_text
    assert ("u", first, "context", 0) not in got


def test_opening_a_store_during_a_bulk_load_leaves_the_dropped_index_to_the_load(db_url) -> None:  # noqa: ANN001
    from sqlalchemy import create_engine, text

    from cortex_pg.embeddings.hashing import HashingEmbedder
    from cortex_pg.store import MemoryStore
    from cortex_pg.store import sql as store_sql

    def hnsw_parts(engine) -> int:  # noqa: ANN001
        with engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT count(*) FROM pg_inherits i JOIN pg_index x ON x.indrelid = i.inhrelid "
                    "JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam "
                    "WHERE i.inhparent = 'cortex.embeddings'::regclass AND a.amname = 'hnsw'"
                )
            ).scalar_one()

    with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False) as store:
        store.add("a note", user_id="u")
    engine = create_engine(db_url)
    try:
        assert hnsw_parts(engine) > 0
        with engine.connect() as loader:  # a bulk load: holds the lock, dropped the index
            loader.execute(text(store_sql.LOCK_BULK_LOAD))
            index = loader.execute(
                text("SELECT index_name FROM cortex.embedding_models WHERE active")
            ).scalar_one()
            loader.execute(text(f'DROP INDEX cortex."{index}"'))
            loader.commit()
            with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False):
                assert hnsw_parts(engine) == 0  # left to the load
            loader.execute(text(store_sql.UNLOCK_BULK_LOAD))
            loader.commit()
        with MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False):
            assert hnsw_parts(engine) > 0  # no load running: open builds it
    finally:
        engine.dispose()
