"""calute's ``MemoryItem``: the value every calute-style memory returns.

Shared by the calute facade (:mod:`cortex_pg.compat.calute`) and
:class:`~cortex_pg.entities.EntityMemory`. An item is a view of one row of
``cortex.notes`` / ``cortex.stm_notes``; ``memory_id`` is the note id.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from cortex_pg.errors import ValidationError
from cortex_pg.store.filters import ITEM_TEXT_KEYS
from cortex_pg.store.records import Note

ITEM_FIELDS = ITEM_TEXT_KEYS  # an item's own fields kept in its metadata, as strings


def check_item_fields(meta: Mapping[str, Any], prefix: str = "") -> None:
    """The item fields an item's metadata holds (``agent_id``, ``task_id``, ``conversation_id``,
    ``user_id``) must be strings: summaries title-case them, and an ``agent_id`` of 7 broke
    every later summary of its scope; its ``importance``, when there, a number in [0, 1].

    Raises:
        ValidationError: one that is not a string (field ``prefix + name``).
    """
    for name in (*ITEM_FIELDS, "user_id"):
        value = meta.get(name)
        if value is not None and not isinstance(value, str):
            raise ValidationError(prefix + name, f"must be a string, got {type(value).__name__}")
    if "importance" in meta:  # calute's importance, kept in the metadata: read as a number
        value = meta["importance"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValidationError(prefix + "importance", f"must be a number in [0, 1], got {value!r}")


def item_importance(meta: Mapping[str, Any], default: float) -> float:
    """calute's importance of an item, from its metadata: ``default`` when absent or not a
    number in [0, 1] (a value stored before :func:`check_item_fields` checked it)."""
    value = meta.get("importance", default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return default
    return float(value)


class UnknownFieldError(ValidationError, TypeError):
    """:meth:`MemoryItem.from_dict` got a key that is not a field.

    A :class:`~cortex_pg.errors.ValidationError` (``field`` = the key) that is also a
    ``TypeError``, which is what calute raised for it.
    """


@dataclass
class MemoryItem:
    """calute's ``MemoryItem``: same fields, defaults and ``to_dict`` keys.

    Differences: ``timestamp`` defaults to the current time in UTC (timezone-aware) and the
    ``metadata`` dict is copied on construction, in ``to_dict`` and in ``from_dict``, so two
    items (or an item and its caller) never share one dict. ``embedding`` (a
    ``list[float]``) is never serialised.
    """

    content: str
    memory_type: str = "general"
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))
    metadata: dict[str, Any] = field(default_factory=dict)
    agent_id: str | None = None
    task_id: str | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    relevance_score: float = 1.0
    access_count: int = 0
    last_accessed: datetime | None = None
    embedding: list[float] | None = None
    memory_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        self.metadata = copy.deepcopy(dict(self.metadata or {}))

    def to_dict(self) -> dict[str, Any]:
        """The 12 keys of calute's ``MemoryItem.to_dict``: timestamps as ISO 8601 strings,
        ``metadata`` a copy, no ``embedding``."""
        return {
            "memory_id": self.memory_id,
            "content": self.content,
            "memory_type": self.memory_type,
            "timestamp": self.timestamp.isoformat(),
            "metadata": copy.deepcopy(self.metadata),
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "conversation_id": self.conversation_id,
            "user_id": self.user_id,
            "relevance_score": self.relevance_score,
            "access_count": self.access_count,
            "last_accessed": self.last_accessed.isoformat() if self.last_accessed else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryItem:
        """Rebuild an item from :meth:`to_dict` output (ISO strings parsed; naive times are UTC).

        Raises:
            ValidationError: ``data`` is not a mapping (field ``data``); ``content`` is missing
                or not a string; ``timestamp`` / ``last_accessed`` is neither a datetime nor an
                ISO 8601 string (``last_accessed`` may be None); ``metadata`` is not a mapping.
            UnknownFieldError: a key that is not a field (a ValidationError and, as in calute,
                a TypeError).
        """
        if not isinstance(data, Mapping):
            raise ValidationError("data", f"must be a dict, got {type(data).__name__}")
        values = dict(data)
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise UnknownFieldError(str(key), "not a MemoryItem field")
        if "content" not in values:
            raise ValidationError("content", "required")
        if not isinstance(values["content"], str):
            raise ValidationError("content", f"must be a string, got {type(values['content']).__name__}")
        for key in ("timestamp", "last_accessed"):
            if key in values:
                values[key] = _instant(values[key], key, optional=key == "last_accessed")
        if values.get("metadata") is not None and not isinstance(values["metadata"], Mapping):
            raise ValidationError("metadata", f"must be a dict, got {type(values['metadata']).__name__}")
        return cls(**values)


def _instant(value: object, key: str, *, optional: bool) -> datetime | None:
    """A datetime from a datetime or an ISO 8601 string (naive = UTC); None only when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValidationError(key, f"must be an ISO 8601 string or a datetime, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(key, f"not an ISO 8601 date-time: {value[:40]!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def item_from_note(note: Note, score: float = 1.0, *, access_bump: int = 0) -> MemoryItem:
    """The item view of a stored note; ``agent_id``/``task_id``/``conversation_id`` and
    ``user_id`` come from the note's metadata (``user_id`` falls back to the tenant).

    Args:
        score: the ``relevance_score`` to report.
        access_bump: added to the stored access count (a read that touched the row after it
            was fetched).
    """
    meta = note.metadata
    return MemoryItem(
        content=note.content,
        memory_type=note.memory_type,
        timestamp=note.created_at,
        metadata=meta,
        agent_id=meta.get("agent_id"),
        task_id=meta.get("task_id"),
        conversation_id=meta.get("conversation_id"),
        user_id=meta.get("user_id") or note.user_id,
        relevance_score=score,
        access_count=note.access_count + access_bump,
        last_accessed=note.last_accessed_at,
        memory_id=note.id,
    )
