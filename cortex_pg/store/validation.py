"""Validation at the API boundary: every caller value is checked here, once, before any write.

Rules (each violation raises :class:`~cortex_pg.errors.ValidationError` naming the field):
    user_id / session_id: text, 1..255 characters, no NUL or other control characters; any
        other character (colons, spaces, unicode) is stored as given. None -> ``"default"``.
    content: text with a visible character (not only whitespace, zero-width characters,
        Hangul fillers or combining marks: :func:`invisible`), no NUL bytes (refused, not stripped: a
        silently altered memory is worse than an error). At most 500,000 characters (:data:`MAX_CONTENT_LENGTH`, as the README
        says), stored whole in any script. Full text indexes the whole content when its tsvector fits PostgreSQL's 1 MB
        limit, else the longest fitting prefix (``cortex.note_tsvector``); the embedding reads the
        whole content, window by window (:mod:`cortex_pg.embeddings.windows`).
    keywords / tags: a list (or tuple) of strings without NUL or other control characters,
        each stripped, blanks and duplicates dropped, order kept; at most 1,000 of them
        (:data:`MAX_LIST_ITEMS`), each at most 255 characters (:data:`MAX_LIST_ITEM_LENGTH`).
    context: text without NUL, at most 10,000 characters (:data:`MAX_CONTEXT_LENGTH`, as a
        query): a short description of the note; the note's text belongs in its content.
    memory_type: a non-blank string without control characters, at most 255 characters
        (:data:`MAX_MEMORY_TYPE_LENGTH`) once stripped.
    a link's reason: text without NUL, at most 10,000 characters (:data:`MAX_LINK_REASON_LENGTH`).
    metadata: a dict that serialises to JSON (no NUL in keys or strings, no NaN or infinity),
        at most 100,000 characters of JSON (:data:`MAX_METADATA_LENGTH`): it travels with the
        note in every read and search result.
    importance: a real number in [0, 1].
    category: a dot path such as ``work.programming.python`` ("/" is accepted as a separator
        and stored as "."); segments with no visible character are refused, and a category
        with none is no category.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import struct
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from cortex_pg.config import DEFAULT_SESSION_ID, DEFAULT_USER_ID
from cortex_pg.errors import ValidationError
from cortex_pg.temporal import parse_instant

MAX_ID_LENGTH = 255
MAX_CONTENT_LENGTH = 500_000  # characters; PostgreSQL's tsvector is capped at 1 MB
MAX_QUERY_LENGTH = 10_000
MAX_METADATA_LENGTH = 100_000  # characters of the metadata's JSON text
#: characters of a category's dot path (it keys cortex.category_counts with the user_id)
MAX_CATEGORY_LENGTH = 255
MAX_MEMORY_TYPE_LENGTH = 255  # characters, stripped
MAX_CONTEXT_LENGTH = 10_000  # characters of a note's context
MAX_LINK_REASON_LENGTH = 10_000  # characters of a link's reason
MAX_LIST_ITEMS = 1_000  # keywords or tags of a note (distinct, not blank)
MAX_LIST_ITEM_LENGTH = 255  # characters of one keyword or tag, stripped
MEMORY_SOURCES = ("all", "ltm", "stm")


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


#: letters and symbols that display nothing: the Hangul fillers (U+115F, U+1160, U+3164,
#: U+FFA0) and the Braille blank (U+2800)
BLANK_CHARACTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def invisible(text: str) -> bool:
    """True when ``text`` has no visible character: only whitespace, format characters
    (zero-width ones, U+FEFF, ...), control characters, the characters of
    :data:`BLANK_CHARACTERS`, and combining marks (with nothing visible to combine with);
    ``""`` too."""
    return all(
        ch.isspace()
        or ch in BLANK_CHARACTERS
        or unicodedata.category(ch) in ("Cf", "Cc", "Zs", "Zl", "Zp", "Mn", "Mc", "Me")
        for ch in text
    )


def _encodable(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "is not valid Unicode (lone surrogate)") from None


def scope_id(value: object, field: str) -> str:
    """A validated user_id or session_id (None -> ``"default"``)."""
    if value is None:
        return DEFAULT_USER_ID if field.endswith("user_id") else DEFAULT_SESSION_ID
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(field, f"longer than {MAX_ID_LENGTH} characters ({len(value)})")
    if _has_control(value):
        raise ValidationError(field, "contains NUL or control characters")
    _encodable(value, field)
    if invisible(value):
        raise ValidationError(field, "has no visible characters")
    return value


def optional_scope_id(value: object, field: str) -> str | None:
    """Like :func:`scope_id` but None stays None (meaning "any session")."""
    return None if value is None else scope_id(value, field)


def note_id(value: object, field: str = "id", *, kind: str = "note") -> uuid.UUID:
    """A note id (or the id of another ``kind`` of object) as UUID; accepts a UUID or its string form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            pass
    raise ValidationError(
        field, f"{value!r} is not {'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind} id (a UUID)"
    )


