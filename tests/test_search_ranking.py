"""search_notes v8's ranking argument (``MemoryStore.search(ranking=...)``, ``p_ranking``):
each constant does what its documentation says, and bad values are refused by name."""

from __future__ import annotations

import json
import math

import pytest
import sqlalchemy.exc
from sqlalchemy import text

from cortex_pg.errors import ValidationError
from cortex_pg.store import MemoryStore
from cortex_pg.store.ranking import Ranking

NOTES = [
    "the garden grows tomatoes and beans every summer",
    "we planted beans in the garden last spring",
    "tomatoes need sun and water",
    "the car needs new tyres before winter",
    "garden tools are kept in the shed",
    "beans and rice for dinner tonight",
    "winter is cold and dark in the north",
    "a new shed for the garden tools",
]


def _fill(store: MemoryStore) -> None:
    # one session each: no neighbours, no context embeddings, so only the ranking's fusion acts
    store.add_many(
        [{"content": c, "session_id": f"s{i}"} for i, c in enumerate(NOTES)], user_id="u", to_stm=False
    )


@pytest.mark.parametrize(
    ("ranking", "field"),
    [
        ({"bogus": 1}, "ranking.bogus"),
        ({"fusion": "max"}, "ranking.fusion"),
        ({"vector_weight": 1.5}, "ranking.vector_weight"),
        ({"context_weight": -0.1}, "ranking.context_weight"),
        ({"smoothing_prev": "0.3"}, "ranking.smoothing_prev"),
        ({"smoothing_next": True}, "ranking.smoothing_next"),
        ({"expansion": 2.5}, "ranking.expansion"),
        ({"expansion": 51}, "ranking.expansion"),
        ({"length_prior": float("nan")}, "ranking.length_prior"),
        ({"rrf_k": 0}, "ranking.rrf_k"),
        ({"answer_weight": 1.5}, "ranking.answer_weight"),
        ({"speaker_weight": -0.1}, "ranking.speaker_weight"),
        ({"date_weight": -1}, "ranking.date_weight"),
        ([("fusion", "rrf")], "ranking"),
    ],
)
def test_a_bad_ranking_is_refused_naming_its_key(store, ranking, field) -> None:  # noqa: ANN001
    _fill(store)
    with pytest.raises(ValidationError) as err:
        store.search("garden", user_id="u", ranking=ranking)
    assert err.value.field == field


def test_a_ranking_built_directly_is_checked_alike() -> None:
    with pytest.raises(ValidationError) as err:
        Ranking(smoothing_prev=2)
    assert err.value.field == "ranking.smoothing_prev"
    assert Ranking(expansion=3.0).expansion == 3 and Ranking(vector_weight=1).vector_weight == 1.0


@pytest.mark.parametrize(
    "p_ranking",
    [
        '{"bogus": 1}',
        '{"fusion": "max"}',
        '{"vector_weight": 2}',
        '{"expansion": 1.5}',
        "[1]",
        '{"rrf_k": "60"}',
        '{"speaker_weight": 1.5}',
    ],
)
def test_plain_sql_refuses_a_bad_ranking(store, p_ranking) -> None:  # noqa: ANN001
    _fill(store)
    with pytest.raises(sqlalchemy.exc.DBAPIError) as err, store.engine.begin() as conn:
        conn.execute(
            text("SELECT * FROM cortex.search_notes('u', NULL, 'garden', 5, p_ranking => CAST(:r AS jsonb))"),
            {"r": p_ranking},
        )
    assert err.value.orig.sqlstate == "22023"
    assert "p_ranking" in str(err.value.orig)


def test_the_defaults_spelled_out_rank_as_no_ranking(store) -> None:  # noqa: ANN001
    _fill(store)
    explicit = {
        "fusion": "score", "vector_weight": 0.5, "context_weight": 0.5, "length_prior": 24,
        "smoothing_prev": 0.3, "smoothing_next": 0.3, "expansion": 5, "rrf_k": 60,
    }  # fmt: skip
    assert Ranking.parse(explicit) == Ranking()
    a = store.search("garden beans", user_id="u", limit=8, touch=False)
    with store.engine.begin() as conn:  # plain SQL with the same constants given
        vec = str(store.embedder.embed(["garden beans"])[0])
        rows = conn.execute(
            text(
                "SELECT id::text, score FROM cortex.search_notes('u', CAST(:v AS vector), 'garden beans', 8, "
                "p_ranking => CAST(:r AS jsonb))"
            ),
            {"v": vec, "r": Ranking().to_json()},
        ).all()
    assert [(str(r.id), pytest.approx(r.score)) for r in a] == [(i, s) for i, s in rows]


