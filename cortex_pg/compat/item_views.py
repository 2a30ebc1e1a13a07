"""What every calute-style store shows of its items: ``get_context`` text and ``get_statistics``.

Shared by the calute stores (:mod:`cortex_pg.compat.calute`) and
:class:`~cortex_pg.entities.EntityMemory`. Statistics are counted in SQL over a store's rows
(:data:`ROW_COLUMNS` selected by the store's own scope test), never over rows fetched into
Python.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.compat.memory_item import MemoryItem
from cortex_pg.errors import ValidationError, translate_db_errors

FORMATS = ("text", "json", "markdown")

# one row per item, with the item fields that statistics count (as item_from_note reads them:
# agent_id / conversation_id from the metadata; user_id from the metadata, else the tenant)
ROW_COLUMNS = (
    "n.memory_type, nullif(n.metadata ->> 'agent_id', '') AS agent_id, "
    "coalesce(nullif(n.metadata ->> 'user_id', ''), n.user_id) AS item_user_id, "
    "nullif(n.metadata ->> 'conversation_id', '') AS conversation_id"
)

STATISTICS = """
WITH items AS MATERIALIZED ({rows})
SELECT count(*) AS total_items,
       count(DISTINCT agent_id) AS unique_agents,
       count(DISTINCT item_user_id) AS unique_users,
       count(DISTINCT conversation_id) AS unique_conversations,
       (SELECT coalesce(jsonb_object_agg(t.memory_type, t.k), '{{}}'::jsonb)
        FROM (SELECT memory_type, count(*) AS k FROM items GROUP BY memory_type) t) AS memory_types
FROM items
"""


def format_type(value: object) -> str:
    """A validated ``format_type`` of ``get_context``.

    Raises:
        ValidationError: not one of ``text``, ``json``, ``markdown`` (calute fell back to text).
    """
    if value not in FORMATS:
        raise ValidationError("format_type", f"must be one of {', '.join(FORMATS)}; got {value!r}")
    return str(value)


def render_context(items: Iterable[MemoryItem], fmt: str = "text") -> str:
    """calute's ``get_context`` rendering of ``items`` (in the order given).

    * ``text``: one line per item, ``[<agent_id>]: <content>``, or the bare content without an agent;
    * ``json``: ``json.dumps([item.to_dict(), ...], indent=2)``;
    * ``markdown``: ``- [YYYY-mm-dd HH:MM:SS] **<agent_id>**: <content>`` (``**System**`` without
      an agent; the item's time in UTC).

    Raises:
        ValidationError: an unknown ``fmt``.
    """
    fmt = format_type(fmt)
    items = list(items)
    if fmt == "json":
        return json.dumps([i.to_dict() for i in items], indent=2)
    lines = []
    for i in items:
        if fmt == "markdown":
            agent = f"**{i.agent_id}**" if i.agent_id else "**System**"
            lines.append(f"- [{i.timestamp.strftime('%Y-%m-%d %H:%M:%S')}] {agent}: {i.content}")
        else:
            lines.append(f"[{i.agent_id}]: {i.content}" if i.agent_id else i.content)
    return "\n".join(lines)


def item_statistics(conn: Connection, rows: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """calute's statistics keys counted in one SQL statement over ``rows``.

    Args:
        rows: a ``SELECT`` of :data:`ROW_COLUMNS` over the store's rows (aliased ``n``).
        params: its bound values.

    Returns:
        ``total_items``, ``memory_types`` (memory_type -> count; ``{}`` when empty),
        ``unique_agents``, ``unique_users``, ``unique_conversations`` (distinct non-empty ids
        among the items; an item's user is its metadata ``user_id``, else the tenant, as
        :func:`~cortex_pg.compat.memory_item.item_from_note` reports it).
    """
    with translate_db_errors():
        row = conn.execute(text(STATISTICS.format(rows=rows)), dict(params)).mappings().one()
    return {
        "total_items": int(row["total_items"]),
        "memory_types": {k: int(v) for k, v in (row["memory_types"] or {}).items()},
        "unique_agents": int(row["unique_agents"]),
        "unique_users": int(row["unique_users"]),
        "unique_conversations": int(row["unique_conversations"]),
    }
