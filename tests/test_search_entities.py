"""The entity signal in hybrid search (search_notes v3) and coverage-weighted full text."""

from __future__ import annotations

import pytest

from cortex_pg import ValidationError
from cortex_pg.store import MemoryStore


@pytest.fixture
def estore(db_url):
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, extract_entities=True)
    yield s
    s.close()


def test_notes_mentioning_query_entities_are_candidates_and_boosted(estore):
    target = estore.add("Zoltan joined Acme Corp as a data engineer.", user_id="e")
    estore.add_many(
        [{"content": f"Unrelated chatter number {i} about the weather", "user_id": "e"} for i in range(30)]
    )
    plain = estore.search("Where does Zoltan work?", user_id="e", limit=5, touch=False)
    boosted = estore.search("Where does Zoltan work?", user_id="e", limit=5, touch=False, entities=True)
    top = boosted[0]
    assert top.id == target
    assert top.entity_score == pytest.approx(1.0) and top.entity_rank == 1
    assert all(r.entity_score is None for r in plain)
    # the entity list adds to the fusion: with it on, the target is the most relevant note
    assert top.relevance_score == max(r.relevance_score for r in boosted)


def test_expand_entities_reaches_one_hop(estore):
    estore.add("Alice works at Acme Corp.", user_id="x")
    hop = estore.add("Acme Corp opened an office in Lisbon last year.", user_id="x")
    estore.add_many([{"content": f"Filler note {i} on gardening", "user_id": "x"} for i in range(20)])
    without = estore.search("Tell me about Alice", user_id="x", limit=3, entities=True, touch=False)
    with_hop = estore.search(
        "Tell me about Alice", user_id="x", limit=3, entities=True, expand_entities=True, touch=False
    )
    assert hop in {r.id for r in with_hop}
    hop_result = next(r for r in with_hop if r.id == hop)
    assert hop_result.entity_score == pytest.approx(0.5)  # one hop away: half coverage
    assert hop not in {r.id for r in without if r.entity_score}


def test_entity_signal_respects_tenants_and_filters(estore):
    estore.add("Zoltan likes chess.", user_id="a", tags=["hobby"])
    estore.add("Zoltan likes go.", user_id="b")
    results = estore.search("Zoltan", user_id="a", entities=True, limit=10)
    assert {r.note.user_id for r in results} == {"a"}
    assert (
        estore.search("Zoltan", user_id="a", entities=True, where_filter={"tags": {"$contains": "nope"}})
        == []
    )


def test_entity_weight_is_validated(estore):
    with pytest.raises(ValidationError) as err:
        estore.search("Zoltan", entities=True, entity_weight=-1)
    assert err.value.field == "entity_weight"


def test_common_words_count_little_in_full_text(store):
    # "maya" is in every note; only the paraphrase carries the meaning of "pet"
    store.add_many(
        [{"content": f"Maya: note {i} about the weekend", "user_id": "m"} for i in range(8)]
        + [{"content": "Maya: I adopted a rescue dog, a beagle named Pepper!", "user_id": "m"}]
    )
    top = store.search("Maya dog beagle", user_id="m", limit=1, touch=False)[0]
    assert "beagle" in top.content
    only_name = store.search("Maya", user_id="m", limit=3, touch=False)
    assert all(r.relevance_score <= 1.0 for r in only_name)