def test_vector_weight_one_ranks_by_the_semantic_score_alone(store) -> None:  # noqa: ANN001
    _fill(store)
    got = store.search(
        "garden beans", user_id="u", limit=8, touch=False,
        ranking={"vector_weight": 1, "smoothing_prev": 0, "smoothing_next": 0, "expansion": 0},
    )  # fmt: skip
    assert len(got) == 8
    assert [r.semantic_score for r in got] == sorted((r.semantic_score for r in got), reverse=True)


def test_vector_weight_zero_ranks_by_bm25_alone(store) -> None:  # noqa: ANN001
    _fill(store)
    got = store.search(
        "garden beans", user_id="u", limit=8, touch=False,
        ranking={"vector_weight": 0, "smoothing_prev": 0, "smoothing_next": 0, "expansion": 0},
    )  # fmt: skip
    matched = [r for r in got if r.text_score > 0]
    assert len(matched) >= 4
    assert got[: len(matched)] == matched  # every note matching a term before any that does not
    assert [r.text_score for r in matched] == sorted((r.text_score for r in matched), reverse=True)


def _plain_sql(store, query_vector: str | None, query_text: str | None, ranking: dict) -> list:  # noqa: ANN001
    with store.engine.begin() as conn:
        return conn.execute(
            text(
                "SELECT id::text, score, text_score, semantic_score FROM cortex.search_notes('u', "
                "CAST(:v AS vector), :q, 8, p_ranking => CAST(:r AS jsonb))"
            ),
            {"v": query_vector, "q": query_text, "r": json.dumps(ranking)},
        ).all()


def test_a_ranker_weighed_zero_is_not_run(store) -> None:  # noqa: ANN001
    _fill(store)
    vec = str(store.embedder.embed(["garden beans"])[0])
    # vector_weight 1: the search of the text and its embedding is the search of the embedding
    # alone (no full-text candidates, no BM25), though five notes contain a query word
    only_vector = {"vector_weight": 1}
    got = store.search("garden beans", user_id="u", limit=8, touch=False, ranking=only_vector)
    assert len(got) == 8
    assert all(r.text_score == 0 and r.text_rank is None for r in got)
    assert [(str(r.note.id), pytest.approx(r.score)) for r in got] == [
        (i, s) for i, s, _, _ in _plain_sql(store, vec, None, only_vector)
    ]
    # vector_weight 0: the search of the text alone (no HNSW scan): only notes with a query term
    only_text = {"vector_weight": 0}
    got = store.search("garden beans", user_id="u", limit=8, touch=False, ranking=only_text)
    assert 4 <= len(got) < 8 and all(r.text_score > 0 and r.semantic_score is None for r in got)
    assert [(str(r.note.id), pytest.approx(r.score)) for r in got] == [
        (i, s) for i, s, _, _ in _plain_sql(store, None, "garden beans", only_text)
    ]
    # ... unless the text has no full-text term: then the embedding counts alone, as before
    got = store.search("and the of it", user_id="u", limit=8, touch=False, ranking=only_text)
    assert len(got) == 8 and all(r.semantic_score is not None for r in got)


def test_a_single_signal_counts_alone_whatever_its_weight(store) -> None:  # noqa: ANN001
    _fill(store)
    # a text-only search (plain SQL: no query vector) with vector_weight 1 still ranks by BM25
    with store.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT content, text_score FROM cortex.search_notes('u', NULL, 'tyres', 3, "
                "p_ranking => '{\"vector_weight\": 1}')"
            )
        ).all()
    assert rows[0].content == "the car needs new tyres before winter" and rows[0].text_score > 0


