"""search_notes v13: a note said by a person the query names gains relevance
(``Ranking.speaker_weight``): the rule for what names a speaker, the formula, and what it leaves
alone."""

from __future__ import annotations

import pytest

from cortex_pg.store import MemoryStore

W = 0.08  # the default speaker_weight


def _turns(store: MemoryStore, user: str = "u") -> dict[str, str]:
    """Two speakers who both went camping; Caroline's turn matches a camping question better by
    its words, Melanie's is the one a question about Melanie wants."""
    ids = store.add_many(
        [
            {"content": "Camping at the beach, camping in the forest: camping every summer!",
             "metadata": {"speaker": "Caroline"}, "session_id": "s1"},
            {"content": "We camped by the lake once, it rained.",
             "metadata": {"speaker": "Melanie"}, "session_id": "s2"},
            {"content": "The new bakery sells rye bread.", "metadata": {"speaker": "Mary Ann"},
             "session_id": "s3"},
            {"content": "Tax forms are due in April.", "session_id": "s4"},
        ],
        user_id=user,
        to_stm=False,
    )  # fmt: skip
    return dict(zip(("caroline", "melanie", "mary_ann", "nobody"), ids, strict=True))


def _relevance(store: MemoryStore, query: str, ranking: dict | None = None, **kw) -> dict[str, float]:  # noqa: ANN003
    return {
        r.id: r.relevance_score
        for r in store.search(query, user_id="u", limit=10, touch=False, ranking=ranking, **kw)
    }


