"""docs/sql.md runs as written, and the SQL search gives the Python API's rankings."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from cortex_pg.entities import EntityMemory
from cortex_pg.store import MemoryStore

DOC = Path(__file__).resolve().parents[1] / "docs" / "sql.md"
NOW = datetime(2024, 6, 30, 12, 0, tzinfo=UTC)


def _blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _statements(block: str) -> list[str]:
    body = "\n".join(line for line in block.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


@pytest.fixture
def alice(db_url):
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
    s.close()  # creates the cortex_app role used by the RLS example
    s = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
    ids = s.add_many(
        [
            {
                "content": "I parked the car in the airport garage, level 3",
                "tags": ["car"],
                "importance": 0.4,
                "time": NOW - timedelta(days=40),
            },
            {
                "content": "Team meeting: we moved the launch to July",
                "tags": ["work"],
                "importance": 0.8,
                "time": NOW - timedelta(days=2),
                "category": "work",
            },
            {
                "content": "Budget meeting with finance about the car fleet",
                "tags": ["work", "car"],
                "importance": 0.6,
                "time": NOW - timedelta(days=20),
                "metadata": {"mood": "calm"},
            },
            {"content": "Alice likes green tea", "tags": ["tea"], "time": NOW - timedelta(days=5)},
        ],
        user_id="alice",
    )
    s.update(ids[0], user_id="alice", content="I parked the car in the airport garage, level 3B")
    s.update(ids[0], user_id="alice", links={ids[2]: {"type": "related", "strength": 0.8, "reason": "car"}})
    s.set_links(ids[2], {ids[1]: {"type": "extends", "strength": 0.9, "reason": "meetings"}}, user_id="alice")
    EntityMemory(s, user_id="alice").save("Alice works at Acme Corp. Alice knows Bob.")
    yield s, ids
    s.close()


def test_every_sql_block_runs(alice, db_url):
    u = make_url(db_url)
    conninfo = {
        "dbname": u.database,
        "user": u.username,
        "host": u.host or u.query.get("host"),
        "port": u.port,
    }
    conninfo = {k: v for k, v in conninfo.items() if v is not None}
    blocks = _blocks()
    assert len(blocks) >= 7
    outputs: list[list[tuple]] = []
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        for block in blocks:
            for stmt in _statements(block):
                cur = conn.execute(stmt)
                outputs.append(cur.fetchall() if cur.description else [])
    flat = [row for rows in outputs for row in rows]
    text_of = " ".join(str(r) for r in flat)
    assert "airport garage" in text_of  # the searches found the notes
    assert "boiler service" in text_of  # a note inserted from SQL is searchable at once
    assert "Acme Corp" in text_of and "works_at" in text_of  # entity graph
    assert ("alice",) in flat  # RLS example: only alice


def test_sql_and_python_rankings_are_identical(alice):
    store, _ = alice
    for query, kwargs in [
        ("car meeting", {}),
        ("meeting", {"temporal_weight": 0.7}),
        ("car", {"where_filter": {"tags": {"$contains": "car"}}}),
        ("work launch", {"memory_source": "ltm"}),
    ]:
        py = [r.id for r in store.search(query, user_id="alice", now=NOW, touch=False, **kwargs)]
        vec = store.embedder.embed([query])[0]
        lit = "[" + ",".join(repr(x) for x in vec) + "]"
        with store.engine.connect() as conn:
            sql_ids = [
                str(x)
                for x in conn.execute(
                    text(
                        "SELECT id FROM cortex.search_notes(:u, CAST(:v AS vector), :q, 10, "
                        "p_temporal_weight => CAST(:w AS real), p_now => :now, "
                        "p_filter => CAST(:f AS jsonb), p_memory_source => :src)"
                    ),
                    {
                        "u": "alice",
                        "v": lit,
                        "q": query,
                        "w": kwargs.get("temporal_weight", 0.0),
                        "now": NOW,
                        "f": None
                        if "where_filter" not in kwargs
                        else __import__("json").dumps(kwargs["where_filter"]),
                        "src": kwargs.get("memory_source", "all"),
                    },
                ).scalars()
            ]
        assert py == sql_ids, query
        assert py


def test_linked_notes_and_stm_recent_from_sql(alice):
    store, ids = alice
    with store.engine.connect() as conn:
        walk = conn.execute(
            text("SELECT id, hops FROM cortex.linked_notes('alice', :n, 2, 0.0) ORDER BY hops"), {"n": ids[0]}
        ).all()
        recent = (
            conn.execute(text("SELECT content FROM cortex.stm_recent('alice', 'default', 2)")).scalars().all()
        )
    assert [(str(i), h) for i, h in walk][:2] == [(ids[2], 1), (ids[1], 2)]
    with store.engine.connect() as conn:
        short = conn.execute(
            text("SELECT id, hops FROM cortex.linked_notes(CAST(:n AS uuid), 2) ORDER BY hops"), {"n": ids[0]}
        ).all()
    assert short == walk
    assert len(recent) == 2
