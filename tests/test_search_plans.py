"""search_notes v9: how the candidate statement is planned.

A search without a session, date window or where_filter prepares its candidate statement once
per session and runs it on a generic plan; a large tenant's vector candidates come through its
HNSW index (PostgreSQL's cost model prices pgvector's HNSW scan above an exact scan of a tenant
of a few hundred to a few thousand notes, though the index answers several times faster there).
Other searches plan their candidates for the call's values, as before.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from cortex_pg.embeddings.hashing import HashingEmbedder
from cortex_pg.store import MemoryStore

TOPICS = ["harbour", "garden", "violin", "mountain", "kitchen", "station", "library", "orchard"]


def _notes(n: int, prefix: str) -> list[dict]:
    return [
        {"content": f"{prefix} note {i}: the {TOPICS[i % 8]} and the {TOPICS[(i * 3) % 8]} on day {i}"}
        for i in range(n)
    ]


def _hnsw_scans(store: MemoryStore, user_id: str) -> int:
    """idx_scan of the HNSW index on the embeddings partition that holds ``user_id``."""
    with store.engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return conn.execute(
            text(
                "SELECT coalesce(sum(s.idx_scan), 0) FROM pg_stat_user_indexes s "
                "WHERE s.indexrelname LIKE 'ix_embeddings_hnsw_%' AND s.relid = "
                "(SELECT e.tableoid FROM cortex.embeddings e WHERE e.user_id = :u LIMIT 1)"
            ),
            {"u": user_id},
        ).scalar_one()


def _search_flushed(store: MemoryStore, query: str, user_id: str, **kw) -> list[str]:
    """A search whose index statistics reach pg_stat_user_indexes when its transaction ends."""
    with store.engine.begin() as conn:
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
    got = [r.note.content for r in store.search(query, user_id=user_id, limit=5, touch=False, **kw)]
    with store.engine.begin() as conn:  # a statement after the search: its backend reports
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
    return got


def _wait_for_scans(store: MemoryStore, user_id: str, above: int) -> int:
    for _ in range(50):
        now = _hnsw_scans(store, user_id)
        if now > above:
            return now
        time.sleep(0.1)
    return _hnsw_scans(store, user_id)


def test_a_large_tenant_finds_its_vector_candidates_by_the_hnsw_index(store) -> None:  # noqa: ANN001
    notes = _notes(300, "big")
    store.add_many(notes, user_id="big", to_stm=False)
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE cortex.embeddings"))
    before = _hnsw_scans(store, "big")
    target = notes[137]["content"]
    got = _search_flushed(store, target, "big", memory_source="ltm")
    # the note whose own text is the query is the nearest vector: the index scan found it
    assert got[0] == target
    assert _wait_for_scans(store, "big", before) > before


def test_a_long_note_of_a_large_tenant_is_found_by_a_later_window(db_url) -> None:  # noqa: ANN001
    """Later windows are ordered by their stored vectors, not through the index (vector only:
    the full-text ranker would find the note by its words anyway)."""
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(window_chars=400), auto_migrate=False)
    try:
        body = " ".join(
            f"Paragraph {i} tells of the harbour, the ships and the weather of that year." for i in range(40)
        )
        ending = "At last the lighthouse keeper painted the tower bright orange."
        long_id = store.add(body + " " + ending, user_id="big", to_stm=False)
        store.add_many(_notes(300, "big"), user_id="big", to_stm=False)
        with store.engine.begin() as conn:
            best = conn.execute(
                text(
                    "SELECT id::text FROM cortex.search_notes('big', CAST(:v AS vector), NULL, 5, "
                    "p_model => :m) LIMIT 1"
                ),
                {"v": _vec(store, ending), "m": store.embedder.name},
            ).scalar_one()
        assert best == str(long_id)
    finally:
        store.close()


def _vec(store: MemoryStore, query: str) -> str:
    return "[" + ",".join(map(str, store.embedder.embed([query])[0])) + "]"


SEARCH = text(
    "SELECT id::text, score FROM cortex.search_notes(:u, CAST(:v AS vector), :q, 10, p_model => :m, "
    "p_date_from => :df, p_filter => CAST(:f AS jsonb))"
)


def _prepared(conn) -> list[tuple[str, int, int]]:  # noqa: ANN001
    return [
        tuple(r)
        for r in conn.execute(
            text(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE name LIKE 'cortex_search_%' ORDER BY name"
            )
        )
    ]


def test_a_plain_search_prepares_its_candidates_once_per_session_on_a_generic_plan(store) -> None:  # noqa: ANN001
    store.add_many(_notes(40, "small"), user_id="small", to_stm=False)
    args = {"u": "small", "q": "the garden", "m": store.embedder.name, "df": None, "f": None}
    with store.engine.connect() as conn:
        conn.execute(text("DEALLOCATE ALL"))
        for query in ("the garden", "the violin", "day 7"):
            assert len(conn.execute(SEARCH, {**args, "q": query, "v": _vec(store, query)}).all()) == 10
        [(name, generic, custom)] = _prepared(conn)
        assert name.startswith("cortex_search_e_")  # a small tenant: no forced index scan
        assert (generic, custom) == (3, 0)
        # a window or a filter plans for its values: nothing more is prepared
        conn.execute(SEARCH, {**args, "v": _vec(store, "the garden"), "df": "2000-01-01"}).all()
        conn.execute(SEARCH, {**args, "v": _vec(store, "the garden"), "f": '{"kind": "x"}'}).all()
        assert _prepared(conn) == [(name, 3, 0)]
        # a session that dropped its prepared statements prepares again
        conn.execute(text("DEALLOCATE ALL"))
        assert len(conn.execute(SEARCH, {**args, "v": _vec(store, "the garden")}).all()) == 10
        assert _prepared(conn) == [(name, 1, 0)]
        conn.rollback()


def test_the_prepared_and_the_planned_statements_rank_alike(store) -> None:  # noqa: ANN001
    store.add_many(_notes(60, "small"), user_id="small", to_stm=False)
    with store.engine.connect() as conn:  # statistics, so the planned search reads 60 notes exactly too
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    for query in ("the garden and the violin", "day 12", "station note 5 the kitchen"):
        base = {"u": "small", "q": query, "v": _vec(store, query), "m": store.embedder.name, "f": None}
        with store.engine.connect() as conn:
            prepared = conn.execute(SEARCH, {**base, "df": None}).all()
            # a window that holds every note: same candidates, planned for its values
            planned = conn.execute(SEARCH, {**base, "df": "1970-01-01"}).all()
        assert [r.id for r in prepared] == [r.id for r in planned]
        assert [r.score for r in prepared] == [r.score for r in planned]


def test_the_search_restores_the_settings_it_changes(store) -> None:  # noqa: ANN001
    store.add_many(_notes(300, "big"), user_id="big", to_stm=False)
    store.add_many(_notes(20, "small"), user_id="small", to_stm=False)
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    args = {
        "u": "big",
        "q": None,
        "v": _vec(store, "the garden"),
        "m": store.embedder.name,
        "df": None,
        "f": None,
    }
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL max_parallel_workers_per_gather = 3"))
        conn.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
        assert len(conn.execute(SEARCH, args).all()) == 10
        assert len(conn.execute(SEARCH, {**args, "u": "small"}).all()) == 10  # the exact variant
        assert conn.execute(text("SHOW enable_sort")).scalar_one() == "on"
        assert conn.execute(text("SHOW enable_seqscan")).scalar_one() == "on"
        assert conn.execute(text("SHOW max_parallel_workers_per_gather")).scalar_one() == "3"
        assert conn.execute(text("SHOW plan_cache_mode")).scalar_one() == "force_custom_plan"
        assert sorted(n[:16] for n, _, _ in _prepared(conn)) == ["cortex_search_e_", "cortex_search_i_"]


def _same_partition_as(store: MemoryStore, user_id: str) -> str:
    """A user id whose embeddings share ``user_id``'s partition."""
    with store.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT 'small' || i FROM generate_series(1, 1000) i WHERE "
                "(SELECT g FROM generate_series(0, 31) g WHERE satisfies_hash_partition("
                "'cortex.embeddings'::regclass, 32, g, 'small' || i)) = "
                "(SELECT g FROM generate_series(0, 31) g WHERE satisfies_hash_partition("
                "'cortex.embeddings'::regclass, 32, g, CAST(:u AS text))) LIMIT 1"
            ),
            {"u": user_id},
        ).scalar_one()


