"""Time handling: instants from callers, and natural-language dates for the CLI.

All instants are timezone-aware UTC. A naive ``datetime`` or a naive ISO 8601 string is taken
to be UTC (documented behaviour, not a guess from the local clock).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from cortex_pg.errors import ValidationError


def parse_instant(value: datetime | date | str | None, field: str = "time") -> datetime | None:
    """An aware UTC datetime from a datetime, a date or an RFC 3339 / ISO 8601 string.

    Args:
        value: ``datetime`` (naive = UTC), ``date`` (its midnight UTC, as the string
            ``"2024-03-01"``), ISO 8601 text such as ``"2024-03-01T10:00:00Z"``,
            ``"2024-03-01 10:00+02:00"`` or ``"2024-03-01"`` (midnight UTC), or None.
        field: name used in the error.

    Returns:
        The instant in UTC, or None when ``value`` is None.

    Raises:
        ValidationError: the text does not parse, or the type is wrong.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValidationError(field, "empty time string")
        try:
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise ValidationError(
                field, f"{value!r} is not an RFC 3339 / ISO 8601 time (e.g. 2024-03-01T10:00:00Z)"
            ) from None
    else:
        raise ValidationError(field, f"expected a datetime or ISO 8601 string, got {type(value).__name__}")
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise ValidationError(
            field, f"{value!r} is out of the supported range (years 1..9999 in UTC)"
        ) from None


def parse_natural(value: str, field: str, *, now: datetime | None = None) -> datetime:
    """An instant from ISO 8601 or a natural phrase ("3 days ago", "last monday", "8 May 2023").

    Relative phrases resolve against ``now`` (default: the current time). Uses dateparser.

    Raises:
        ValidationError: nothing could be parsed, or a slashed date whose day and month order
            is ambiguous ("3/5/2024"; "2024/03/05" is read as ISO).
    """
    try:
        parsed = parse_instant(value, field)
    except ValidationError:
        parsed = None
    if parsed is not None:
        return parsed
    value = _iso_slashed(value, field)  # (dateparser reads 3/5/2024 month first, silently)
    import dateparser

    base = (now or datetime.now(UTC)).astimezone(UTC)
    # a date without its day or month ("March 2024", "march") starts on the first; a span back
    # from now ("2 months ago", "a year ago") keeps today's day and month (with "first" it
    # started on the 1st of the month, or on 1 January)
    prefer = "current" if re.search(r"\bago\b", value, re.IGNORECASE) else "first"
    try:
        dt = dateparser.parse(
            value,
            settings={
                "RELATIVE_BASE": base.replace(tzinfo=None),
                "TIMEZONE": "UTC",
                "TO_TIMEZONE": "UTC",
                "RETURN_AS_TIMEZONE_AWARE": True,
                "PREFER_DAY_OF_MONTH": prefer,
                "PREFER_MONTH_OF_YEAR": prefer,
            },
        )
    except (ValueError, OverflowError):
        dt = None
    if dt is None:
        raise ValidationError(field, f"cannot understand the date {value!r}")
    return dt.astimezone(UTC)


# ---------------------------------------------------------------------- temporal queries
TEMPORAL_KEYWORDS = (
    "last",
    "recent",
    "recently",
    "latest",
    "yesterday",
    "today",
    "this week",
    "this month",
    "past",
    "ago",
)
AUTO_TEMPORAL_WEIGHT = 0.7
_TEMPORAL_RE = re.compile(
    r"\b(" + "|".join(re.escape(k).replace(r"\ ", r"\s+") for k in TEMPORAL_KEYWORDS) + r")\b", re.IGNORECASE
)


def has_temporal_keyword(query: str) -> bool:
    """True when ``query`` contains a temporal keyword as a whole word or phrase.

    Keywords: last, recent(ly), latest, yesterday, today, this week, this month, past, ago
    (the Prem Cortex list, plus "this month" and "recently"). "blast" or "pastry" do not count.
    """
    return bool(_TEMPORAL_RE.search(query or ""))


def without_temporal_keywords(query: str) -> str:
    """``query`` with its temporal keywords removed (they ask for recency, not for matching
    words: the full-text ranker should not look for "yesterday" in the notes). Returns the
    query unchanged when nothing else would be left."""
    stripped = " ".join(_TEMPORAL_RE.sub(" ", query or "").split())
    return stripped if stripped else query