def test_rrf_orders_by_the_reciprocal_ranks(store) -> None:  # noqa: ANN001
    _fill(store)
    k = 10
    got = store.search(
        "garden beans winter", user_id="u", limit=8, touch=False,
        ranking={"fusion": "rrf", "rrf_k": k, "smoothing_prev": 0, "smoothing_next": 0, "expansion": 0},
    )  # fmt: skip
    assert len(got) == 8

    def rrf(r) -> float:  # noqa: ANN001
        return 1 / (k + r.vector_rank) + (1 / (k + r.text_rank) if r.text_rank else 0)

    fused = [rrf(r) for r in got]
    assert fused == sorted(fused, reverse=True)
    assert fused[0] > fused[-1]


@pytest.mark.parametrize(("context_weight", "d0"), [(0.0, 24.0), (0.8, 8.0), (0.5, 0.0)])
def test_the_semantic_score_follows_context_weight_and_length_prior(store, context_weight, d0) -> None:  # noqa: ANN001
    a, b = store.add_many(
        [{"content": "garden tools"}, {"content": "we keep the spade and rake in the shed"}],
        user_id="u",
        session_id="s",
        to_stm=False,
    )  # b has a context embedding (a then b); a, the session's first note, has none
    query = "where are the garden tools"
    q = store.embedder.embed([query])[0]
    got = {
        str(r.note.id): r
        for r in store.search(
            query, user_id="u", limit=5, touch=False,
            ranking={"context_weight": context_weight, "length_prior": d0},
        )
    }  # fmt: skip
    with store.engine.connect() as conn:
        cos = {
            (nid, kind): c
            for nid, kind, c in conn.execute(
                text(
                    "SELECT note_id::text, kind, 1 - (embedding <=> CAST(:q AS vector)) FROM cortex.embeddings "
                    "WHERE user_id = 'u'"
                ),
                {"q": str(q)},
            ).all()
        }

    def prior(lexemes: int) -> float:
        return 1.0 if d0 == 0 else min(1.0, math.sqrt(lexemes / d0))

    # a: "garden tools" = 2 lexemes, its own cosine stands in for the missing context
    expected_a = (1 - context_weight) * prior(2) * cos[(a, "text")] + context_weight * cos[(a, "text")]
    # b: "keep spade rake shed" = 4 lexemes (the rest are stop words)
    expected_b = (1 - context_weight) * prior(4) * cos[(b, "text")] + context_weight * cos[(b, "context")]
    assert got[a].semantic_score == pytest.approx(expected_a, rel=1e-5)
    assert got[b].semantic_score == pytest.approx(expected_b, rel=1e-5)


def test_smoothing_prev_lifts_the_reply_after_the_best_match_and_not_the_turn_before(store) -> None:  # noqa: ANN001
    # a session of three turns; the query matches the middle one; the reply after it inherits
    # smoothing_prev of its relevance, the turn before it smoothing_next
    ids = store.add_many(
        [
            {"content": "hello there how are you"},
            {"content": "what is your favourite basketball player"},
            {"content": "oh that is easy for me"},
        ],
        user_id="u",
        session_id="chat",
        to_stm=False,
    )
    store.add_many(
        [{"content": f"filler note number {i} about cooking"} for i in range(6)],
        user_id="u",
        session_id="other",
    )
    base = {"context_weight": 0, "expansion": 5}

    def relevance(prev: float, nxt: float) -> dict[str, float]:
        got = store.search(
            "favourite basketball player", user_id="u", limit=9, touch=False,
            ranking={**base, "smoothing_prev": prev, "smoothing_next": nxt},
        )  # fmt: skip
        return {str(r.note.id): r.relevance_score for r in got}

    plain = relevance(0, 0)
    reply_first = relevance(0.9, 0)
    assert reply_first[ids[2]] > plain[ids[2]]  # the reply is lifted by the question before it
    assert reply_first[ids[0]] == pytest.approx(plain[ids[0]] / 1.9, rel=1e-6)  # not lifted: scaled
    earlier_first = relevance(0, 0.9)
    assert earlier_first[ids[0]] > plain[ids[0]] / 1.9


