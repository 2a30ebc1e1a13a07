"""search_notes v9: a large tenant's vector candidates come through its HNSW index.

PostgreSQL's cost model prices pgvector's HNSW scan above an exact scan of a tenant of a few
hundred to a few thousand notes, though the index answers several times faster there; v9 plans
the candidate statement of such a tenant (>= 256 current notes, no session, window or filter)
with the index as the only ordered path.
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


def test_the_search_restores_enable_sort_for_the_rest_of_the_transaction(store) -> None:  # noqa: ANN001
    store.add_many(_notes(300, "big"), user_id="big", to_stm=False)
    vec = "[" + ",".join(map(str, store.embedder.embed(["the garden on day 3"])[0])) + "]"
    with store.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT count(*) FROM cortex.search_notes('big', CAST(:v AS vector), NULL, 5, "
                "p_model => :m)"
            ),
            {"v": vec, "m": store.embedder.name},
        ).scalar_one()
        assert rows == 5
        assert conn.execute(text("SHOW enable_sort")).scalar_one() == "on"


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
        vec = "[" + ",".join(map(str, store.embedder.embed([ending])[0])) + "]"
        with store.engine.begin() as conn:
            best = conn.execute(
                text(
                    "SELECT id::text FROM cortex.search_notes('big', CAST(:v AS vector), NULL, 5, "
                    "p_model => :m) LIMIT 1"
                ),
                {"v": vec, "m": store.embedder.name},
            ).scalar_one()
        assert best == str(long_id)
    finally:
        store.close()
