"""Shared checks of calute's ``Memory`` base contract, and a second process on the same database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.compat.memory_item import MemoryItem

STATISTICS_KEYS = {
    "total_items",
    "max_items",
    "memory_types",
    "unique_agents",
    "unique_users",
    "unique_conversations",
}
NOT_IDS = ["nonexistent", "00000000-0000-0000-0000-000000000000", str(uuid.uuid4()), 42]


def run_child(db_url: str, body: str) -> None:
    """Run ``body`` in a second Python process with ``store`` open on ``db_url`` (hashing embedder)."""
    script = (
        "from cortex_pg.embeddings import HashingEmbedder\n"
        "from cortex_pg.store import MemoryStore\n"
        f"store = MemoryStore.open({db_url!r}, embedder=HashingEmbedder(), auto_migrate=False)\n"
        + textwrap.dedent(body)
        + "\nstore.close()\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run(
        [sys.executable, "-c", script], check=True, env={**os.environ, "PYTHONPATH": root}, timeout=180
    )


def check_get_context(memory, expected: list[tuple[str | None, str]]) -> None:
    """``get_context`` in calute's three formats equals the rendering of ``expected``
    (``(agent_id, content)`` of the newest items, oldest first), and bad arguments raise."""
    text = memory.get_context()
    assert text == "\n".join(f"[{a}]: {c}" if a else c for a, c in expected)
    data = json.loads(memory.get_context(format_type="json"))
    assert isinstance(data, list) and [(d["agent_id"], d["content"]) for d in data] == expected
    for d in data:
        assert MemoryItem.from_dict(d).content == d["content"]
    lines = memory.get_context(format_type="markdown").split("\n") if expected else []
    assert len(lines) == len(expected)
    for line, (a, c), d in zip(lines, expected, data, strict=True):
        stamp = datetime.fromisoformat(d["timestamp"]).strftime("%Y-%m-%d %H:%M:%S")
        assert line == f"- [{stamp}] **{a or 'System'}**: {c}"
    if expected:
        assert memory.get_context(limit=1) == text.split("\n")[-1]  # the newest one
    for bad in ({"limit": 0}, {"limit": "3"}, {"format_type": "yaml"}):
        with pytest.raises(ValidationError) as err:
            memory.get_context(**bad)
        assert err.value.field == next(iter(bad))


def check_statistics(stats: dict, *, total: int, types: dict, agents: int, users: int, convs: int) -> None:
    assert set(stats) >= STATISTICS_KEYS
    assert stats["total_items"] == total and stats["memory_types"] == types
    assert (stats["unique_agents"], stats["unique_users"], stats["unique_conversations"]) == (
        agents,
        users,
        convs,
    )


def check_unknown_ids(memory, *others: str) -> None:
    """calute's answers for an id that names no item of ``memory`` (malformed, unknown, or
    ``others``: ids of items elsewhere): None, False, 0 — never an exception."""
    before = len(memory)
    for bad in [*NOT_IDS, *others]:
        assert memory.retrieve(memory_id=bad) is None, bad
        assert memory.update(bad, {}) is False, bad
        assert memory.update(bad, {"content": "changed"}) is False, bad
        assert memory.delete(memory_id=bad) == 0, bad
    assert len(memory) == before


def check_filter_errors(call) -> None:
    """Filters that could only match nothing because of how they are written raise a
    ValidationError naming ``filters`` and the offending part."""
    cases = [
        ({"year": {"gte": 2022}}, "filters.year.gte"),
        ({"$bogus": 1}, "unknown operator $bogus"),
        ({"or": [{"agent_id": "a"}, {"agent_id": "b"}]}, "$or"),
        ({"year": {"$gte": 2020, "$lt": "2023"}}, "a number and with a string"),
        ({"year": {"$gte": "2022"}}, "write 2022 without quotes"),
        ({"year": {"$gt": 5, "$lt": 3}}, "is empty"),
        ({"memory_type": ["a", "b"]}, "use $in"),
        ({"memory_id": "not-a-uuid"}, "not a memory id"),
        ("agent_id=a", "must be a dict"),
    ]
    for flt, fragment in cases:
        with pytest.raises(ValidationError) as err:
            call(flt)
        assert err.value.field == "filters", (flt, err.value)
        assert fragment in str(err.value), (flt, str(err.value))


def check_context_embeddings(store: Any, user_id: str) -> int:
    """Every current LTM note of ``user_id`` holds the context embedding the store computes from
    scratch (the embedding of its session predecessor's content, a newline and its own) when it
    has a predecessor, and no context row (of any model) when it is the first of its session.
    Returns the number of notes with a context embedding."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                """
                SELECT n.id, p.content || E'\\n' || n.content AS context_text,
                       (SELECT e.embedding::text FROM cortex.embeddings e
                        WHERE e.user_id = n.user_id AND e.note_id = n.id AND e.kind = 'context'
                          AND e.model = :m) AS stored,
                       (SELECT count(*) FROM cortex.embeddings e
                        WHERE e.user_id = n.user_id AND e.note_id = n.id AND e.kind = 'context') AS rows
                FROM cortex.notes n
                LEFT JOIN LATERAL (
                    SELECT m.content FROM cortex.notes m
                    WHERE m.user_id = n.user_id AND m.session_id = n.session_id AND m.merged_into IS NULL
                      AND (m.created_at, m.seq) < (n.created_at, n.seq)
                    ORDER BY m.created_at DESC, m.seq DESC LIMIT 1) p ON true
                WHERE n.user_id = :u AND n.merged_into IS NULL
                """
            ),
            {"u": user_id, "m": store.embedder.name},
        ).all()
    first = [str(r.id) for r in rows if r.context_text is None and r.rows]
    assert first == [], f"notes first of their session keep a context embedding: {first}"
    have = [r for r in rows if r.context_text is not None]
    assert all(r.rows == 1 for r in have), "a note with a predecessor has one context row"
    if have:
        expected = store.embedder.embed([r.context_text for r in have])
        for r, want in zip(have, expected, strict=True):
            got = np.array([float(x) for x in r.stored.strip("[]").split(",")])
            assert np.allclose(got, want, atol=1e-6), f"stale context embedding of {r.id}: {r.context_text!r}"
    return len(have)