def auto_temporal_weight(query: str, date_range: object = None) -> float:
    """0.7 when the query has a temporal keyword or a date_range is given, else 0.0 (Prem Cortex rule)."""
    return AUTO_TEMPORAL_WEIGHT if (date_range or has_temporal_keyword(query)) else 0.0


ROLLING_WINDOWS = {
    "last week": timedelta(days=7),
    "past week": timedelta(days=7),
    "last month": timedelta(days=30),
    "past month": timedelta(days=30),
    "last year": timedelta(days=365),
    "past year": timedelta(days=365),
}


#: widening of a query's named day (time zones: a user's day is not the UTC day) and of a named
#: month (what was said in its first week after it ended, or planned in the week before it)
QUERY_DATE_MARGINS = {"day": timedelta(days=1), "month": timedelta(days=7)}
# a year of four digits: a query without one names no day or month (and is not read further)
_YEAR_RE = re.compile(r"(?<!\d)(1[89]\d\d|2\d\d\d)(?!\d)")
# month names and their abbreviations in any case, but those that are also words ("may",
# "march", "june", "august") only with a capital first letter
_MONTH = (
    r"(?:(?:(?i:jan(?:uary)?|feb(?:ruary)?|apr(?:il)?|july?|sep(?:t(?:ember)?)?|oct(?:ober)?"
    r"|nov(?:ember)?|dec(?:ember)?)|M(?i:ay|ar(?:ch)?)|J(?i:une?)|A(?i:ug(?:ust)?))\.?)"
)
_YEAR = r"(?:1[89]|2\d)\d\d"
_DAY = r"\d{1,2}(?i:st|nd|rd|th)?"
# the spans that name a day or a month with its year: "9 November, 2022", "the 9th of November
# 2022", "November 9, 2022", "2022-11-09", "November 2022", "2022-11", and an ISO day with its
# time ("2022-11-09T18:00", the last alternative)
_DATE_SPAN_RE = re.compile(
    rf"(?<![\w.-])(?:(?P<day>{_DAY}\s+(?i:of\s+)?{_MONTH},?\s*{_YEAR}|{_MONTH}\s+{_DAY},?\s*{_YEAR}"
    rf"|{_YEAR}-\d\d-\d\d)|(?P<month>{_MONTH},?\s+{_YEAR}|{_YEAR}-\d\d))(?![\w-])"
    rf"|(?<![\w.-])(?P<day_time>{_YEAR}-\d\d-\d\d)T\d"
)
#: at most this many date spans of a query are read (each is a dateparser call)
QUERY_DATE_SPANS = 8
#: dates further apart than this name no one time: such a query gets no window
QUERY_DATE_SPREAD = timedelta(days=93)


def names_a_year(query: str) -> bool:
    """Whether ``query`` holds a year of four digits (1800-2999): only then can
    :func:`query_date_window` find a window (a cheap test before it)."""
    return bool(_YEAR_RE.search(query or ""))


def query_date_window(query: str) -> tuple[datetime, datetime] | None:
    """The days and months a query names outright, with their year, as one UTC window.

    "What did Nate cook on 9 November, 2022?" names 9 November 2022 ("November 9, 2022",
    "2022-11-09" and "2022-11-09T18:00:00Z" too); "in May 2023" and "2023-05" name May 2023; a
    query naming several spans them all (the first ``QUERY_DATE_SPANS`` are read; dates more than
    ``QUERY_DATE_SPREAD``, 93 days, apart name no one time: None). Each named
    day is widened by a day on either side and each month by 7 days (``QUERY_DATE_MARGINS``).
    Only years 1800-2999 are read as years (:func:`names_a_year`): "on 31 Dec 9999 or 1 Jan 2000"
    names 1 January 2000 alone. Years alone ("in 2023"), dates without their year ("on August
    11"), relative phrases ("last week", "the week before"), days that do not exist ("31 February
    2023") and other languages are not taken: a year is too coarse to say when, and the others
    depend on when the question is asked or are not dates. English month names and
    abbreviations in any case, except those that are also words (May, March, June, August),
    read as months only with a capital. Each span is read by dateparser in English (the period
    it names), an ISO date as ISO 8601.

    Returns:
        ``(start, end)``, aware UTC, start < end; None when the query names no day or month.
    """
    if not names_a_year(query):
        return None
    base = datetime.now(UTC)
    windows: list[tuple[datetime, datetime]] = []
    for match in list(_DATE_SPAN_RE.finditer(query))[:QUERY_DATE_SPANS]:
        kind = "month" if match.group("month") else "day"
        phrase = match.group("month") or match.group("day") or match.group("day_time")
        try:
            period = (
                _iso_period(phrase) if phrase[:4].isdigit() else _named_period(phrase, base, english=True)
            )
        except (ValidationError, OverflowError):
            continue
        if period is None:
            continue
        start, end = period
        # the period dateparser read must be the one the span names (a day that does not exist,
        # "31 February 2023", reads as its month)
        if (end - start <= timedelta(days=1)) != (kind == "day") or end - start > timedelta(days=31):
            continue
        margin = QUERY_DATE_MARGINS[kind]
        try:
            windows.append((start - margin, end + margin))
        except OverflowError:
            continue
    if not windows:
        return None
    start, end = min(w[0] for w in windows), max(w[1] for w in windows)
    return (start, end) if end - start <= QUERY_DATE_SPREAD else None