def test_the_tenant_partition_share_finds_the_partition_postgres_routes_to(store) -> None:  # noqa: ANN001
    users = ["big", "a", "b", "carol", "tenant-42"]
    for u in users:
        store.add_many(_notes(5, u), user_id=u, to_stm=False)
    with store.engine.connect() as conn:
        # not analyzed since it held rows: unknown, and the search plans per call
        assert conn.execute(text("SELECT cortex.tenant_partition_share('big')")).scalar_one() is None
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE cortex.embeddings"))
        for u in users:
            share, expected = conn.execute(
                text(
                    "SELECT cortex.tenant_partition_share(:u), 2.0 * 5 / greatest(("
                    "SELECT r.reltuples FROM pg_class r WHERE r.oid = "
                    "(SELECT e.tableoid FROM cortex.embeddings e WHERE e.user_id = :u LIMIT 1)), 1)"
                ),
                {"u": u},
            ).one()
            assert share == expected
        assert conn.execute(text("SELECT cortex.tenant_partition_share('nobody')")).scalar_one() is None


def test_a_tenant_sharing_its_partition_with_a_larger_one_is_planned_for_its_values(store) -> None:  # noqa: ANN001
    small = _same_partition_as(store, "big")
    store.add_many(_notes(2000, "big"), user_id="big", to_stm=False)
    store.add_many(_notes(300, small), user_id=small, to_stm=False)
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    base = {"q": None, "m": store.embedder.name, "df": None, "f": None}
    with store.engine.connect() as conn:
        conn.execute(text("DEALLOCATE ALL"))
        share = conn.execute(text("SELECT cortex.tenant_partition_share(:u)"), {"u": small}).scalar_one()
        assert 0 < share < 0.2  # 600 of its partition's 4,600 rows
        got = conn.execute(
            SEARCH, {**base, "u": small, "v": _vec(store, f"{small} note 7: the station")}
        ).all()
        assert len(got) == 10
        assert _prepared(conn) == []  # planned for its values, not prepared
        conn.execute(SEARCH, {**base, "u": "big", "v": _vec(store, "big note 7: the station")}).all()
        assert [n[:16] for n, _, _ in _prepared(conn)] == ["cortex_search_i_"]
        conn.rollback()


