"""Hybrid search: ranking on a small hand-made corpus, recency, windows, STM, tenants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cortex_pg import ValidationError
from cortex_pg.store import MemoryStore

NOW = datetime(2024, 6, 30, 12, 0, tzinfo=UTC)

CORPUS = [
    # (content, days before NOW)
    ("The WiFi password for the cabin is tangerine-42.", 40),
    ("My sister adopted a small puppy last spring.", 35),
    ("We discussed the quarterly budget and cut travel costs.", 30),
    ("I started learning to play the violin with a teacher.", 20),
    ("The car was parked in the airport garage on level three.", 10),
    ("Dinner with Marta at the new Italian restaurant downtown.", 3),
    ("Deployed the payment service to production on Monday.", 1),
]


@pytest.fixture
def minilm_store(db_url, minilm):
    s = MemoryStore.open(db_url, embedder=minilm, auto_migrate=False)
    s.add_many(
        [{"content": c, "user_id": "u", "time": NOW - timedelta(days=d)} for c, d in CORPUS], to_stm=False
    )
    yield s
    s.close()


@pytest.mark.model
def test_full_text_wins_on_a_rare_literal(minilm_store):
    # "tangerine-42" is a literal only full-text matches well; the vector alone is vague
    top = minilm_store.search("tangerine-42", user_id="u", now=NOW)[0]
    assert "tangerine-42" in top.content
    assert top.text_rank == 1


@pytest.mark.model
def test_vector_wins_on_a_paraphrase(minilm_store):
    # no word in common with the answer: only the embedding can find it
    results = minilm_store.search("dog", user_id="u", now=NOW)
    assert results[0].content.startswith("My sister adopted a small puppy")
    assert results[0].text_rank is None and results[0].vector_rank == 1


@pytest.mark.model
def test_recency_wins_with_temporal_weight(minilm_store):
    query = "the budget meeting about costs"
    plain = minilm_store.search(query, user_id="u", now=NOW, touch=False)
    recent = minilm_store.search(query, user_id="u", now=NOW, temporal_weight=0.7, touch=False)
    newest = "Deployed the payment service to production on Monday."
    assert plain[0].content != newest
    assert recent[0].content == newest
    assert recent[0].recency_score == pytest.approx(pytest.approx(2.718281828 ** (-1 / 7), rel=1e-3))
    # the score is the documented blend
    r = recent[0]
    assert r.score == pytest.approx(0.3 * r.relevance_score + 0.7 * r.recency_score, rel=1e-6)


@pytest.mark.model
def test_notes_of_any_age_have_a_recency(store):
    """An old note among the candidates: exp(-age_days / 7) is below float8's range between about
    14 and 113 years of age; the search scores it 0 instead of raising."""
    from sqlalchemy import text

    now = datetime(2026, 12, 1, tzinfo=UTC)
    ages = {"last week": 7, "in 2011": 5_500, "in 1990": 13_300, "in 1900": 46_000}
    for label, days in ages.items():
        store.add(f"budget meeting {label}", user_id="u", time=now - timedelta(days=days))
    for weight in (0.0, 0.5):
        results = store.search("budget meeting", user_id="u", now=now, temporal_weight=weight, touch=False)
        recency = {r.content.removeprefix("budget meeting "): r.recency_score for r in results}
        assert set(recency) == set(ages)
        assert recency["last week"] == pytest.approx(2.718281828**-1, rel=1e-6)
        assert recency["in 2011"] == recency["in 1990"] == recency["in 1900"] == 0
    with store.engine.connect() as conn:  # plain SQL, the function's default now()
        rows = conn.execute(
            text("SELECT recency_score FROM cortex.search_notes('u', NULL, 'budget', 10)")
        ).all()
    assert len(rows) == 4 and min(r.recency_score for r in rows) == 0


def test_date_window(minilm_store):
    results = minilm_store.search(
        "anything", user_id="u", now=NOW, date_from=NOW - timedelta(days=21), date_to=NOW - timedelta(days=2)
    )
    assert {r.content for r in results} == {CORPUS[3][0], CORPUS[4][0], CORPUS[5][0]}
    assert all(NOW - timedelta(days=21) <= r.created_at < NOW - timedelta(days=2) for r in results)


def test_limit_is_filled_under_filters(store):
    # many notes of other users and outside the window: the filtered search still fills `limit`
    store.add_many([{"content": f"other user note {i}", "user_id": "x"} for i in range(300)], to_stm=False)
    base = datetime(2024, 1, 1, tzinfo=UTC)
    store.add_many(
        [
            {"content": f"my note about topic {i}", "user_id": "me", "time": base + timedelta(days=i)}
            for i in range(60)
        ],
        to_stm=False,
    )
    results = store.search("note", user_id="me", limit=15, date_from=base + timedelta(days=20), now=base)
    assert len(results) == 15
    assert all(r.note.user_id == "me" and r.created_at >= base + timedelta(days=20) for r in results)


def test_tenant_separation_even_when_empty(store):
    store.add("bob's bank PIN is 1234", user_id="bob")
    assert store.search("bank PIN", user_id="alice") == []
    store.add("alice likes tea", user_id="alice")
    results = store.search("bank PIN", user_id="alice", limit=50)
    assert [r.note.user_id for r in results] == ["alice"]


def test_session_filter(store):
    store.add("meeting notes from session one", user_id="u", session_id="s1")
    store.add("meeting notes from session two", user_id="u", session_id="s2")
    only = store.search("meeting notes", user_id="u", session_id="s2")
    assert [r.note.session_id for r in only] == ["s2"]
    both = store.search("meeting notes", user_id="u")
    assert {r.note.session_id for r in both} == {"s1", "s2"}


def test_stm_capacity_and_lru(db_url):
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, stm_capacity=3)
    try:
        ids = [s.add(f"short term item {i}", user_id="u", session_id="s") for i in range(3)]
        # touch the oldest: it becomes most recently used
        s.get(ids[0], touch=True)
        ids.append(s.add("short term item 3", user_id="u", session_id="s"))
        stm = {
            r.id for r in s.search("short term item", user_id="u", memory_source="stm", limit=10, touch=False)
        }
        assert stm == {ids[0], ids[2], ids[3]}  # ids[1] was least recently used
        # capacity is per (user, session): another session is untouched
        s.add("other session item", user_id="u", session_id="t")
        assert s.count(user_id="u", session_id="s", memory_source="stm") == 3
        assert s.count(user_id="u", session_id="t", memory_source="stm") == 1
        # LTM keeps everything
        assert s.count(user_id="u", memory_source="ltm") == 5
        # a bulk add keeps only the newest `capacity`
        s.add_many([{"content": f"bulk {i}", "user_id": "u", "session_id": "b"} for i in range(10)])
        kept = {
            r.content for r in s.search("bulk", user_id="u", session_id="b", memory_source="stm", limit=10)
        }
        assert kept == {"bulk 7", "bulk 8", "bulk 9"}
    finally:
        s.close()


def test_a_write_keeps_its_own_notes_in_a_full_stm(db_url):
    """A note's STM row is stamped with its transaction's start time; a touch committed meanwhile
    stamps later. The trim after the write keeps the notes it just wrote, and evicts the least
    recently used of the others, rather than the new note."""
    from sqlalchemy import text

    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, stm_capacity=2)
    try:
        old = [s.add(f"short term item {i}", user_id="u", session_id="s") for i in range(2)]
        with s.engine.begin() as conn:  # as if touched after the next write's transaction began
            conn.execute(
                text(
                    "UPDATE cortex.stm_notes SET last_accessed_at = now() + interval '1 hour' WHERE id = :i"
                ),
                {"i": old[1]},
            )
            conn.execute(
                text(
                    "UPDATE cortex.stm_notes SET last_accessed_at = now() + interval '2 hours' WHERE id = :i"
                ),
                {"i": old[0]},
            )
        new = s.add("short term item 2", user_id="u", session_id="s")
        stm = {n.id for n in s.list_notes(user_id="u", session_id="s", memory_source="stm")}
        assert stm == {new, old[0]}  # old[1], touched less recently than old[0], went
        batch = s.add_many([{"content": f"bulk {i}", "user_id": "u", "session_id": "s"} for i in range(3)])
        stm = {n.id for n in s.list_notes(user_id="u", session_id="s", memory_source="stm")}
        assert stm == set(batch[1:])  # the newest two of the batch, though old[0] looks more recent
        later = "UPDATE cortex.stm_notes SET last_accessed_at = now() + interval '3 hours' WHERE id = :i"
        with s.engine.begin() as conn:
            conn.execute(text(later), {"i": batch[1]})
        # batches of one call are one transaction: the second batch's trim keeps the first's note
        two = s.add_many(
            [{"content": f"pair {i}", "user_id": "u", "session_id": "s"} for i in range(2)], batch_size=1
        )
        stm = {n.id for n in s.list_notes(user_id="u", session_id="s", memory_source="stm")}
        assert stm == set(two)
        # content already in STM is not written again, so it is not kept over a more recent note
        with s.engine.begin() as conn:
            conn.execute(text(later), {"i": two[1]})
        again = s.add_many(
            [
                {"content": "pair 0", "user_id": "u", "session_id": "s"},
                {"content": "fresh", "user_id": "u", "session_id": "s"},
            ]
        )
        stm = {n.id for n in s.list_notes(user_id="u", session_id="s", memory_source="stm")}
        assert again[0] == two[0] and stm == {two[1], again[1]}
    finally:
        s.close()


def test_all_sources_dedupe_with_stm_copy_winning(store):
    nid = store.add("a note in both tiers", user_id="u")
    results = store.search("note in both tiers", user_id="u")
    assert [r.id for r in results] == [nid]
    assert results[0].memory_tier == "stm"
    assert store.search("note in both tiers", user_id="u", memory_source="ltm")[0].memory_tier == "ltm"


def test_search_counts_accesses(store):
    nid = store.add("count my accesses", user_id="u")
    store.search("count my accesses", user_id="u")
    store.search("count my accesses", user_id="u")
    assert store.get(nid).access_count == 2
    store.search("count my accesses", user_id="u", touch=False)
    assert store.get(nid).access_count == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": -3}, "limit"),
        ({"query": "x", "temporal_weight": 1.5}, "temporal_weight"),
        ({"query": "x", "temporal_weight": -0.1}, "temporal_weight"),
        ({"query": "x", "memory_source": "cache"}, "memory_source"),
        ({"query": "x", "date_from": "yesterday-ish"}, "date_from"),
        ({"query": "x", "date_from": "2024-02-01", "date_to": "2024-01-01"}, "date_to"),
    ],
)
def test_bad_search_arguments(store, kwargs, field):
    with pytest.raises(ValidationError) as err:
        store.search(**kwargs)
    assert err.value.field == field


def test_sql_function_validates_too(store):
    from sqlalchemy import text

    from cortex_pg.errors import translate_db_errors

    with pytest.raises(ValidationError), store.engine.connect() as conn, translate_db_errors():
        conn.execute(text("SELECT * FROM cortex.search_notes('u', NULL, 'x', 0)"))


@pytest.mark.parametrize(
    "blank",
    [
        "",
        "   ",
        "\u200b",
        "\u200b \ufeff\u2060",
        "\t\u00a0\u3000",
        "\u115f\u1160",
        "\u3164",
        "\uffa0 ",
        "\u2800",
        "\u0301\u0308",
        " \u20dd",
    ],
)
def test_a_context_with_no_visible_character_is_no_context(store, blank):
    for content, days in CORPUS:
        store.add(content, user_id="u", time=NOW - timedelta(days=days), to_stm=False)
    with pytest.raises(ValidationError) as err:  # the same text as a query is refused as blank
        store.search(blank, user_id="u")
    assert err.value.field == "query"

    def ranked(**kwargs):
        return [
            (h.id, h.score, h.context_score)
            for h in store.search("cabin password", user_id="u", now=NOW, touch=False, **kwargs)
        ]

    plain = ranked()
    assert plain and all(s is None for _, _, s in plain)
    assert ranked(context=blank) == plain  # not embedded, not re-ranking
    assert all(s is not None for _, _, s in ranked(context="the cabin wifi"))  # (a real context does)
