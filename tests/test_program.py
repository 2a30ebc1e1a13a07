"""The standing program: concurrency and security, table-driven.

Concurrency: ``CORTEX_PG_PROGRAM_PROCESSES`` processes (default 4) x ``CORTEX_PG_PROGRAM_OPS``
mixed operations (default 80; the full program is 8 x 500) on overlapping users. Every
acknowledged effect must be in the database, counts add up exactly, no exception escapes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter

from sqlalchemy import create_engine, text

from cortex_pg.db.engine import normalize_url
from tests.helpers import program_worker

PROCESSES = int(os.environ.get("CORTEX_PG_PROGRAM_PROCESSES", "4"))
OPS = int(os.environ.get("CORTEX_PG_PROGRAM_OPS", "80"))


def test_concurrent_mixed_operations_add_up(db_url):
    ctx = mp.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(program_worker.run, [(db_url, w, OPS, 1000 + w) for w in range(PROCESSES)])
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors[:3]
    ops = sum((Counter(r["ops"]) for r in results), Counter())
    assert sum(ops.values()) == PROCESSES * OPS
    added = {nid: user for r in results for nid, user in r["added"].items()}
    deleted = {nid for r in results for nid in r["deleted"]}
    expected = {nid: u for nid, u in added.items() if nid not in deleted}
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT id::text, user_id FROM cortex.notes")).all())
        assert stored == expected  # nothing lost, nothing extra, no tenant crossed
        over = conn.execute(
            text(
                "SELECT user_id, session_id, count(*) FROM cortex.stm_notes "
                "GROUP BY 1, 2 HAVING count(*) > :c"
            ),
            {"c": program_worker.STM_CAPACITY},
        ).all()
        assert over == []
        wrong_frequency = conn.execute(
            text(
                "SELECT e.user_id, e.name, e.frequency, count(DISTINCT m.note_id) FROM cortex.entities e "
                "LEFT JOIN cortex.entity_mentions m ON m.user_id = e.user_id AND m.entity_id = e.id "
                "GROUP BY e.user_id, e.id HAVING e.frequency <> count(DISTINCT m.note_id)"
            )
        ).all()
        assert wrong_frequency == []
        mentioned = conn.execute(text("SELECT count(*) FROM cortex.entity_mentions")).scalar()
        assert mentioned > 0
        frames = dict(
            conn.execute(text("SELECT user_id, count(*) FROM cortex.context_frames GROUP BY 1")).all()
        )
        for user in program_worker.USERS:
            pushed = sum(r["pushed"].get(user, 0) for r in results)
            popped = sum(r["popped"].get(user, 0) for r in results)
            assert frames.get(user, 0) == pushed - popped
        docs = dict(conn.execute(text("SELECT user_id, doc_count FROM cortex.bm25_corpus")).all())
        per_user = Counter(expected.values())
        assert {u: c for u, c in docs.items() if c} == dict(per_user)
    engine.dispose()