def content(value: object, field: str = "content", max_length: int = MAX_CONTENT_LENGTH) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(field, "contains NUL bytes (refused; PostgreSQL text cannot hold them)")
    if not value.strip() or invisible(value):
        raise ValidationError(field, "must not be empty or whitespace-only")
    if len(value) > max_length:
        raise ValidationError(field, f"longer than {max_length} characters ({len(value)})")
    _encodable(value, field)
    return value


def query(value: object, field: str = "query") -> str:
    """A search query: like content, at most 10,000 characters."""
    return content(value, field, MAX_QUERY_LENGTH)


def query_or_blank(value: object, field: str = "query") -> str:
    """A search query that may be blank (the calute searches list items for one): ``""`` for a
    string with no visible character (``""``, whitespace, ...: :func:`invisible`), else the
    query as :func:`query` checks it (a string, no NUL, valid Unicode, at most 10,000 characters).

    Raises:
        ValidationError: not a string (None included), or a non-blank query :func:`query` refuses.
    """
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" not in value and invisible(value):
        return ""
    return query(value, field)


def context_or_none(value: object, field: str = "context") -> str | None:
    """A search's situation text: None for None or a string with no visible character (``""``,
    whitespace, zero-width or other format characters, Hangul fillers, combining marks alone:
    blank by the rule of :func:`invisible`, as :func:`query_or_blank`'s), else the text as
    :func:`short_text` checks it.

    Raises:
        ValidationError: not a string, NUL bytes, not valid Unicode.
    """
    text = short_text(value, field)
    return None if text is None or invisible(text) else text


def string_list(value: object, field: str) -> list[str]:
    """Keywords or tags: the strings stripped, blanks (no visible character, by the rule of
    :func:`invisible`) and repeats dropped, order kept; None -> ``[]``.

    Raises:
        ValidationError: not a list (field ``field``) or more than :data:`MAX_LIST_ITEMS`
            distinct strings (``field``); an item that is not a string, holds NUL or other
            control characters or a lone surrogate, or is longer than
            :data:`MAX_LIST_ITEM_LENGTH` characters once stripped (``field[i]``).
    """
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError(field, "must be a list of strings")
    out: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ValidationError(f"{field}[{i}]", f"must be a string, got {type(item).__name__}")
        item = item.strip()
        if not item:
            continue
        if _has_control(item):
            raise ValidationError(f"{field}[{i}]", f"{item!r} contains NUL or control characters")
        _encodable(item, f"{field}[{i}]")
        if invisible(item):
            continue
        if len(item) > MAX_LIST_ITEM_LENGTH:
            raise ValidationError(
                f"{field}[{i}]", f"longer than {MAX_LIST_ITEM_LENGTH} characters ({len(item)})"
            )
        if item not in seen:
            if len(out) == MAX_LIST_ITEMS:
                raise ValidationError(field, f"more than {MAX_LIST_ITEMS:,} distinct items")
            seen.add(item)
            out.append(item)
    return out


def metadata(
    value: object, field: str = "metadata", max_length: int | None = MAX_METADATA_LENGTH
) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(field, f"must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), default=_json_default, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"not JSON-serialisable: {exc}") from None
    if "\\u0000" in text:
        raise ValidationError(field, "contains NUL characters")
    if max_length is not None and len(text) > max_length:
        raise ValidationError(
            field, f"is {len(text):,} characters of JSON, more than the {max_length:,} allowed"
        )
    _encodable(text, field)
    return json.loads(text, object_pairs_hook=lambda pairs: _distinct_keys(pairs, field))


def _distinct_keys(pairs: list[tuple[str, Any]], field: str) -> dict[str, Any]:
    """A JSON object from its pairs; two keys that are one in JSON (``1`` and ``"1"``, ``True``
    and ``"true"``) would keep only the last value, so they are an error."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValidationError(
            field, f"two keys are both {twice!r} in JSON (e.g. 1 and '1'); one value would be lost"
        )
    return out


def _json_default(obj: object) -> object:
    # (a datetime is a date too: its time and offset are kept)
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def importance(value: object, field: str = "importance") -> float:
    """An importance: a number in [0, 1] that the column's ``real`` holds (a nonzero value that
    rounds to 0 as a real, below about 7e-46, is refused, as PostgreSQL refuses it).

    Raises:
        ValidationError: not a number, NaN, outside [0, 1], or too small for a real.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number in [0, 1], got {value!r}")
    f = float(value)
    if math.isnan(f) or not 0.0 <= f <= 1.0:
        raise ValidationError(field, f"must be in [0, 1], got {value!r}")
    if f != 0 and struct.unpack("f", struct.pack("f", f))[0] == 0:
        raise ValidationError(
            field, f"{value!r} is too small for a real (a nonzero importance needs about 1.4e-45 or more)"
        )
    return f