def test_the_named_speakers_note_passes_a_better_worded_one(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    query = "Where did Melanie go camping?"
    off = [
        r.id for r in store.search(query, user_id="u", limit=4, touch=False, ranking={"speaker_weight": 0})
    ]
    assert off.index(ids["caroline"]) < off.index(ids["melanie"])  # by its words alone
    on = [r.id for r in store.search(query, user_id="u", limit=4, touch=False, ranking={"speaker_weight": 1})]
    assert on[0] == ids["melanie"]


def test_relevance_follows_the_documented_formula(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    query = "What does Melanie's family do in summer?"  # a possessive names the speaker
    off = _relevance(store, query, {"speaker_weight": 0})
    on = _relevance(store, query)
    assert set(on) == set(off)
    for nid, r in off.items():
        named = nid == ids["melanie"]
        assert on[nid] == pytest.approx((r + W * named) / (1 + W), abs=1e-9)
    assert all(0 <= r <= 1 for r in on.values())


@pytest.mark.parametrize(
    "query",
    [
        "Where did Mel go camping?",  # part of a name names nobody
        "Where did Ann buy bread?",  # one word of a two-word name
        "Where did Melanies go camping?",  # another word
        "Where did you go camping?",
    ],
)
def test_a_query_that_names_no_speaker_ranks_as_without_the_rule(store, query) -> None:  # noqa: ANN001
    _turns(store)
    assert _relevance(store, query) == pytest.approx(_relevance(store, query, {"speaker_weight": 0}))


def test_a_speaker_of_several_words_is_named_by_them_in_a_row(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    for query in ("What bread does Mary-Ann like?", "what bread does MARY ANN like"):
        off = _relevance(store, query, {"speaker_weight": 0})
        on = _relevance(store, query)
        assert on[ids["mary_ann"]] == pytest.approx((off[ids["mary_ann"]] + W) / (1 + W))
    off = _relevance(store, "What bread does Ann Mary like?", {"speaker_weight": 0})
    assert _relevance(store, "What bread does Ann Mary like?") == pytest.approx(off)


def test_a_short_term_notes_speaker_counts(store) -> None:  # noqa: ANN001
    stm = store.add("We camped by the river.", user_id="u", session_id="chat",
                    metadata={"speaker": "Melanie"}, to_ltm=False)  # fmt: skip
    store.add("Camping camping camping, the best camping trip.", user_id="u", session_id="chat2",
              metadata={"speaker": "Caroline"}, to_ltm=False)  # fmt: skip
    query = "Where did Melanie go camping?"
    off = _relevance(store, query, {"speaker_weight": 0}, memory_source="stm")
    on = _relevance(store, query, memory_source="stm")
    assert set(on) == set(off) and len(on) == 2
    assert on[stm] == pytest.approx((off[stm] + W) / (1 + W))


def test_another_tenants_speakers_do_not_count(store) -> None:  # noqa: ANN001
    # tenant u names no speaker of its own; tenant "other" holds Melanie's turns
    store.add_many(
        [{"content": f"Camping trip number {i} at the lake", "session_id": f"s{i}"} for i in range(3)],
        user_id="u",
        to_stm=False,
    )
    _turns(store, user="other")
    query = "Where did Melanie go camping?"
    assert _relevance(store, query) == pytest.approx(_relevance(store, query, {"speaker_weight": 0}))


@pytest.mark.parametrize(
    "speaker",
    [42, True, ["Melanie"], {"name": "Melanie"}, None, "", "  ", "Melanie" + "!" * 200],
)
def test_only_a_short_string_is_a_speaker(store, speaker) -> None:  # noqa: ANN001
    # a number, a boolean, a list, an object, null, a blank or an over-long value names nobody,
    # even for a query holding its JSON text
    store.add("Camping at the lake, 42 true Melanie name.", user_id="u", session_id="s1",
              metadata={"speaker": speaker}, to_stm=False)  # fmt: skip
    store.add("We camped by the sea.", user_id="u", session_id="s2", to_stm=False)
    query = "Is it true that name Melanie, 42, went camping?"
    assert _relevance(store, query) == pytest.approx(_relevance(store, query, {"speaker_weight": 0}))


def test_plain_sql_applies_the_rule_by_default(store) -> None:  # noqa: ANN001
    from sqlalchemy import text

    ids = _turns(store)
    sql = text(
        "SELECT id::text, relevance_score FROM cortex.search_notes('u', NULL, 'Where did Melanie go camping', 10, "
        "p_ranking => CAST(:r AS jsonb))"
    )
    with store.engine.connect() as conn:
        on = dict(conn.execute(sql, {"r": None}).all())
        off = dict(conn.execute(sql, {"r": '{"speaker_weight": 0}'}).all())
    assert on[ids["melanie"]] == pytest.approx((off[ids["melanie"]] + W) / (1 + W))
    assert on[ids["caroline"]] == pytest.approx(off[ids["caroline"]] / (1 + W))


# --- the query embedded without the speakers it names (Ranking.unnamed_query_weight) ---------

U = 0.4  # the default unnamed_query_weight
_COSINE_ONLY = {"context_weight": 0, "length_prior": 0, "vector_weight": 1}


def _without_speakers(store: MemoryStore, query: str, user: str = "u") -> str | None:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT cortex.query_without_speakers(:u, :q)"), {"u": user, "q": query}
        ).scalar_one()


def test_the_speakers_a_query_names_leave_it(store) -> None:  # noqa: ANN001
    _turns(store)
    store.add("Camping by a river.", user_id="other", metadata={"speaker": "Joanna"}, to_stm=False)
    store.add("A short-term remark.", user_id="u", metadata={"speaker": "Stan"}, to_ltm=False)
    store.add("A remark by Don.", user_id="u", metadata={"speaker": "Don"}, to_stm=False)
    for query, expected in [
        ("Why don't you like camping?", None),  # a contraction, not Don
        ("Why don’t Melanie and Don go camping?", "Why don’t and go camping?"),
        ("What does Melanie's son like?", "What does son like?"),
        ("Did MELANIE and caroline go camping?", "Did and go camping?"),
        ("What bread does Mary-Ann buy?", "What bread does buy?"),  # words in a row
        ("Melanie’s favourite lake?", "favourite lake?"),
        ("Did Melanies go camping?", None),  # no speaker named
        ("Where did Mary go?", None),  # part of a speaker's words
        ("Where did Joanna go?", None),  # another tenant's speaker
        ("What did Stan say?", None),  # a speaker of short-term notes only
        ("Melanie?", None),  # nothing would be left
    ]:
        assert _without_speakers(store, query) == expected, query


def test_the_query_embedding_blends_in_the_query_without_the_names(store) -> None:  # noqa: ANN001
    import numpy as np

    from cortex_pg.store.searching import blend

    ids = _turns(store)
    query = "Where did Melanie go camping by the lake?"
    plain, unnamed = store.embedder.embed([query, "Where did go camping by the lake?"])
    texts = dict(zip(ids.values(), store.embedder.embed(
        ["Camping at the beach, camping in the forest: camping every summer!",
         "We camped by the lake once, it rained.", "The new bakery sells rye bread.",
         "Tax forms are due in April."]), strict=True))  # fmt: skip

    def semantic(ranking: dict) -> dict[str, float]:
        found = store.search(query, user_id="u", limit=10, touch=False, ranking={**_COSINE_ONLY, **ranking})
        return {r.id: r.semantic_score for r in found}

    for ranking, vector in (({}, blend(plain, unnamed, U)), ({"unnamed_query_weight": 0}, plain),
                            ({"unnamed_query_weight": 1}, unnamed)):  # fmt: skip
        got = semantic(ranking)
        assert len(got) == 4
        for nid, score in got.items():
            assert score == pytest.approx(float(np.dot(texts[nid], vector)), abs=1e-5), ranking
    assert semantic({}) != pytest.approx(semantic({"unnamed_query_weight": 0}), abs=1e-4)
    # a query that names no speaker is embedded as written
    other = "Where did anyone go camping by the lake?"
    assert [
        r.semantic_score for r in store.search(other, user_id="u", touch=False, ranking=_COSINE_ONLY)
    ] == [
        r.semantic_score
        for r in store.search(
            other, user_id="u", touch=False, ranking={**_COSINE_ONLY, "unnamed_query_weight": 0}
        )
    ]


def test_blend_is_the_normalised_weighted_sum() -> None:
    from cortex_pg.store.searching import blend

    assert blend([1.0, 0.0], [0.0, 1.0], 0.5) == pytest.approx([2**-0.5, 2**-0.5])
    assert blend([1.0, 0.0], [0.0, 1.0], 0.0) == pytest.approx([1.0, 0.0])
    assert blend([1.0, 0.0], [-1.0, 0.0], 0.5) == [1.0, 0.0]  # a zero sum: the query as written


def test_calute_long_term_search_embeds_the_query_without_the_names_too(store, monkeypatch) -> None:  # noqa: ANN001
    from cortex_pg.compat.calute import LongTermMemory

    ltm = LongTermMemory(store=store, user_id="u")
    ltm.save("We camped by the lake once, it rained.", {"speaker": "Melanie"})
    embedded: list[str] = []
    inner = store.embedder.embed
    monkeypatch.setattr(store.embedder, "embed", lambda texts: embedded.extend(texts) or inner(texts))
    ltm.search("Where did Melanie camp last summer?")
    assert "Where did camp last summer?" in embedded
    embedded.clear()
    ltm.search("Where did anybody camp?")  # names no speaker: one text
    assert embedded == ["Where did anybody camp?"]
