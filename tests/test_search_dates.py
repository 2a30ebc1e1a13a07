"""A query that names its dates ("what did we cook on 9 November, 2022?"): the notes of that
time come first unless much weaker (``Ranking.date_weight``, ``cortex_pg.temporal.query_date_window``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from cortex_pg import AsyncMemoryStore
from cortex_pg.errors import ValidationError
from cortex_pg.store import MemoryStore
from cortex_pg.store.ranking import Ranking
from cortex_pg.temporal import query_date_window


def d(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # a named day, a day either side
        ("What dish did Nate make on 9 November, 2022?", (d(2022, 11, 8), d(2022, 11, 11))),
        ("what happened on 2023-05-04", (d(2023, 5, 3), d(2023, 5, 6))),
        ("What did Joanna bake on December 1,2023?", (d(2023, 11, 30), d(2023, 12, 3))),
        ("the week before August 3, 2023", (d(2023, 8, 2), d(2023, 8, 5))),
        ("notes of 2022-11-09T18:00:00Z", (d(2022, 11, 8), d(2022, 11, 11))),  # a day, its time aside
        ("the 9th of November 2022", (d(2022, 11, 8), d(2022, 11, 11))),
        ("Sept. 9, 2023", (d(2023, 9, 8), d(2023, 9, 11))),
        ("29 February 2024", (d(2024, 2, 28), d(2024, 3, 2))),
        # a named month, a week either side
        ("What cake did she make in May 2022?", (d(2022, 4, 24), d(2022, 6, 8))),
        ("dec. 2023", (d(2023, 11, 24), d(2024, 1, 8))),
        ("MAY 2023", (d(2023, 4, 24), d(2023, 6, 8))),
        ("what about 2023-05?", (d(2023, 4, 24), d(2023, 6, 8))),
        # several: one window spanning them
        ("trips between 1 May 2022 and 3 June 2022", (d(2022, 4, 30), d(2022, 6, 5))),
    ],
)
def test_a_named_day_or_month_is_a_window(query: str, expected: tuple[datetime, datetime]) -> None:
    assert query_date_window(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "What did Nate cook?",  # no date
        "How often did she go to the beach in 2023?",  # a year alone says too little
        "Where was John on August 11?",  # no year: which August depends on when it is asked
        "What did we decide last week?",  # relative
        "What did we decide yesterday?",
        "Which room, 2022 or 2023?",  # numbers, no day or month
        "",
        "31 February 2023",  # no such day (dateparser reads it as the month)
        "on 2023-13-01",  # no such month
        "on 2023-02-30",
        "I may 2023 call",  # "may" is the month only as "May"
        "phone 2023-05-0412",  # digits, not a date
        "We will march 2023 miles",  # "march" the verb: a month only as "March"
        "June 1900 and June 2099",  # dates two centuries apart name no one time
        "ISBN 978-2023-05-04",
    ],
)
def test_no_day_or_month_with_its_year_is_no_window(query: str) -> None:
    assert query_date_window(query) is None


def test_a_long_query_reads_a_bounded_number_of_dates(monkeypatch: pytest.MonkeyPatch) -> None:
    import cortex_pg.temporal as temporal

    calls = []
    real = temporal._named_period
    monkeypatch.setattr(temporal, "_named_period", lambda *a, **k: calls.append(a) or real(*a, **k))
    window = query_date_window(("9 May 2023 " * 910)[:10000])
    assert window == (d(2023, 5, 8), d(2023, 5, 11))
    assert len(calls) == temporal.QUERY_DATE_SPANS


NOTES = [
    # (time, content): the cooking note of 9 November matches the query's words less well than
    # the one of 20 November
    ("2022-11-09T18:00:00Z", "Nate: I made coconut ice cream tonight."),
    ("2022-11-09T18:00:01Z", "Joanna: The screenplay is nearly finished."),
    ("2022-11-20T18:00:00Z", "Nate: I cook and cook, dinner every day, the dish I cook most is pasta."),
    ("2022-12-01T18:00:00Z", "Nate: The tournament moved to next month."),
]
QUERY = "What dish did Nate cook on 9 November, 2022?"


def _fill(store: MemoryStore) -> list[str]:
    return store.add_many(
        [{"content": c, "time": t, "session_id": t[:10]} for t, c in NOTES], user_id="u", to_stm=False
    )


def test_the_named_days_notes_come_first_and_date_weight_zero_turns_it_off(store: MemoryStore) -> None:
    ids = _fill(store)
    off = store.search(QUERY, user_id="u", limit=4, touch=False, ranking={"date_weight": 0})
    assert off[0].id == ids[2]  # the words alone: the note of 20 November
    on = store.search(QUERY, user_id="u", limit=4, touch=False)
    assert on[0].id == ids[0]  # the named day's cooking note
    assert {r.id for r in on} == set(ids)  # the other notes still follow
    scores = [r.score for r in on]
    assert scores == sorted(scores, reverse=True)
    w = Ranking().date_weight
    for r in on:  # the named day's notes score at least w, the others at most 1 - w
        assert r.score >= w if r.id in ids[:2] else r.score <= 1 - w + 1e-9
    # the weight is a share: the named day's best note leads (its score in its own search is 1);
    # its weak one (the screenplay) stays behind the better match from another day at 0.3, and
    # passes it at 0.6
    assert [r.id for r in on[:2]] == [ids[0], ids[2]]
    high = store.search(QUERY, user_id="u", limit=4, touch=False, ranking={"date_weight": 0.6})
    assert [r.id for r in high[:2]] == [ids[0], ids[1]]


def test_the_callers_window_bounds_the_named_one(store: MemoryStore) -> None:
    ids = _fill(store)
    # a window that leaves the named day out: one search, as without the date's weight
    args = {"user_id": "u", "limit": 4, "touch": False, "date_from": "2022-11-15T00:00:00Z"}
    assert [r.id for r in store.search(QUERY, **args)] == [
        r.id for r in store.search(QUERY, **args, ranking={"date_weight": 0})
    ]
    assert ids[0] not in [r.id for r in store.search(QUERY, **args)]
    # a window that holds it: the named day first, nothing outside the caller's window
    args["date_from"], args["date_to"] = "2022-11-01T00:00:00Z", "2022-11-30T00:00:00Z"
    found = store.search(QUERY, **args)
    assert found[0].id in (ids[0], ids[1]) and ids[3] not in [r.id for r in found]


def test_a_dated_search_touches_what_it_returns_and_only_that(store: MemoryStore) -> None:
    ids = _fill(store)
    found = store.search(QUERY, user_id="u", limit=2)
    with store.engine.connect() as conn:
        counts = dict(
            conn.execute(text("SELECT id::text, access_count FROM cortex.notes WHERE user_id = 'u'")).all()
        )
    assert {i for i in ids if counts[i] > 0} == {r.id for r in found}


def test_plain_sql_says_date_weight_is_the_librarys(store: MemoryStore) -> None:
    import sqlalchemy.exc

    with store.engine.connect() as conn, pytest.raises(sqlalchemy.exc.DBAPIError) as err:
        conn.execute(
            text(
                "SELECT * FROM cortex.search_notes('u', NULL, 'cook', p_ranking => '{\"date_weight\": 0.3}')"
            )
        ).all()
    assert "applied by the library" in str(err.value) and err.value.orig.sqlstate == "22023"


def test_a_bad_date_weight_is_refused_by_name(store: MemoryStore) -> None:
    for bad in (1.5, -0.1, "0.3", True):
        with pytest.raises(ValidationError) as err:
            store.search(QUERY, user_id="u", ranking={"date_weight": bad})
        assert err.value.field == "ranking.date_weight"


def test_the_async_store_ranks_dates_alike(db_url: str) -> None:
    async def main() -> list[str]:
        async with await AsyncMemoryStore.open(db_url, embedder="hashing", auto_migrate=False) as store:
            found = await store.search(QUERY, user_id="u", limit=4, touch=False)
            return [r.id for r in found]

    with MemoryStore.open(db_url, embedder="hashing", auto_migrate=False) as sync:
        ids = _fill(sync)
        expected = [r.id for r in sync.search(QUERY, user_id="u", limit=4, touch=False)]
    assert asyncio.run(main()) == expected and expected[0] in (ids[0], ids[1])


def test_calute_long_term_memory_weighs_the_named_day_alike(store: MemoryStore) -> None:
    from cortex_pg.compat.calute import LongTermMemory

    ltm = LongTermMemory(store=store, user_id="u", session_id="s")
    for t, c in NOTES:
        ltm.save(c, time=t)
    found = ltm.search(QUERY, limit=4)
    assert found[0].content == NOTES[0][1]  # the named day's cooking note
    undated = ltm.search("What dish did Nate cook?", limit=4)
    assert undated[0].content == NOTES[2][1]  # without the date: the better match of 20 November