def _iso_period(text: str) -> tuple[datetime, datetime] | None:
    """The day ("2023-05-04") or month ("2023-05") of an ISO 8601 date, None when there is no
    such date ("2023-13-01", "2023-02-30")."""
    try:
        if len(text) == 7:
            start = datetime(int(text[:4]), int(text[5:7]), 1, tzinfo=UTC)
            return start, _next_year(start.year, "query") if start.month == 12 else start.replace(
                month=start.month + 1
            )
        day = datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
    except ValueError:
        return None
    return day, day + timedelta(days=1)


def _day_start(dt: datetime) -> datetime:
    return dt.replace(hour=0, minute=0, second=0, microsecond=0)


def parse_date_range(
    value: object, *, now: datetime | str | None = None, field: str = "date_range"
) -> tuple[datetime, datetime]:
    """A half-open UTC window ``[start, end)`` from a date_range.

    Accepted (days are UTC days; relative phrases resolve against ``now``, default the current time):
        * an RFC 3339 instant ("2024-01-15T10:00:00Z"): that instant's day;
        * a dict ``{"start": ..., "end": ...}`` (either may be missing or empty, not both; ISO
          8601 or phrases; a date-only end includes that whole day) or an ISO 8601 interval
          "START/END" (likewise);
        * "today", "yesterday";
        * "last week" / "past week": the 7 days up to now (``[now - 7 days, now]``, so a note
          written a minute ago is in it); "last month" / "past month": the 30 days up to now;
          "last year" / "past year": the 365 days up to now;
        * "YYYY-MM": that month; "YYYY": that year; "YYYY-MM-DD": that day; "YYYY-Www": that ISO week;
        * "this year" (1 January until today's end), "tomorrow";
        * a day, month or year named outright, in words: that period ("5 March 2024",
          "March 2024", "May 8, 2023");
        * "since", "from" or "after" a date, until ``now`` ("since March 2024": from 1 March;
          "after March 2024": from 1 April); "before" or "until" a date, from the beginning
          ("before March 2024": until 1 March; "until March 2024": through March);
        * other phrases via dateparser, from that moment until ``now``: "3 days ago",
          "2 months ago" (the same day two months back), "march" (this year's); a phrase in
          the future ("next friday") means that day.

    Returns:
        (start, end), aware UTC, start < end.

    Raises:
        ValidationError: the value cannot be understood (the original silently dropped the filter),
            sets no bound (``{}``, ``"/"``), or its window reaches past the calendar (years 1 to
            9999).
    """
    base = parse_instant(now, "now") or datetime.now(UTC)
    try:
        return _date_range(value, base, field)
    except OverflowError:  # a day before 0001-01-01 or after 9999-12-31 (datetime's range)
        raise ValidationError(field, f"{value!r} reaches past the calendar (years 1 to 9999)") from None