def category(value: object, field: str = "category") -> str | None:
    """A category: a dot path such as ``work.programming`` ("/" read as "."; segments stripped),
    at most :data:`MAX_CATEGORY_LENGTH` characters; None or blank (no visible character, by the
    rule of :func:`invisible`) = none.

    Raises:
        ValidationError: not a string, an empty segment (no visible character) or one holding
            control characters (NUL too), a lone surrogate, or longer than the limit (field
            ``field``).
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string dot path such as work.programming")
    _encodable(value, field)
    path = value.strip().replace("/", ".")
    if invisible(path):
        return None
    segments = [s.strip() for s in path.split(".")]
    if any(invisible(s) or _has_control(s) for s in segments):
        raise ValidationError(field, f"{value!r} is not a dot path (empty or invalid segment)")
    path = ".".join(segments)
    if len(path) > MAX_CATEGORY_LENGTH:
        raise ValidationError(field, f"longer than {MAX_CATEGORY_LENGTH} characters ({len(path)})")
    return path


def short_text(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(field, "contains NUL bytes")
    _encodable(value, field)
    return value


def bounded_text(value: object, field: str, most: int) -> str | None:
    """None, or text as :func:`short_text` checks it of at most ``most`` characters.

    Raises:
        ValidationError: not a string, NUL bytes, not valid Unicode, or too long.
    """
    text = short_text(value, field)
    if text is not None and len(text) > most:
        raise ValidationError(field, f"longer than {most:,} characters ({len(text):,})")
    return text


def note_context(value: object, field: str = "context") -> str | None:
    """A note's context: :func:`bounded_text` of at most :data:`MAX_CONTEXT_LENGTH` characters."""
    return bounded_text(value, field, MAX_CONTEXT_LENGTH)


def link_reason(value: object, field: str = "reason") -> str | None:
    """A link's reason: :func:`bounded_text` of at most :data:`MAX_LINK_REASON_LENGTH` characters."""
    return bounded_text(value, field, MAX_LINK_REASON_LENGTH)