def test_the_answer_to_a_matching_question_inherits_its_relevance(store) -> None:  # noqa: ANN001
    # the answer shares no word with the query; the question before it matches it best
    ids = store.add_many(
        [
            {"content": "Maria: How often do you all work out together?"},
            {"content": "John: Three times a week, it keeps us on track."},
            {"content": "Maria: That is great to hear."},
        ],
        user_id="u",
        session_id="chat",
        to_stm=False,
    )
    store.add_many(
        [{"content": f"John: we work out at the gym, note {i}, with weights and bikes"} for i in range(4)]
        + [{"content": f"filler note number {i} about cooking"} for i in range(6)],
        user_id="u",
        session_id="other",
        to_stm=False,
    )
    query = "How often does John work out with his family?"

    def ranked(ranking: dict) -> list[str]:
        return [r.id for r in store.search(query, user_id="u", limit=13, touch=False, ranking=ranking)]

    off = ranked({"answer_weight": 0})
    on = ranked({})
    assert on.index(ids[1]) < off.index(ids[1])  # lifted by its question
    assert on.index(ids[1]) == on.index(ids[0]) + 1  # right after it, at 0.9 of its relevance
    got = {r.id: r for r in store.search(query, user_id="u", limit=13, touch=False)}
    assert got[ids[1]].relevance_score >= 0.9 * got[ids[0]].relevance_score - 1e-9
    # a reply to a statement inherits nothing: "That is great to hear." stays where it was
    assert on.index(ids[2]) >= off.index(ids[2]) - 1
    # a question mark that ends no sentence (a URL's) asks nothing
    url = store.add_many(
        [
            {"content": "see https://example.com/log?user=john for how often John works out"},
            {"content": "the boiler needs servicing"},
        ],
        user_id="u",
        session_id="links",
        to_stm=False,
    )
    plain = {
        r.id: r.relevance_score
        for r in store.search(query, user_id="u", limit=20, touch=False, ranking={"answer_weight": 0})
    }
    asked = {r.id: r.relevance_score for r in store.search(query, user_id="u", limit=20, touch=False)}
    assert asked.get(url[1]) == pytest.approx(plain.get(url[1])) if url[1] in plain else url[1] not in asked
    # the answer joins only when it passes the search's conditions
    hidden = store.search(
        query,
        user_id="u",
        limit=13,
        touch=False,
        where_filter={"content": {"$ne": "John: Three times a week, it keeps us on track."}},
    )
    assert ids[1] not in [r.id for r in hidden]


def test_an_answer_kept_in_short_term_memory_alone_is_not_passed_over(store) -> None:  # noqa: ANN001
    # the question's next long-term note is not its answer when the answer sits in STM alone
    q = store.add("Maria: How often do you all work out together?", user_id="u", session_id="chat",
                  time="2024-01-01T10:00:00Z", to_stm=False)  # fmt: skip
    a = store.add("John: Three times a week, it keeps us on track.", user_id="u", session_id="chat",
                  time="2024-01-01T10:00:01Z", to_stm=True, to_ltm=False)  # fmt: skip
    c = store.add("Maria: nice weather on the lake today.", user_id="u", session_id="chat",
                  time="2024-01-01T10:00:02Z", to_stm=False)  # fmt: skip
    query = "How often does John work out with his family?"

    def rel(ranking: dict) -> dict[str, float]:
        return {
            r.id: r.relevance_score
            for r in store.search(query, user_id="u", limit=5, touch=False, ranking=ranking)
        }

    off, on = rel({"answer_weight": 0}), rel({})
    assert q in on and a in on
    assert on.get(c) == pytest.approx(off.get(c)) if c in off else c not in on


