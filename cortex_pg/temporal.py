"""Time handling: instants from callers, and natural-language dates for the CLI.

All instants are timezone-aware UTC. A naive ``datetime`` or a naive ISO 8601 string is taken
to be UTC (documented behaviour, not a guess from the local clock).
"""

from __future__ import annotations

from datetime import UTC, datetime

from cortex_pg.errors import ValidationError


def parse_instant(value: datetime | str | None, field: str = "time") -> datetime | None:
    """An aware UTC datetime from a datetime or an RFC 3339 / ISO 8601 string.

    Args:
        value: ``datetime`` (naive = UTC), ISO 8601 text such as ``"2024-03-01T10:00:00Z"``,
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
    return dt.astimezone(UTC)


def parse_natural(value: str, field: str, *, now: datetime | None = None) -> datetime:
    """An instant from ISO 8601 or a natural phrase ("3 days ago", "last monday", "8 May 2023").

    Relative phrases resolve against ``now`` (default: the current time). Uses dateparser.

    Raises:
        ValidationError: nothing could be parsed.
    """
    try:
        parsed = parse_instant(value, field)
    except ValidationError:
        parsed = None
    if parsed is not None:
        return parsed
    import dateparser

    base = (now or datetime.now(UTC)).astimezone(UTC)
    dt = dateparser.parse(
        value,
        settings={
            "RELATIVE_BASE": base.replace(tzinfo=None),
            "TIMEZONE": "UTC",
            "TO_TIMEZONE": "UTC",
            "RETURN_AS_TIMEZONE_AWARE": True,
        },
    )
    if dt is None:
        raise ValidationError(field, f"cannot understand the date {value!r}")
    return dt.astimezone(UTC)
