"""search_notes v7's length prior: a fragment of a few words does not win a query by being short."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

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
    long_text = " ".join(f"word{i}" for i in range(20)) + " garden tools"
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
    # "garden tools": 2 distinct lexemes -> sqrt(2 / 16); the long note has 22 -> weight 1
    assert got[str(short_id)].semantic_score == pytest.approx(
        cosines[str(short_id)] * math.sqrt(2 / 16), rel=1e-5
    )
    assert got[str(long_id)].semantic_score == pytest.approx(cosines[str(long_id)], rel=1e-5)