def test_a_short_term_note_of_the_same_instant_does_not_block_the_answer(store) -> None:  # noqa: ANN001
    # day-granular times: a note kept in STM alone, of the same day as the question and its
    # answer, was not made between them (the tiers' insertion orders cannot say it was)
    store.add("Note kept in STM only: the parking lot is full.", user_id="u", session_id="s",
              time="2023-05-07", to_stm=True, to_ltm=False)  # fmt: skip
    q, a, _ = store.add_many(
        [
            {"content": "Caroline: How often do you all work out together?", "time": "2023-05-07"},
            {"content": "Melanie: Three times a week, it keeps us on track.", "time": "2023-05-07"},
            {"content": "Caroline: I painted a sunset by the lake.", "time": "2023-05-08"},
        ],
        user_id="u",
        session_id="s",
        to_stm=False,
    )
    got = {r.id: r for r in store.search("How often do they work out together?", user_id="u",
                                          memory_source="ltm", limit=3, touch=False)}  # fmt: skip
    assert got[a].relevance_score >= 0.9 * got[q].relevance_score - 1e-9


@pytest.mark.parametrize(
    ("ranking", "field"),
    [
        ({"vector_weight": 10**400}, "ranking.vector_weight"),  # too large for a float
        ({"expansion": 10**400}, "ranking.expansion"),
        ({"length_prior": 1e-320}, "ranking.length_prior"),  # d0 under one lexeme
        ({"length_prior": 0.5}, "ranking.length_prior"),
        ({"bogus": 1}, "ranking.bogus"),
        # keys that cannot name a field: under "ranking", named by their JSON form in the reason
        ({"": 1}, "ranking"),
        ({"\ud800": 1}, "ranking"),
        ({"a\nb": 1}, "ranking"),
    ],
)
def test_extreme_numbers_are_refused_by_name(ranking, field) -> None:  # noqa: ANN001
    with pytest.raises(ValidationError) as err:
        Ranking.parse(ranking)
    assert err.value.field == field


def test_numpy_numbers_are_numbers() -> None:
    np = pytest.importorskip("numpy")
    assert Ranking.parse({"expansion": np.int64(3), "vector_weight": np.float64(0.25)}) == Ranking(
        expansion=3, vector_weight=0.25
    )


def test_plain_sql_reads_whole_floats_and_refuses_extremes_as_22023(store) -> None:  # noqa: ANN001
    _fill(store)
    with store.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT id FROM cortex.search_notes('u', NULL, 'garden', 5, p_ranking => '{\"expansion\": 5.0}')"
            )
        ).all()
    assert rows
    for bad in ('{"vector_weight": 1e400}', '{"length_prior": 1e-400}', '{"rrf_k": 1e-400}'):
        with pytest.raises(sqlalchemy.exc.DBAPIError) as err, store.engine.begin() as conn:
            conn.execute(
                text(
                    "SELECT * FROM cortex.search_notes('u', NULL, 'garden', 5, p_ranking => CAST(:r AS jsonb))"
                ),
                {"r": bad},
            )
        assert err.value.orig.sqlstate == "22023", bad


def test_a_huge_limit_in_plain_sql_is_not_an_overflow(store) -> None:  # noqa: ANN001
    _fill(store)
    with store.engine.begin() as conn:
        rows = conn.execute(text("SELECT id FROM cortex.search_notes('u', NULL, 'garden', 2147483647)")).all()
    assert len(rows) >= 3


@pytest.mark.parametrize("fusion", ["score", "rrf"])
def test_a_note_without_an_embedding_is_ranked_by_its_text_not_crashed_on(store, fusion) -> None:  # noqa: ANN001
    store.add("Frank services his car every spring", user_id="frank", session_id="f")
    store.add("Frank plays chess on Sundays", user_id="frank", session_id="f")
    store.add("Frank bakes bread on Saturdays", user_id="frank", session_id="g")
    with store.engine.begin() as conn:  # written from SQL: searchable by full text, not embedded yet
        conn.execute(
            text(
                "INSERT INTO cortex.notes (user_id, session_id, content) "
                "VALUES ('frank', 'sql', 'Written from psql: the boiler service is on Thursday')"
            )
        )
    got = store.search("boiler Thursday", user_id="frank", limit=4, touch=False, ranking={"fusion": fusion})
    [sql_note] = [r for r in got if r.content.startswith("Written from psql")]
    assert sql_note.semantic_score is None and sql_note.text_score > 0 and sql_note.vector_rank is None
    assert len(got) == 4
    assert all(r.score is not None for r in got)
    assert [r.score for r in got] == sorted((r.score for r in got), reverse=True)