def test_a_large_tenant_is_searched_under_row_level_security(db_url) -> None:  # noqa: ANN001
    """The partition share is read from the catalog, which the RLS role may read."""
    store = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
    owner = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
    try:
        notes = _notes(300, "alice")
        store.add_many(notes, user_id="alice", to_stm=False)
        store.add_many(_notes(20, "bob"), user_id="bob", to_stm=False)
        with owner.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
            assert conn.execute(text("SELECT cortex.tenant_partition_share('alice')")).scalar_one() >= 0.2
        got = store.search(notes[42]["content"], user_id="alice", limit=10, touch=False)
        assert got[0].note.content == notes[42]["content"]
        assert {r.note.user_id for r in got} == {"alice"}
    finally:
        store.close()
        owner.close()


def test_a_small_tenant_sharing_its_partition_is_read_exactly(store) -> None:  # noqa: ANN001
    """A generic plan ordered by the index's expression took the HNSW scan for a small tenant
    whose partition a large one fills, walking past the large tenant's entries (and missing
    notes); the exact variant orders by the stored vectors' distance, which no index gives."""
    small = _same_partition_as(store, "big")
    store.add_many(_notes(1500, "big"), user_id="big", to_stm=False)
    mine = [{"content": f"fact {i}: my cat is called Whiskers{i}"} for i in range(5)]
    store.add_many(mine, user_id=small, to_stm=False)
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    before = _hnsw_scans(store, "big")
    base = {"u": small, "q": None, "m": store.embedder.name, "f": None}
    with store.engine.connect() as conn:
        conn.execute(text("DEALLOCATE ALL"))
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
        for query in ("the harbour and the garden", "big note 7", "Whiskers"):
            prepared = conn.execute(SEARCH, {**base, "v": _vec(store, query), "df": None}).all()
            planned = conn.execute(SEARCH, {**base, "v": _vec(store, query), "df": "1970-01-01"}).all()
            assert len(prepared) == 5  # all of the tenant's notes, whatever the query
            assert [r.id for r in prepared] == [r.id for r in planned]
        assert [n[:16] for n, _, _ in _prepared(conn)] == ["cortex_search_e_"]
        conn.commit()
    with store.engine.begin() as conn:
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
    time.sleep(0.5)
    assert _hnsw_scans(store, "big") == before  # the prepared scan never touched the index
