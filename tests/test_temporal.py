"""Pure date handling: instants, date_range windows, temporal keywords (no database)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from cortex_pg import ValidationError
from cortex_pg.temporal import auto_temporal_weight, has_temporal_keyword, parse_date_range, parse_instant

NOW = datetime(2024, 3, 20, 15, 30, tzinfo=UTC)
TODAY = datetime(2024, 3, 20, tzinfo=UTC)


def d(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("today", (TODAY, TODAY + timedelta(days=1))),
        ("yesterday", (TODAY - timedelta(days=1), TODAY)),
        # rolling windows up to and including now (the end is exclusive, hence now + 1 microsecond)
        ("last week", (NOW - timedelta(days=7), NOW + timedelta(microseconds=1))),
        ("past week", (NOW - timedelta(days=7), NOW + timedelta(microseconds=1))),
        ("last month", (NOW - timedelta(days=30), NOW + timedelta(microseconds=1))),
        ("last year", (NOW - timedelta(days=365), NOW + timedelta(microseconds=1))),
        ("2024-01", (d(2024, 1, 1), d(2024, 2, 1))),
        ("2023-12", (d(2023, 12, 1), d(2024, 1, 1))),
        ("2023", (d(2023, 1, 1), d(2024, 1, 1))),
        ("2024-01-15T10:00:00Z", (d(2024, 1, 15), d(2024, 1, 16))),
        ("2024-01-15T23:30:00-05:00", (d(2024, 1, 16), d(2024, 1, 17))),
        ({"start": "2024-01-01", "end": "2024-01-31"}, (d(2024, 1, 1), d(2024, 2, 1))),
        ({"start": "2024-01-01T06:00:00Z"}, (d(2024, 1, 1, 6), d(9999, 12, 30))),
        ("2024-01-01/2024-01-10", (d(2024, 1, 1), d(2024, 1, 11))),
        ("3 days ago", (NOW - timedelta(days=3), NOW)),
        ("since March 2024", (d(2024, 3, 1), NOW)),
        ("this year", (d(2024, 1, 1), TODAY + timedelta(days=1))),
        ("tomorrow", (TODAY + timedelta(days=1), TODAY + timedelta(days=2))),
        ("in 3 days", (TODAY + timedelta(days=3), TODAY + timedelta(days=4))),
        ("2024-W05", (d(2024, 1, 29), d(2024, 2, 5))),
        # a day, month or year named in words is that period (it ran until now)
        ("March 2024", (d(2024, 3, 1), d(2024, 4, 1))),
        ("December 2023", (d(2023, 12, 1), d(2024, 1, 1))),
        ("5 March 2024", (d(2024, 3, 5), d(2024, 3, 6))),
        ("May 8, 2023 14:00", (d(2023, 5, 8), d(2023, 5, 9))),
        ("8 May 2031", (d(2031, 5, 8), d(2031, 5, 9))),
        ("march", (d(2024, 3, 1), NOW)),  # no year: this year's, from then until now
        ("last monday", (d(2024, 3, 18), NOW)),
        # since / from / after a date: until now; before / until a date: from the beginning
        ("from March 2023", (d(2023, 3, 1), NOW)),
        ("after March 2023", (d(2023, 4, 1), NOW)),
        ("after 5 March 2023", (d(2023, 3, 6), NOW)),
        ("starting 2023-03-01", (d(2023, 3, 1), NOW)),
        ("before March 2023", (d(1, 1, 2), d(2023, 3, 1))),
        ("until March 2023", (d(1, 1, 2), d(2023, 4, 1))),
        # a span back from now keeps the day and month (it started on the 1st, or on 1 January)
        ("2 months ago", (d(2024, 1, 20, 15, 30), NOW)),
        ("a year ago", (d(2023, 3, 20, 15, 30), NOW)),
        # a calendar day stays a day after a preposition; a time of day is an instant
        ("since yesterday", (TODAY - timedelta(days=1), NOW)),
        ("before yesterday", (d(1, 1, 2), TODAY - timedelta(days=1))),
        ("until yesterday", (d(1, 1, 2), TODAY)),
        ("after 5 March 2023 14:00", (d(2023, 3, 5, 14), NOW)),
        ("after 2023-03-05T14:00:00Z", (d(2023, 3, 5, 14), NOW)),
        ("before 5 March 2023 14:00", (d(1, 1, 2), d(2023, 3, 5, 14))),
        # year-first slashed dates are ISO dates
        ("2023/03/05", (d(2023, 3, 5), d(2023, 3, 6))),
        ("since 2023/03/05", (d(2023, 3, 5), NOW)),
    ],
)
def test_date_ranges(value, expected):
    start, end = parse_date_range(value, now=NOW)
    if expected[0] is not None:
        assert start == expected[0]
    else:
        assert start.year == 2024 and start.month == 3 and start < end
    assert end == expected[1]


@pytest.mark.parametrize(
    "value",
    [
        "the other day, maybe",
        "3/5/2024",  # 3 May or 5 March: refused with the ISO form to write (it read as an interval)
        "",
        "2024-13",
        {"from": "2024"},
        42,
        {"start": "2024-02-01", "end": "2024-01-01"},
    ],
)
def test_bad_date_ranges_raise(value):
    with pytest.raises(ValidationError) as err:
        parse_date_range(value, now=NOW)
    assert err.value.field.startswith("date_range")


@pytest.mark.parametrize(
    ("query", "temporal"),
    [
        ("what did I last talk about with John?", True),
        ("recent discussions about the project", True),
        ("latest updates on the budget", True),
        ("what happened this week", True),
        ("two days ago we met", True),
        ("a blast from the pastry shop", False),
        ("lasting impressions", False),
        ("programming preferences", False),
    ],
)
def test_temporal_keywords_are_whole_words(query, temporal):
    assert has_temporal_keyword(query) is temporal
    assert auto_temporal_weight(query) == (0.7 if temporal else 0.0)


def test_date_range_turns_on_temporal_weight():
    assert auto_temporal_weight("planning", "2024-01") == 0.7


def test_instants():
    assert parse_instant("2024-01-01T00:00:00Z") == d(2024, 1, 1)
    assert parse_instant("2024-01-01") == d(2024, 1, 1)
    assert parse_instant(datetime(2024, 1, 1, 2)) == d(2024, 1, 1, 2)
    with pytest.raises(ValidationError):
        parse_instant("01/02/2024 maybe")
    # a date is its midnight UTC, as the same date written as a string
    assert parse_instant(date(2024, 1, 1)) == parse_instant("2024-01-01") == d(2024, 1, 1)
    # in a date_range window too, where a date end takes its whole day, as the string does
    window = {"start": date(2024, 1, 1), "end": date(2024, 1, 31)}
    assert parse_date_range(window, now=NOW) == parse_date_range(
        {"start": "2024-01-01", "end": "2024-01-31"}, now=NOW
    )
    assert parse_date_range(window, now=NOW) == (d(2024, 1, 1), d(2024, 2, 1))


@pytest.mark.parametrize("value", [{}, {"start": None}, {"start": "", "end": ""}, "/", " / "])
def test_a_date_range_that_sets_no_bound_is_an_error(value):
    """An empty window object is not silently "no window" (the whole calendar)."""
    with pytest.raises(ValidationError) as err:
        parse_date_range(value, now=NOW)
    assert err.value.field == "date_range" and "neither start nor end" in err.value.reason
    assert parse_date_range({"start": "2024"}, now=NOW)[0] == d(2024, 1, 1)  # one bound is enough


def test_a_blank_date_range_names_the_reason():
    with pytest.raises(ValidationError) as err:
        parse_date_range("   ", now=NOW)
    assert err.value.field == "date_range" and "blank" in err.value.reason


@pytest.mark.parametrize(
    ("value", "now"),
    [
        ("9999-12-31", None),
        ({"start": "2024-01-01", "end": "9999-12-31"}, None),
        ("2024-01-01/9999-12-31", None),
        ("9999-W52", None),
        ("today", "9999-12-31T12:00:00Z"),
        ("tomorrow", "9999-12-30T12:00:00Z"),
        ("yesterday", "0001-01-01T12:00:00Z"),
        ("last week", "0001-01-03T00:00:00Z"),
    ],
)
def test_a_window_past_the_calendar_is_a_validation_error(value, now):
    with pytest.raises(ValidationError) as err:
        parse_date_range(value, now=now)
    assert err.value.field == "date_range" and "years 1 to 9999" in err.value.reason


@pytest.mark.parametrize(
    "value", ["3/5/2024", "after 3/5/2024", "from 3/5/2024", "since 3/5/2024", "before 3/5/24"]
)
def test_a_slashed_date_says_how_to_write_it(value):
    """3/5/2024 is 3 May or 5 March: the error says to write YYYY-MM-DD wherever it stands (it
    was read as an interval split at its slash, or month first)."""
    with pytest.raises(ValidationError) as err:
        parse_date_range(value, now=NOW)
    assert "YYYY-MM-DD" in err.value.reason