def _date_range(value: object, base: datetime, field: str) -> tuple[datetime, datetime]:
    """parse_date_range's window, relative to ``base`` (OverflowError past the calendar)."""
    today = _day_start(base)
    if isinstance(value, Mapping):
        unknown = set(value) - {"start", "end"}
        if unknown:
            raise ValidationError(field, f"unknown keys {sorted(unknown)}; use start and end")
        if not value.get("start") and not value.get("end"):  # ({}, "/": no window was meant?)
            raise ValidationError(field, "sets neither start nor end; leave date_range out for no window")
        start = _bound(value.get("start"), base, field + ".start", end=False) if value.get("start") else None
        end = _bound(value.get("end"), base, field + ".end", end=True) if value.get("end") else None
        start = start or datetime(1, 1, 2, tzinfo=UTC)
        end = end or datetime(9999, 12, 30, tzinfo=UTC)
        return _checked(start, end, field)
    if not isinstance(value, str):
        raise ValidationError(field, f"expected a string or a {{'start', 'end'}} dict, got {value!r}")
    if not value.strip():
        raise ValidationError(field, "must not be blank")
    text = value.strip()
    low = text.lower()
    text = _iso_slashed(text, field)
    low = text.lower()
    if "/" in text and low.partition(" ")[0] not in UNTIL_NOW + UP_TO:
        left, _, right = text.partition("/")
        return _date_range({"start": left, "end": right}, base, field)
    if low == "today":
        return today, today + timedelta(days=1)
    if low == "yesterday":
        return today - timedelta(days=1), today
    if low in ROLLING_WINDOWS:  # up to and including now (the window's end is exclusive)
        return base - ROLLING_WINDOWS[low], base + timedelta(microseconds=1)
    if low in ("this week",):
        return today - timedelta(days=today.weekday()), today + timedelta(days=1)
    if low in ("this month",):
        return today.replace(day=1), today + timedelta(days=1)
    if low in ("this year",):
        return today.replace(month=1, day=1), today + timedelta(days=1)
    if low == "tomorrow":
        return today + timedelta(days=1), today + timedelta(days=2)
    try:
        if re.fullmatch(r"\d{4}", text):
            year = int(text)
            return datetime(year, 1, 1, tzinfo=UTC), _next_year(year, field)
        if m := re.fullmatch(r"(\d{4})-(\d{2})", text):
            year, month = int(m.group(1)), int(m.group(2))
            if not 1 <= month <= 12:
                raise ValidationError(field, f"{text!r}: month out of range")
            start = datetime(year, month, 1, tzinfo=UTC)
            end = _next_year(year, field) if month == 12 else datetime(year, month + 1, 1, tzinfo=UTC)
            return start, end
        if m := re.fullmatch(r"(\d{4})-?W(\d{2})", text, re.IGNORECASE):
            start = datetime.fromisocalendar(int(m.group(1)), int(m.group(2)), 1).replace(tzinfo=UTC)
            return start, start + timedelta(days=7)
    except ValueError:
        raise ValidationError(field, f"{text!r} is not a valid date (years 1..9998)") from None
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}(?:[T ].*)?", text):
        instant = parse_instant(text, field)
        assert instant is not None
        day = _day_start(instant)
        return day, day + timedelta(days=1)
    if re.fullmatch(r"[\d.eE+\-]+", text):
        raise ValidationError(field, f"{text!r} is not a date")
    word, _, rest = low.partition(" ")
    rest = rest.strip()
    if word in UNTIL_NOW + UP_TO and rest:
        # the period the date names (a day, month, year: "after" starts at its end, "until"
        # ends there), or the instant it names (a time of day, "3 days ago")
        first, last = _period_or_instant(rest, base, field)
        if word in UNTIL_NOW:  # "since / from / after <date>": from then until now
            start = last if word == "after" else first
            return _checked(start, max(base, start + timedelta(seconds=1)), field)
        # "before / until <date>": from the beginning until then
        return _checked(datetime(1, 1, 2, tzinfo=UTC), last if word in ("until", "till") else first, field)
    named = _named_period(text, base)
    if named is not None:
        return named
    start = parse_natural(low, field, now=base)
    if start > base:  # a future phrase ("next week", "in 3 days"): that day
        day = _day_start(start)
        return day, day + timedelta(days=1)
    return _checked(start, max(base, start + timedelta(seconds=1)), field)


#: first words of a date_range phrase that runs from its date until now, or up to its date
UNTIL_NOW = ("since", "from", "after", "starting")
UP_TO = ("before", "until", "till")


