"""The speed benchmark's exact references (``benchmarks/perf_exact.py``) against the database.

On a corpus small enough that every note fits in each ranker's pool (30 notes, pool 40), the
database's bounded candidate lists are complete, so ``store.search`` must return exactly the
ranking that the Python recomputation of the documented formula gives (BM25 k1 1.2 b 0.75,
Lucene idf, normalised-score fusion of the mean text/context cosine and BM25, neighbour
expansion and smoothing). This pins that ``cortex.search_notes`` computes
what its header says, and that the benchmark's "overlap with exact hybrid" measures the right
thing. Nothing here is timed.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from perf_exact import (  # noqa: E402
    exact_hybrid,
    load_tenant,
    parse_tsvector,
    percentiles,
    pool_size,
    query_terms,
    recall,
)

from cortex_pg.temporal import without_temporal_keywords  # noqa: E402

DISTANCES = text(
    "SELECT note_id::text, kind, embedding <=> CAST(:q AS vector) FROM cortex.embeddings WHERE user_id = 'u1'"
)

NOTES = [
    "Alice prefers Python over Rust for new database migration work.",
    "Meeting with Bob about the quarterly budget: we decided to postpone it a week.",
    "Task result: the search latency task is done; p95 latency improved by 40%.",
    "Carol said her sister is moving to Lisbon in March.",
    "Dave bought a golden retriever puppy last Sunday and loves it.",
    "Reminder: call Erin about the security audit before Friday.",
    "Frank and Grace disagreed on the pricing page; Grace wants to run an A/B test.",
    "Trip to Osaka with Heidi planned for October; book the hotel early.",
    "Ivan is allergic to peanuts and avoids bakery shops.",
    "Decision: for the caching layer we use Go and write a design doc.",
    "Judy finished reading a book about Prague history and recommended it to Mallory.",
    "The error rate of the billing export regressed after Tuesday's deploy; Niaj is on it.",
    "Olivia prefers TypeScript over Java for new design system work.",
    "Meeting with Peggy about the hiring plan: we decided to hire a contractor by Monday.",
    "Rupert bought a used bicycle and rides it to work every day.",
    "Sybil's database migration finished overnight without errors.",
    "The quarterly budget review moved to Thursday because Trent is travelling.",
    "Victor said the mobile release needs another round of accessibility fixes.",
    "Walter keeps a sourdough starter in the office fridge.",
    "Yusuf is learning Rust and wants to rewrite the log retention job in it.",
    "Zara booked the offsite agenda room in Berlin for May.",
    "Maya reported that the API rate limits are too strict for the new partner.",
    "Leo fixed the dark mode contrast bug on the settings page.",
    "Priya wants the backup strategy documented before the security audit.",
    "Tomas ran load testing on the caching layer; CPU usage stayed under 60%.",
    "Ines adopted a kitten and named it Pixel.",
    "Kenji plans a kayak trip along the coast in August.",
    "Amara said the vendor contract renewal is due next month.",
    "Lucas thinks feature flags slowed the build time by two minutes.",
    "Sofia's sister moved to Toronto and started a pottery class.",
]

QUERIES = [
    "Where is Carol's sister moving?",
    "What did we decide about the quarterly budget?",
    "Which language does Alice prefer for database migration work?",
    "Who is allergic to peanuts?",
    "What happened with the caching layer load testing and CPU usage?",
    "security audit",
]


@pytest.fixture
def corpus(store):  # noqa: ANN001, ANN201
    start = datetime(2024, 1, 1, tzinfo=UTC)
    items = [
        {
            "content": t,
            "time": start + timedelta(days=i),
            "metadata": {"kind": "meeting" if i % 3 else "fact"},
        }
        for i, t in enumerate(NOTES)
    ]
    store.add_many(items, user_id="u1", to_stm=False)
    store.add_many([{"content": "Carol's sister is moving to Oslo."}], user_id="other", to_stm=False)
    return store


@pytest.mark.parametrize("query", QUERIES)
def test_exact_hybrid_matches_search_when_all_notes_fit_the_pool(corpus, query) -> None:  # noqa: ANN001
    store = corpus
    limit = 15  # search v7's pool, max(2 * limit, 20) = 30, holds every note of the tenant
    assert len(NOTES) <= pool_size(limit)
    qvec = store.embedder.embed([query])[0]
    with store.engine.connect() as conn:
        index = load_tenant(conn, "u1", store.embedder.name)
        terms = query_terms(conn, without_temporal_keywords(query))
        # pgvector's own distances (float32 arithmetic), so near-ties break as in the database
        rows = conn.execute(DISTANCES, {"q": "[" + ",".join(map(str, qvec)) + "]"}).all()
    by_kind = {(i, kind): d for i, kind, d in rows}
    assert index.n == len(NOTES)
    exact = exact_hybrid(
        index,
        None,
        terms,
        limit,
        distances=np.array([by_kind[(i, "text")] for i in index.ids]),
        context_distances=np.array([by_kind.get((i, "context"), np.nan) for i in index.ids]),
    )
    got = store.search(query, user_id="u1", limit=limit, touch=False)
    assert [str(r.note.id) for r in got] == [i for i, _ in exact]
    for r, (_, rel) in zip(got, exact, strict=True):
        assert r.relevance_score == pytest.approx(rel, rel=1e-6)


def test_exact_hybrid_text_only_and_vector_only(corpus) -> None:  # noqa: ANN001
    store = corpus
    with store.engine.connect() as conn:
        index = load_tenant(conn, "u1", store.embedder.name)
        terms = query_terms(conn, "sister moving")
    holding = {index.ids[r] for t in terms for r, _ in index.postings.get(t, ())}
    assert len(holding) == 3  # the notes holding "sister" or "move" (moving, moved)
    text_only = exact_hybrid(index, None, terms, 5)
    assert text_only[0][0] in holding and text_only[0][1] > 0
    db = [r.id for r in store.search("sister moving", user_id="u1", limit=5, touch=False)]
    assert db[0] in holding
    qvec = np.asarray(store.embedder.embed(["sister moving"])[0], dtype=np.float32)
    vec_only = exact_hybrid(index, qvec, [], 5)
    assert len(vec_only) == 5 and all(0 <= rel <= 1 for _, rel in vec_only)
    assert [rel for _, rel in vec_only] == sorted((rel for _, rel in vec_only), reverse=True)


def test_pure_helpers() -> None:
    assert parse_tsvector("'move':5 'sister':3,7 'x''y' 'z':2A") == {"move": 1, "sister": 2, "x'y": 1, "z": 1}
    assert pool_size(5) == 20 and pool_size(10) == 20 and pool_size(30) == 60
    assert recall(["a", "b"], ["b", "c"]) == 0.5 and recall([], []) == 1.0
    p = percentiles([1.0, 2.0, 3.0, 4.0])
    assert p["p50"] == pytest.approx(2.5) and p["n"] == 4
