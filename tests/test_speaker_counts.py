"""The tenant's speakers (``cortex.speaker_counts``, kept by triggers on ``cortex.notes``) and
search_notes v14: the words of a speaker the query names leave its full-text terms."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import text

from cortex_pg.store import MemoryStore

# the counts as the triggers should have them, recomputed from the notes
FROM_SCRATCH = """
SELECT n.user_id, cortex.speaker_words(n.metadata) AS words, count(*)::int AS note_count
FROM cortex.notes n
WHERE n.merged_into IS NULL AND cortex.speaker_words(n.metadata) IS NOT NULL
GROUP BY 1, 2 ORDER BY 1, 2
"""
KEPT = "SELECT user_id, words, note_count FROM cortex.speaker_counts ORDER BY 1, 2"


def kept(store: MemoryStore) -> list[tuple[str, str, int]]:
    with store.engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(text(KEPT))]
        expected = [tuple(r) for r in conn.execute(text(FROM_SCRATCH))]
    assert rows == expected
    return rows


def test_speaker_words_read_a_speaker_as_the_search_does(store) -> None:  # noqa: ANN001
    cases = {
        '{"speaker": "Mary-Ann  O\'Neil"}': "mary ann o neil",
        '{"speaker": "  Caroline "}': "caroline",
        '{"speaker": "?!"}': None,  # no letter or digit
        '{"speaker": 7}': None,  # not a string
        '{"speaker": ["Ann"]}': None,
        '{"other": "Ann"}': None,
        '{"speaker": "' + "a" * 201 + '"}': None,  # over 200 characters
        '{"speaker": "' + "a" * 200 + '"}': "a" * 200,
    }
    with store.engine.connect() as conn:
        for metadata, words in cases.items():
            got = conn.execute(
                text("SELECT cortex.speaker_words(CAST(:m AS jsonb))"), {"m": metadata}
            ).scalar()
            assert got == words, metadata


def test_counts_stay_exact_through_every_kind_of_write(store) -> None:  # noqa: ANN001
    ids = store.add_many(
        [
            {"content": f"turn {i}", "metadata": {"speaker": "Caroline" if i % 2 else "Melanie"}}
            for i in range(6)
        ]
        + [{"content": "no speaker"}, {"content": "odd speaker", "metadata": {"speaker": 3}}],
        user_id="a",
        to_stm=False,
    )
    store.add_many(
        [{"content": "bob's turn", "metadata": {"speaker": "Caroline"}}], user_id="b", to_stm=False
    )
    assert kept(store) == [("a", "caroline", 3), ("a", "melanie", 3), ("b", "caroline", 1)]
    store.update(ids[0], user_id="a", metadata={"speaker": "Mel"})  # Melanie's turn becomes Mel's
    store.update(ids[1], user_id="a", metadata={"speaker": None})  # a key set to None is deleted
    store.update(ids[2], user_id="a", content="turn two, reworded")  # the speaker stays
    assert kept(store) == [("a", "caroline", 2), ("a", "mel", 1), ("a", "melanie", 2), ("b", "caroline", 1)]
    store.delete(ids[3], user_id="a")
    with store.engine.begin() as conn:  # a merge takes the source out; an unmerge brings it back
        conn.execute(
            text(
                "UPDATE cortex.notes SET merged_into = CAST(:t AS uuid) WHERE user_id = 'a' AND id = CAST(:s AS uuid)"
            ),
            {"t": ids[5], "s": ids[4]},
        )
    assert kept(store) == [("a", "caroline", 1), ("a", "mel", 1), ("a", "melanie", 1), ("b", "caroline", 1)]
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cortex.notes SET merged_into = NULL WHERE user_id = 'a' AND id = CAST(:s AS uuid)"),
                     {"s": ids[4]})  # fmt: skip
        # plain SQL writes go through the same triggers
        conn.execute(
            text(
                """INSERT INTO cortex.notes (user_id, content, metadata) VALUES ('c', 'plain', '{"speaker": "Zoe"}')"""
            )
        )
    assert kept(store) == [
        ("a", "caroline", 1), ("a", "mel", 1), ("a", "melanie", 2), ("b", "caroline", 1), ("c", "zoe", 1),
    ]  # fmt: skip
    assert store.delete_where(user_id="a") > 0
    assert [r[:2] for r in kept(store)] == [("b", "caroline"), ("c", "zoe")]
    with store.engine.begin() as conn:
        conn.execute(text("TRUNCATE cortex.notes CASCADE"))
    assert kept(store) == []


def test_a_killed_writer_leaves_the_counts_exact(store, db_url) -> None:  # noqa: ANN001
    store.add("kept turn", user_id="a", metadata={"speaker": "Caroline"})
    url = db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as writer, psycopg.connect(url, autocommit=True) as killer:
        writer.execute(
            """INSERT INTO cortex.notes (user_id, content, metadata) VALUES ('a', 'half', '{"speaker": "Jon"}')"""
        )
        killer.execute("SELECT pg_terminate_backend(%s)", (writer.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            writer.execute("SELECT 1")
    assert kept(store) == [("a", "caroline", 1)]


def test_two_updates_that_swap_two_speakers_do_not_deadlock(store, db_url) -> None:  # noqa: ANN001
    # each update's old speaker leaves and new one comes in one statement, rows in order
    ids = store.add_many(
        [
            {"content": "one", "metadata": {"speaker": "Aa"}},
            {"content": "two", "metadata": {"speaker": "Bb"}},
        ],
        user_id="a",
        to_stm=False,
    )
    url = db_url.replace("postgresql+psycopg://", "postgresql://")
    errors: list[Exception] = []

    def swap(note: str, first: str, second: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            for k in range(300):
                try:
                    conn.execute(
                        "UPDATE cortex.notes SET metadata = jsonb_build_object('speaker', %s::text) "
                        "WHERE user_id = 'a' AND id = %s",
                        (second if k % 2 == 0 else first, note),
                    )
                except psycopg.Error as exc:
                    errors.append(exc)

    threads = [threading.Thread(target=swap, args=(ids[0], "Aa", "Bb")),
               threading.Thread(target=swap, args=(ids[1], "Bb", "Aa"))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert kept(store) == [("a", "aa", 1), ("a", "bb", 1)]


def _turns(store: MemoryStore, user: str = "u") -> dict[str, str]:
    """A conversation whose turns begin with their speaker's name, as the conversation ingest
    writes them; Caroline's turn says Melanie's name three times and nothing of pottery."""
    ids = store.add_many(
        [
            {
                "content": "Melanie: I signed up for a pottery class yesterday.",
                "metadata": {"speaker": "Melanie"},
            },
            {
                "content": "Caroline: Melanie, Melanie, you are the best, Melanie!",
                "metadata": {"speaker": "Caroline"},
            },
            {"content": "Melanie: The kids loved the beach.", "metadata": {"speaker": "Melanie"}},
            {"content": "Caroline: I went to a support group.", "metadata": {"speaker": "Caroline"}},
        ],
        user_id=user,
        session_id="s1",
        to_stm=False,
    )
    return dict(zip(("pottery", "praise", "beach", "group"), ids, strict=True))


def _text_scores(store: MemoryStore, query: str, user: str = "u", **kw) -> dict[str, float]:  # noqa: ANN003
    return {r.id: r.text_score for r in store.search(query, user_id=user, limit=10, touch=False, **kw)}


def test_a_named_speakers_words_leave_the_full_text_terms(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    query = "What did Melanie say about pottery?"
    on = _text_scores(store, query)
    assert on[ids["pottery"]] > 0
    # "melani" is not a term: the turns that only say the name score nothing by their words
    assert all(on.get(ids[k], 0) == 0 for k in ("praise", "beach", "group"))
    # speaker_weight 0 turns the speaker rule off, this part of it too: the name is a term again
    off = _text_scores(store, query, ranking={"speaker_weight": 0})
    assert off[ids["praise"]] > 0 and off[ids["beach"]] > 0


def test_a_query_that_is_only_a_name_keeps_it(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    scores = _text_scores(store, "Melanie?")
    assert scores[ids["praise"]] > 0 and scores[ids["pottery"]] > 0
    # (one lexeme left: nothing to remove, the term stays)
    scores = _text_scores(store, "Melanie and Caroline")
    assert scores[ids["praise"]] > 0


def test_only_the_tenants_own_speakers_count(store) -> None:  # noqa: ANN001
    _turns(store, user="other")  # Melanie speaks in another tenant only
    ids = store.add_many(
        [{"content": "Melanie sent me her pottery photos."}, {"content": "Melanie called twice."}],
        user_id="u",
        to_stm=False,
    )
    scores = _text_scores(store, "What did Melanie say about pottery?")
    assert scores[ids[1]] > 0  # "melani" is still a term here
    # once Melanie speaks in this tenant, her name is her speaker's, and leaves the terms
    store.add("Melanie: hello", user_id="u", metadata={"speaker": "Melanie"}, to_stm=False)
    scores = _text_scores(store, "What did Melanie say about pottery?")
    assert scores.get(ids[1], 0) == 0 and scores[ids[0]] > 0


def test_a_speaker_whose_notes_are_gone_no_longer_counts(store) -> None:  # noqa: ANN001
    ids = _turns(store)
    for key in ("pottery", "beach"):
        store.delete(ids[key], user_id="u")
    scores = _text_scores(store, "Did Caroline mention Melanie?")
    assert scores[ids["praise"]] > 0  # "melani" is a term again ("carolin" is not)


def test_a_hyphenated_speakers_whole_name_leaves_the_terms_too(store) -> None:  # noqa: ANN001
    ids = store.add_many(
        [
            {"content": "Mary-Ann: I love pottery", "metadata": {"speaker": "Mary-Ann"}},
            {"content": "Mary-Ann: the weather is nice", "metadata": {"speaker": "Mary-Ann"}},
            {"content": "Tom: pottery is dull", "metadata": {"speaker": "Tom"}},
        ],
        user_id="u",
        to_stm=False,
    )
    # the parser reads "Mary-Ann" as "mary-ann", "mari" and "ann": none of them is a term, so
    # the hyphen changes nothing
    hyphen, space = (
        _text_scores(store, f"What did {name} say about pottery", ranking={"vector_weight": 0})
        for name in ("Mary-Ann", "Mary Ann")
    )
    assert hyphen.get(ids[1], 0) == 0 and space.get(ids[1], 0) == 0
    assert hyphen[ids[0]] > 0 and hyphen == pytest.approx(space)
