"""Filters: one language for every caller, compiled by the SQL function ``cortex.compile_filter``.

The Prem API's ``where_filter``, the calute stores' ``filters`` (``ShortTermMemory``,
``LongTermMemory``, ``ContextualMemory``, ``EntityMemory``, ``UserMemory``) and plain SQL all
go through the same compiler, so a filter means the same thing and fails the same way
everywhere (the grammar is in ``sql/functions/compile_filter/v2.sql``):

* ``{"field": value}`` is ``$eq``; operators ``$eq $ne $gt $gte $lt $lte $in $nin $contains``
  and ``$and $or $not``; columns (content, memory_type, importance, created_at, tags, ...) and
  metadata keys (anything else, or ``metadata.<key>``).
* ``$under`` (``compile_filter`` v3) on a text column: a dot path and everything below it, by
  whole segments (``{"category": {"$under": "work"}}`` matches ``work`` and ``work.python``,
  never ``workout``).
* A bare list value means "equal to exactly this list" (JSON equality), never "any of"
  (``$in``) nor "contains" (``$contains``).
* A shape that could only match nothing because of how it is written raises
  :class:`~cortex_pg.errors.ValidationError` naming the caller's field and the path of the
  offending part: an unknown operator, a logical or comparison word without ``$``
  (``{"or": [...]}``, ``{"year": {"gte": 2022}}``), bounds of two JSON types, a number written
  as a string in a range (``{"$gte": "2022"}``), an empty range (on the integer
  ``access_count``: one that holds no whole number, ``{"$gt": 1, "$lt": 2}``), a wrong value
  type, conditions on one field that no value meets together, in one operator object or spread
  over the clauses of a conjunction (``{"$and": [{"category": "work"}, {"category": "home"}]}``;
  ``compile_filter`` v5 and v7; v8 matches value lists by hashing, in time linear in their size),
  ``$under`` included (``{"category": {"$eq": "work", "$under": "home"}}``, two ``$under`` paths
  neither of which lies under the other; v9), a value outside the column's domain
  (``{"importance": {"$gt": 1}}``: importance is kept in 0..1; v9) or beyond a real's range
  (``{"importance": {"$gt": 1e-50}}``; v10), and a value no note can
  hold where one must be (``{"category": "..a"}``, ``{"tags": " "}``; v9).
* Values are read in the form notes store them (v9, the rules of
  :func:`~cortex_pg.store.validation.category` and
  :func:`~cortex_pg.store.validation.string_list`): a category of ``$eq $ne $in $nin $under``
  as a dot path ("/" read as ".", segments stripped: ``{"category": "work/python"}`` finds the
  note saved with that category), tags and keywords stripped (``{"tags": " urgent "}``).

The calute stores use calute's item field names (:func:`item_filter`): ``memory_type``,
``agent_id``, ``task_id``, ``conversation_id``, ``user_id`` (the item's user: metadata
``user_id`` when set, else the tenant), ``memory_id``, ``timestamp``, ``last_accessed``,
``content``, ``access_count`` and any metadata key. ``agent_id``, ``task_id`` and
``conversation_id`` hold strings, so comparing them with another value is an error, as for
``user_id`` (``{"agent_id": 5}``: ``filters.agent_id: expected a string, got 5``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import validation

COMPILE = "SELECT cortex.compile_filter(CAST(:filter AS jsonb), :alias, :path)"

ITEM_FIELDS = {"$fields": "item"}
#: calute item fields kept as metadata strings (``cortex_pg.compat.memory_item.check_item_fields``
#: refuses any other value), so a filter value of another type never matches one
ITEM_TEXT_KEYS = ("agent_id", "task_id", "conversation_id")
#: the operators whose values a field's value is compared with
_COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains")


def clean_filters(filters: object, field: str = "filters") -> dict[str, Any] | None:
    """calute filters without their unset keys: a key whose value is None or ``""`` is ignored
    (``{"agent_id": None}`` filters nothing, as in calute's stores); None or ``{}`` -> None.

    Raises:
        ValidationError: not a dict (``field``).
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise ValidationError(field, f"must be a dict, got {type(filters).__name__}")
    kept = {k: v for k, v in filters.items() if v is not None and v != ""}
    return kept or None


def clean_filters_given(filters: object, field: str = "filters") -> bool:
    """True when ``filters`` holds a condition (not None, ``{}`` or only unset keys).

    Raises:
        ValidationError: not a dict (``field``).
    """
    return clean_filters(filters, field) is not None


def item_filter(
    filters: object, *, memory_type: str | None = None, field: str = "filters"
) -> dict[str, Any] | None:
    """A calute store's where_filter: calute's item field names (``"$fields": "item"``), this
    store's ``memory_type`` (when given) AND the caller's filters (see :func:`clean_filters`).

    Returns:
        A JSON-able where_filter, or None when there is nothing to test.

    Raises:
        ValidationError: not a dict, not JSON-serialisable, or nested too deep (``field``).
    """
    extra = clean_filters(filters, field)
    if extra is not None:
        extra = validation.where_filter(extra, field)
        _check_item_text_values(extra, field)
    if memory_type is None:
        return None if extra is None else {**ITEM_FIELDS, **extra}
    mine = {"memory_type": memory_type}
    if extra is None:
        return {**ITEM_FIELDS, **mine}
    if _names_key(extra, "memory_type"):
        # The store's own type stays out of the caller's conjunction (a one-branch $or is not
        # merged with it): the compiler refuses a conjunction no value meets, but asking this
        # store for another memory_type is a well-written filter that matches nothing here.
        return {**ITEM_FIELDS, "$and": [{"$or": [mine]}, extra]}
    if "$fields" in extra:
        return {**ITEM_FIELDS, "$and": [mine, extra]}
    return {**ITEM_FIELDS, **extra, **mine}  # the caller's keys keep their paths in errors


def _check_item_text_values(flt: Mapping[str, Any], path: str) -> None:
    """Refuse a value of ``agent_id``, ``task_id`` or ``conversation_id`` (or
    ``metadata.agent_id``, ...) that is not a string (or null), in any comparison or
    ``$contains``, at any level of ``flt`` (``$and``, ``$or``, ``$not``): those fields hold strings,
    so ``{"agent_id": 5}`` could only match nothing (the SQL compiler reads them as metadata
    keys, which may hold any JSON value, and cannot tell).

    Raises:
        ValidationError: ``field`` naming the path, as the compiler's errors do
            (``filters.agent_id.$in: expected a string, got 5``).
    """
    for key, value in flt.items():
        if key in ("$and", "$or") and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, Mapping):
                    _check_item_text_values(sub, f"{path}.{key}[{i}]")
        elif key == "$not" and isinstance(value, Mapping):
            _check_item_text_values(value, f"{path}.$not")
        elif key in ITEM_TEXT_KEYS or key.removeprefix("metadata.") in ITEM_TEXT_KEYS:
            ops = value if isinstance(value, Mapping) else {None: value}
            for op, operand in ops.items():
                if op is not None and op not in _COMPARISONS:
                    continue
                at = f"{path}.{key}" if op is None else f"{path}.{key}.{op}"
                for v in operand if op in ("$in", "$nin") and isinstance(operand, list) else [operand]:
                    if v is not None and not isinstance(v, str):
                        raise ValidationError(
                            path.split(".", 1)[0],
                            f"{at}: expected a string, got {json.dumps(v)} ({key} holds strings)",
                        )


def _names_key(value: object, key: str) -> bool:
    """True when ``key`` is a key of ``value`` or of a dict nested in it (through lists too)."""
    if isinstance(value, Mapping):
        return key in value or any(_names_key(v, key) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_names_key(v, key) for v in value)
    return False


def compile_where(
    conn: Connection, where_filter: Mapping[str, Any] | None, *, field: str = "filters", alias: str = "n"
) -> str:
    """The SQL boolean expression of a where_filter over rows aliased ``alias``, ready to put
    in a :func:`sqlalchemy.text` statement (``"true"`` for None).

    Literals are quoted by the server (``format('%L')``); ``:`` is escaped so that ``text()``
    binds no parameter inside them.

    Raises:
        ValidationError: a filter the compiler refuses, naming ``field`` and the path of the
            offending part (e.g. ``filters.year.$gte``).
    """
    if not where_filter:
        return "true"
    checked = validation.where_filter(where_filter, field)
    with translate_db_errors():
        compiled = conn.execute(
            text(COMPILE), {"filter": json.dumps(checked), "alias": alias, "path": field}
        ).scalar_one()
    return str(compiled).replace(":", "\\:")
