"""search_notes v7's length prior: a fragment of a few words does not win a query by being short."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from cortex_pg.embeddings.hashing import HashingEmbedder
from cortex_pg.store import MemoryStore

SECTION = (
    "The garden behind the house grows tomatoes, beans and courgettes every summer; Alice waters it "
    "each evening, turns the compost on Sundays and keeps notes on which seeds did well."
)


def test_a_heading_alone_does_not_outrank_the_section_it_names(minilm, db_url) -> None:  # noqa: ANN001
    store = MemoryStore.open(db_url, embedder=minilm, auto_migrate=False)
    try:
        store.add_many(
            [{"content": "Alice's garden"}, {"content": SECTION}, {"content": "The car needs new tyres."}],
            user_id="u",
            to_stm=False,
        )
        got = store.search("What does Alice grow in her garden?", user_id="u", limit=3, touch=False)
        assert got[0].note.content == SECTION
        vec = store.search(
            "What does Alice grow in her garden?", user_id="u", limit=3, touch=False, memory_source="ltm"
        )
        assert vec[0].note.content == SECTION
    finally:
        store.close()


def test_the_semantic_score_of_a_short_note_is_weighed_by_its_distinct_lexemes(store) -> None:  # noqa: ANN001
    # separate sessions: neither note has a predecessor, so no context embedding
    [short_id] = store.add_many([{"content": "garden tools", "session_id": "a"}], user_id="u", to_stm=False)
    long_text = " ".join(f"word{i}" for i in range(20)) + " garden tools"  # 22 lexemes
    [long_id] = store.add_many([{"content": long_text, "session_id": "b"}], user_id="u", to_stm=False)
    query_vec = store.embedder.embed(["garden tools"])[0]
    got = {str(r.note.id): r for r in store.search("garden tools", user_id="u", limit=5, touch=False)}
    with store.engine.connect() as conn:
        cosines = dict(
            conn.execute(
                text(
                    "SELECT note_id::text, 1 - (embedding <=> CAST(:q AS vector)) FROM cortex.embeddings "
                    "WHERE user_id = 'u' AND kind = 'text'"
                ),
                {"q": "[" + ",".join(map(str, query_vec)) + "]"},
            ).all()
        )
    # no context embedding: the text's cosine stands in for it, v = (w + 1) / 2 * cos;
    # "garden tools": 2 distinct lexemes -> w = sqrt(2 / 24); the long note has 22
    assert got[str(short_id)].semantic_score == pytest.approx(
        cosines[str(short_id)] * (math.sqrt(2 / 24) + 1) / 2, rel=1e-5
    )
    assert got[str(long_id)].semantic_score == pytest.approx(
        cosines[str(long_id)] * (math.sqrt(22 / 24) + 1) / 2, rel=1e-5
    )


def test_a_long_notes_windows_take_one_place_in_the_vector_pool(db_url) -> None:  # noqa: ANN001
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(window_chars=200), auto_migrate=False)
    try:
        phrase = "tomatoes beans courgettes compost seeds garden harvest "
        long_id = store.add(phrase * 400, user_id="u", session_id="long", to_stm=False)  # ~130 windows
        with store.engine.connect() as conn:
            windows = conn.execute(
                text("SELECT count(*) FROM cortex.embeddings WHERE note_id = :i AND kind = 'text'"),
                {"i": long_id},
            ).scalar_one()
        assert windows > 100  # more than several pools' worth of rows
        others = [
            store.add(f"{phrase} note {i}", user_id="u", session_id=f"s{i}", to_stm=False) for i in range(15)
        ]
        # vector candidates only (no query text): every window of the long note is nearer the query
        # than any other note, yet the pool (20 for limit 10) still holds 10 distinct notes
        with store.engine.begin() as conn:
            got = (
                conn.execute(
                    text("SELECT id::text FROM cortex.search_notes('u', CAST(:q AS vector), NULL, 10)"),
                    {"q": str(store.embedder.embed([phrase * 3])[0])},
                )
                .scalars()
                .all()
            )
        assert len(got) == 10 and len(set(got)) == 10
        assert set(got) <= {long_id, *others}
    finally:
        store.close()


def test_two_notes_are_ranked_by_meaning_not_by_a_small_bm25_difference(minilm, db_url) -> None:  # noqa: ANN001
    # both notes share the one matching term ("alice"); BM25 prefers the shorter by a hair, the
    # vector prefers the answer: scaled by its maximum, BM25 no longer turns that hair into a tie
    store = MemoryStore.open(db_url, embedder=minilm, auto_migrate=False)
    try:
        store.add("Alice moved to Lisbon in May 2024", user_id="alice", time="2024-05-10T09:00:00Z")
        store.add("Alice started learning Portuguese", user_id="alice")
        for _ in range(3):
            [hit] = store.search("Where does Alice live?", user_id="alice", limit=1, touch=False)
            assert hit.note.content == "Alice moved to Lisbon in May 2024"
    finally:
        store.close()
