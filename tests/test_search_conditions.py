"""Search conditions (where_filter, window, session) hold for the copy a note is returned as,
and plain SQL refuses a window that holds no time and a query vector without a direction."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from cortex_pg.store.rows import vector_literal


def _touch_ltm(store, user_id: str, note_id: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            text("SELECT cortex.touch_notes(:u, ARRAY[CAST(:i AS uuid)], 'ltm')"),
            {"u": user_id, "i": note_id},
        )


def test_a_note_in_both_tiers_comes_back_as_the_copy_that_passes_the_filter(store):
    boiler = store.add("The boiler service is booked for Thursday", user_id="u", session_id="s")
    store.add("Grandma's apple pie recipe uses cinnamon", user_id="u", session_id="t")
    _touch_ltm(store, "u", boiler)  # the long-term row's access_count is 1, the short-term copy's 0
    counted = {"access_count": {"$gte": 1}}
    for source in ("all", "ltm", "stm"):
        results = store.search(
            "boiler service", user_id="u", memory_source=source, where_filter=counted, touch=False
        )
        assert all(r.note.access_count >= 1 for r in results), source
        if source == "stm":
            assert results == []
        else:
            assert [(r.id, r.memory_tier) for r in results] == [(boiler, "ltm")]
    # without a condition, or when the copy passes too, the short-term copy is returned (as before)
    assert store.search("boiler service", user_id="u", limit=1, touch=False)[0].memory_tier == "stm"
    either = {"access_count": {"$gte": 0}}
    assert (
        store.search("boiler service", user_id="u", limit=1, where_filter=either, touch=False)[0].memory_tier
        == "stm"
    )


def test_a_short_term_copy_that_passes_is_still_preferred(store):
    note = store.add("The boiler service is booked for Thursday", user_id="u", session_id="s")
    with store.engine.begin() as conn:  # only the short-term copy is touched
        conn.execute(text("SELECT cortex.touch_notes('u', ARRAY[CAST(:i AS uuid)], 'stm')"), {"i": note})
    results = store.search("boiler", user_id="u", where_filter={"access_count": 1}, touch=False)
    assert [(r.id, r.memory_tier, r.note.access_count) for r in results] == [(note, "stm", 1)]


def _search_sql(store, **params):
    args = ", ".join(f"{k} => :{k}" for k in params)
    with store.engine.begin() as conn:
        return conn.execute(text(f"SELECT id FROM cortex.search_notes({args})"), params).all()


@pytest.mark.parametrize(
    ("date_from", "date_to"),
    [
        ("2024-06-02", "2024-06-01"),
        ("2024-06-01", "2024-06-01"),
        ("infinity", None),
        (None, "-infinity"),
    ],
)
def test_plain_sql_refuses_a_window_that_holds_no_time(store, date_from, date_to):
    store.add("The boiler service is booked for Thursday", user_id="u")
    with pytest.raises(DBAPIError, match="holds no time") as err:
        _search_sql(
            store,
            p_user_id="u",
            p_query_embedding=None,
            p_query_text="boiler",
            p_date_from=date_from,
            p_date_to=date_to,
        )
    assert err.value.orig.sqlstate == "22023"
    # a window that holds time still searches
    assert len(
        _search_sql(
            store, p_user_id="u", p_query_embedding=None, p_query_text="boiler", p_date_from="2000-01-01"
        )
    )


@pytest.mark.parametrize("which", ["p_query_embedding", "p_context_embedding"])
def test_plain_sql_refuses_an_all_zero_embedding(store, which):
    store.add("The boiler service is booked for Thursday", user_id="u")
    dim = store.embedder.dim
    good = vector_literal(store.embedder.embed(["boiler"])[0])
    params = {"p_user_id": "u", "p_query_embedding": good, "p_query_text": None}
    params[which] = vector_literal([0.0] * dim)
    with store.engine.begin() as conn:
        args = "p_user_id => :p_user_id, p_query_embedding => CAST(:p_query_embedding AS vector), p_query_text => :p_query_text"
        if which == "p_context_embedding":
            args += ", p_context_embedding => CAST(:p_context_embedding AS vector)"
        with pytest.raises(DBAPIError, match="all zeros") as err:
            conn.execute(text(f"SELECT id FROM cortex.search_notes({args})"), params).all()
    assert err.value.orig.sqlstate == "22023"


class _OddFor:
    """The hashing embedder, except that ``blank`` embeds to ``value`` in every component."""

    def __init__(self, blank: str, value: float = 0.0) -> None:
        from cortex_pg.embeddings import HashingEmbedder

        self.inner, self.blank, self.value = HashingEmbedder(), blank, value
        self.name, self.dim = self.inner.name, self.inner.dim

    def embed(self, texts):
        return [
            [self.value] * self.dim if t == self.blank else v
            for t, v in zip(texts, self.inner.embed(texts), strict=True)
        ]


def test_an_embedder_that_returns_zeros_is_refused_before_anything_is_written(db_url):
    from cortex_pg import EmbeddingModelError
    from cortex_pg.store import MemoryStore

    s = MemoryStore.open(db_url, embedder=_OddFor("nothing here"), auto_migrate=False)
    try:
        kept = s.add("The boiler service is booked for Thursday", user_id="u")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            s.add("nothing here", user_id="u")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            s.add_many([{"content": "a pie recipe"}, {"content": "nothing here"}], user_id="u")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            s.search("nothing here", user_id="u")
        assert [n.id for n in s.list_notes(user_id="u")] == [kept]
        assert [n.id for n in s.list_notes(user_id="u", memory_source="stm")] == [kept]
        assert s.search("boiler", user_id="u", touch=False)[0].id == kept
    finally:
        s.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"touch": "maybe"}, "touch"),
        ({"touch": "no"}, "touch"),
        ({"touch": 0}, "touch"),
        ({"include_links": "no"}, "include_links"),
        ({"entities": "yes"}, "entities"),
        ({"expand_entities": 1}, "expand_entities"),
        ({"collections": "no"}, "collections"),
        ({"include_links": True, "link_depth": 0}, "link_depth"),
        ({"include_links": True, "link_depth": 11}, "link_depth"),
        ({"include_links": True, "link_depth": 10_000}, "link_depth"),
        ({"link_depth": True}, "link_depth"),
    ],
)
def test_search_flags_are_true_or_false_and_link_depth_is_1_to_10(store, kwargs, field):
    from cortex_pg import ValidationError

    note = store.add("Alice adopted a golden retriever named Max.", user_id="u")
    with pytest.raises(ValidationError) as err:
        store.search("golden retriever", user_id="u", **kwargs)
    assert err.value.field == field
    assert store.get(note).access_count == 0  # nothing was touched
    with pytest.raises(ValidationError) as err:
        store.get(note, touch="no")
    assert err.value.field == "touch"
    assert store.search("golden retriever", user_id="u", include_links=True, link_depth=10)[0].id == note


@pytest.mark.parametrize("query", [123, b"golden", ["golden"], None, "bad \ud800 surrogate", "x" * 10_001])
def test_prem_search_checks_the_query_first(db_url, query):
    from cortex_pg import AgenticMemorySystem, ValidationError
    from cortex_pg.embeddings import HashingEmbedder

    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=False
    )
    try:
        with pytest.raises(ValidationError) as err:
            system.search(query, user_id="u")
        assert err.value.field == "query"
    finally:
        system.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"include_links": "no"}, "include_links"),
        ({"touch": None}, "touch"),
        ({"link_depth": 50}, "link_depth"),
    ],
)
def test_searches_with_collections_check_their_flags_too(store, kwargs, field):
    from cortex_pg import ValidationError
    from cortex_pg.collections.search import search_with_collections

    store.add("Alice adopted a golden retriever named Max.", user_id="u", category="pets.dogs")
    with pytest.raises(ValidationError) as err:
        store.search("golden retriever", user_id="u", collections=True, **kwargs)
    assert err.value.field == field
    with pytest.raises(ValidationError) as err:  # as the Prem facade calls it
        search_with_collections(store, "golden retriever", user_id="u", **kwargs)
    assert err.value.field == field


def test_an_expanded_neighbour_comes_back_as_the_copy_an_unfiltered_search_gives(store):
    # the answer is found through its question (expansion, the answer rule), not as a candidate
    store.add("ok, sounds good to me", user_id="u", session_id="main", time="2023-05-01T10:00:00Z")
    store.add(
        "Did you book the flight to Lisbon?", user_id="u", session_id="main", time="2023-05-01T10:01:00Z"
    )
    answer = store.add(
        "yes, done yesterday evening", user_id="u", session_id="main", time="2023-05-01T10:02:00Z"
    )
    for i in range(40):  # better matches than the answer, which is no candidate
        store.add(
            f"filler {i} about a flight to Lisbon, number {i}",
            user_id="u",
            session_id=f"f{i}",
            time="2023-04-01T10:00:00Z",
        )
    query = "Did you book the flight to Lisbon?"

    def tiers(**kw):
        return {r.id: r.memory_tier for r in store.search(query, user_id="u", touch=False, **kw)}

    plain = tiers()
    assert plain[answer] == "stm"
    alone = {"expansion": 0, "answer_weight": 0}
    assert answer not in [r.id for r in store.search(query, user_id="u", touch=False, ranking=alone)]
    for kw in (
        {"where_filter": {"importance": {"$gte": 0}}},
        {"date_from": "2023-01-01"},
        {"session_id": "main"},
    ):
        assert tiers(**kw)[answer] == "stm", kw


@pytest.mark.parametrize("value", [1e-30, float("nan"), float("inf"), 1e20])
def test_an_embedder_vector_without_a_direction_in_float4_is_refused(db_url, value):
    from cortex_pg import EmbeddingModelError
    from cortex_pg.store import MemoryStore

    s = MemoryStore.open(db_url, embedder=_OddFor("odd one", value), auto_migrate=False)
    try:
        kept = s.add("The boiler service is booked for Thursday", user_id="u")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            s.add("odd one", user_id="u")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            s.search("odd one", user_id="u")
        results = s.search("boiler", user_id="u", touch=False)
        assert [r.id for r in results] == [kept] and results[0].score == results[0].score  # not NaN
    finally:
        s.close()


def test_vectors_are_checked_as_numpy_arrays_too():
    import numpy as np

    from cortex_pg.embeddings import HashingEmbedder
    from cortex_pg.store.writing import check_vectors

    inner = HashingEmbedder()
    check_vectors(inner, np.asarray(inner.embed(["a", "b"]), dtype=np.float32), 2)  # no ValueError
    check_vectors(inner, np.zeros((0, inner.dim), dtype=np.float32), 0)


@pytest.mark.parametrize("value", [0.0, float("nan")])
def test_calute_long_term_search_checks_the_query_vector(db_url, value):
    from cortex_pg import EmbeddingModelError
    from cortex_pg.compat.calute import LongTermMemory
    from cortex_pg.store import MemoryStore

    s = MemoryStore.open(db_url, embedder=_OddFor("odd one", value), auto_migrate=False)
    try:
        ltm = LongTermMemory(store=s, user_id="u", session_id="s")
        ltm.save("The boiler service is booked for Thursday")
        with pytest.raises(EmbeddingModelError, match="without a direction"):
            ltm.search("odd one")
        found = ltm.search("boiler")
        assert [i.content for i in found] == ["The boiler service is booked for Thursday"]
        assert all(i.relevance_score == i.relevance_score for i in found)  # not NaN
    finally:
        s.close()