def memory_type(value: object, field: str = "memory_type") -> str:
    """A memory type (``note``, ...): stripped, 1..:data:`MAX_MEMORY_TYPE_LENGTH` characters.

    Raises:
        ValidationError: not a string, blank (no visible character, by the rule of
            :func:`invisible`), control characters, a lone surrogate, or too long.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a non-empty string")
    if _has_control(value):
        raise ValidationError(field, "contains control characters")
    _encodable(value, field)
    if invisible(value):
        raise ValidationError(field, "has no visible characters")
    value = value.strip()
    if len(value) > MAX_MEMORY_TYPE_LENGTH:
        raise ValidationError(field, f"longer than {MAX_MEMORY_TYPE_LENGTH} characters ({len(value)})")
    return value


def evolution_job(value: Any, field: str = "enqueue_evolution") -> bool | str:
    """Whether (and of which kind) a new note's evolution job is queued: a bool, or the kind of
    job (``evolve``, the same as True; ``prem``, the Prem Cortex API's: its analysis first).

    Raises:
        ValidationError: anything else.
    """
    from cortex_pg.store.jobs import NOTE_KINDS

    if isinstance(value, bool) or (isinstance(value, str) and value in NOTE_KINDS):
        return value
    raise ValidationError(field, f"must be True, False or one of {', '.join(NOTE_KINDS)}, got {value!r}")


def connection_callback(value: object, field: str = "in_same_transaction") -> Callable[..., Any] | None:
    """A function called with a connection inside a transaction: None, or a plain (not async)
    callable, returned wrapped so that handing back an awaitable raises (rolling the write
    back). A coroutine would only be created, never awaited, so its rows would silently not be
    written."""
    if value is None:
        return None
    if not callable(value):
        raise ValidationError(field, f"must be a function of the connection, got {type(value).__name__}")
    if inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(type(value).__call__):
        raise ValidationError(
            field, "must be a plain function (it runs on the write's connection), not async"
        )
    fn = value

    def checked(conn: Any) -> Any:  # (a plain function may still hand back a coroutine)
        result = fn(conn)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise ValidationError(field, "returned an awaitable: it must do its work itself, not async")
        return result

    return checked


def limit(value: object, field: str = "limit") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(field, f"must be a positive integer, got {value!r}")
    if value > 10_000:
        raise ValidationError(field, f"at most 10000, got {value}")
    return value


def flag(value: object, field: str) -> bool:
    """A yes/no argument: True or False only (a string such as "no" is truthy in Python and
    would be read the other way round by PostgreSQL)."""
    if not isinstance(value, bool):
        raise ValidationError(field, f"must be True or False, got {value!r}")
    return value


def link_depth(value: object, field: str = "link_depth") -> int:
    """Hops of a link expansion: an integer in 1..10."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
        raise ValidationError(field, f"must be an integer in 1..10, got {value!r}")
    return value


def unit_interval(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(float(value)):
        raise ValidationError(field, f"must be a number in [0, 1], got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValidationError(field, f"must be in [0, 1], got {value!r}")
    return float(value)


def memory_source(value: object) -> str:
    if value not in MEMORY_SOURCES:
        raise ValidationError("memory_source", f"must be one of {', '.join(MEMORY_SOURCES)}; got {value!r}")
    return value  # type: ignore[return-value]


def where_filter(value: object, field: str = "where_filter") -> dict[str, Any] | None:
    """A where_filter as a JSON-able dict (its grammar is checked in SQL by ``cortex.compile_filter``;
    see :mod:`cortex_pg.store.filters`: a bare list value means "equal to exactly this list",
    and a shape that could only match nothing because of how it is written raises)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationError(field, f"must be a dict, got {type(value).__name__}")
    if _depth(value) > MAX_FILTER_DEPTH:
        raise ValidationError(field, f"nested deeper than {MAX_FILTER_DEPTH} levels")
    return metadata(value, field, max_length=None)  # JSON checks only: a filter is not stored


MAX_FILTER_DEPTH = 32


def _depth(value: object, level: int = 0) -> int:
    """Nesting depth of dicts/lists, stopping early past the limit (no recursion blow-up)."""
    if level > MAX_FILTER_DEPTH:
        return level
    if isinstance(value, Mapping):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list | tuple):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def content_hash(text: str) -> str:
    """Hex SHA-256 of the UTF-8 content; the same as the ``cortex.set_note_derived`` trigger."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class NewNote:
    """A validated note ready to insert."""

    id: uuid.UUID
    user_id: str
    session_id: str
    content: str
    content_hash: str
    keywords: list[str]
    tags: list[str]
    context: str | None
    category: str | None
    memory_type: str
    metadata: dict[str, Any]
    importance: float
    created_at: datetime
    explicit_id: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "user_id": self.user_id,
            "session_id": self.session_id,
            "content": self.content,
            "keywords": self.keywords,
            "tags": self.tags,
            "context": self.context,
            "category": self.category,
            "memory_type": self.memory_type,
            "metadata": self.metadata,
            "importance": self.importance,
            "created_at": self.created_at.isoformat(),
        }


NOTE_FIELDS = (
    "id",
    "content",
    "user_id",
    "session_id",
    "time",
    "keywords",
    "tags",
    "context",
    "category",
    "metadata",
    "importance",
    "memory_type",
)


def new_note(
    item: Mapping[str, Any],
    *,
    default_user_id: str | None = None,
    default_session_id: str | None = None,
    prefix: str = "",
) -> NewNote:
    """Validate one note given as a mapping with the keys of :data:`NOTE_FIELDS`.

    ``time`` may also be given as ``created_at`` (not both: two names for one field are an
    error, not a silent choice). ``prefix`` is prepended to field names in errors (e.g.
    ``"items[3]."``).
    """
    unknown = set(item) - set(NOTE_FIELDS) - {"created_at"}
    if unknown:
        raise ValidationError(
            prefix + sorted(unknown)[0], f"unknown note field; known: {', '.join(NOTE_FIELDS)}"
        )
    if item.get("time") is not None and item.get("created_at") is not None:
        raise ValidationError(prefix + "created_at", "give the note's time as time or created_at, not both")
    when = item.get("time") if item.get("time") is not None else item.get("created_at")
    text = content(item.get("content"), prefix + "content")
    return NewNote(
        id=uuid.uuid4() if item.get("id") is None else note_id(item["id"], prefix + "id"),
        user_id=scope_id(item.get("user_id", default_user_id), prefix + "user_id"),
        session_id=scope_id(item.get("session_id", default_session_id), prefix + "session_id"),
        content=text,
        content_hash=content_hash(text),
        keywords=string_list(item.get("keywords"), prefix + "keywords"),
        tags=string_list(item.get("tags"), prefix + "tags"),
        context=note_context(item.get("context"), prefix + "context"),
        category=category(item.get("category"), prefix + "category"),
        memory_type=memory_type(item.get("memory_type", "note"), prefix + "memory_type"),
        metadata=metadata(item.get("metadata"), prefix + "metadata"),
        importance=importance(item.get("importance", 0.5), prefix + "importance"),
        created_at=parse_instant(when, prefix + "time") or datetime.now(UTC),
        explicit_id=item.get("id") is not None,
    )