def _iso_slashed(text: str, field: str) -> str:
    """``text`` with its year-first slashed dates in ISO form ("2024/03/05" -> "2024-03-05").

    Raises:
        ValidationError: a day-or-month-first slashed date ("3/5/2024" is 3 May or 5 March).
    """
    if m := re.search(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b", text):
        raise ValidationError(
            field, f"{m.group(0)!r}: day and month order is ambiguous; write the date as YYYY-MM-DD"
        )
    return re.sub(
        r"\b(\d{4})/(\d{1,2})/(\d{1,2})\b",
        lambda m: f"{m.group(1)}-{int(m.group(2)):02d}-{int(m.group(3)):02d}",
        text,
    )


def _period_or_instant(text: str, base: datetime, field: str) -> tuple[datetime, datetime]:
    """The window a date names ("yesterday", "2024-03-05", "2024-03", "March 2024"), or its
    instant twice ("5 March 2024 14:00", "2024-03-05T14:00:00Z", "3 days ago")."""
    if text in ("today", "yesterday", "tomorrow") or re.fullmatch(
        r"\d{4}(?:-\d{2}){0,2}|\d{4}-?w\d{2}", text
    ):
        return _date_range(text, base, field)
    named = _named_period(text, base, times=False)
    if named is not None:
        return named
    instant = parse_natural(text, field, now=base)
    return instant, instant


def _named_period(
    text: str, base: datetime, *, times: bool = True, english: bool = False
) -> tuple[datetime, datetime] | None:
    """The day, month or year a phrase names outright ("5 March 2024", "March 2024", "May 8,
    2023 14:00"): the phrase means the same period whatever ``now`` is (read against ``base``
    and a year and more before it) and dateparser gives its granularity. None for a relative
    phrase ("3 days ago", "last monday", "march" without a year) or one it cannot read; with
    ``times`` False, also for a time of day ("5 March 2024 14:00": an instant)."""
    from dateparser.date import DateDataParser

    def read(at: datetime) -> tuple[datetime | None, str | None]:
        settings = {
            "RELATIVE_BASE": at.astimezone(UTC).replace(tzinfo=None),
            "TIMEZONE": "UTC",
            "TO_TIMEZONE": "UTC",
            "RETURN_AS_TIMEZONE_AWARE": True,
            "PREFER_DAY_OF_MONTH": "first",
            "PREFER_MONTH_OF_YEAR": "first",
        }
        try:
            parser = DateDataParser(languages=["en"] if english else None, settings=settings)
            data = parser.get_date_data(text)
        except (ValueError, OverflowError):
            return None, None
        return data.date_obj, data.period

    here, period = read(base)
    if here is None or read(base - timedelta(days=400)) != (here, period):
        return None
    if not times and here.astimezone(UTC).time() != datetime.min.time():  # an instant, not a day
        return None
    day = _day_start(here.astimezone(UTC))
    if period == "year":
        return day.replace(month=1, day=1), _next_year(day.year, "date_range")
    if period == "month":
        start = day.replace(day=1)
        end = _next_year(day.year, "date_range") if day.month == 12 else start.replace(month=day.month + 1)
        return start, end
    if period in ("day", "time"):
        return day, day + timedelta(days=1)
    return None


def _next_year(year: int, field: str) -> datetime:
    if year >= 9999:
        raise ValidationError(field, f"{year} is out of range (years 1..9998)")
    return datetime(year + 1, 1, 1, tzinfo=UTC)


def _bound(value: object, base: datetime, field: str, *, end: bool) -> datetime:
    if isinstance(value, datetime):
        return parse_instant(value, field)  # type: ignore[return-value]
    if isinstance(value, date):  # a day, as "YYYY-MM-DD": an end includes the whole day
        value = value.isoformat()
    if not isinstance(value, str):
        raise ValidationError(field, f"expected an ISO 8601 string, a date or a datetime, got {value!r}")
    text = value.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        day = parse_instant(text, field)
        assert day is not None
        return day + timedelta(days=1) if end else day
    return parse_natural(text, field, now=base)


def _checked(start: datetime, end: datetime, field: str) -> tuple[datetime, datetime]:
    if start >= end:
        raise ValidationError(
            field, f"empty window: start {start.isoformat()} is not before end {end.isoformat()}"
        )
    return start, end
