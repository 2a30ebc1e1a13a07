"""Every hot statement routes to one shard on Citus: it has an equality on user_id.

Citus sends a statement to a single shard when, after constant folding, each distributed
table it reads is restricted by ``user_id = <constant or parameter>`` (tables co-located, so
joins on user_id stay on the shard). Checked here on plain PostgreSQL, where the planner
folds the same way:

- Statements of the package: a scenario (add, add_many, get, touch, update, search with
  filters, entities and links, links, linked notes, entity BFS, context stack, history,
  delete) runs with a ``before_cursor_execute`` hook that captures each statement and its
  parameters; each one that touches a distributed table is then planned with
  ``EXPLAIN (FORMAT JSON)`` and the same parameters, and every scan of a distributed table
  must carry ``user_id = '<value>'`` in its index condition, recheck or filter. Inserts
  route by the inserted row's user_id; reference tables route anywhere.
- SQL functions (their inner statements are not captured by the hook): the bodies of the
  tenant functions are read from the catalog, and every reference to a distributed table
  must be tied to the user argument by a chain of ``x.user_id = y.user_id`` equalities.

Known exceptions are listed with their reason and the change that fixes them
(docs/scale-out.md, "Routing").
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from sqlalchemy import event, text

from cortex_pg.db import distribution
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore

DIST = set(distribution.DISTRIBUTED_TABLES)
TABLE_RE = re.compile(r"\bcortex\.(" + "|".join(sorted(DIST, key=len, reverse=True)) + r")\b")
FUNC_RE = re.compile(r"\bcortex\.(" + "|".join(distribution.TENANT_FUNCTIONS) + r")\s*\(")
EQ_CONST = re.compile(r"\buser_id = ('(?:[^']|'')*'::text|\$\d+)|('(?:[^']|'')*'::text|\$\d+) = \S*user_id\b")

#: Statements of the package that do not route to one shard, with the reason and the fix.
KNOWN_FANOUT = {
    "WHERE id = ANY(CAST(%(ids)s AS uuid[]))": "the global id check of caller-given ids reads every "
    "tenant; replaced by the note_ids reference table (a primary-key lookup on one node)",
    "AS k(user_id, session_id, content_hash)": "FIND_EXISTING (dedup before embedding) joins the "
    "batch's users as an array: multi-shard even for one user; pass the user as a scalar "
    "(`n.user_id = :user_id`) when the batch has one user (add, add_many for one user)",
    "PARTITION BY t.user_id, t.session_id": "TRIM_STM takes the batch's users as an array: same "
    "change as FIND_EXISTING",
    "WHERE m.user_id = e.user_id AND m.entity_id = e.id": "entity lookup: the mentions subquery is "
    "correlated on e.user_id (co-located, Citus can push it down with the outer filter); make it "
    "explicit with `m.user_id = :user_id`",
}


def _capture(engine):
    seen: list[tuple[str, object]] = []

    def hook(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001, ARG001
        params = parameters[0] if executemany and parameters else parameters
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", hook)
    return seen, hook


def _scenario(store: MemoryStore) -> None:
    from cortex_pg.compat.calute import ContextualMemory
    from cortex_pg.entities.repository import EntityStore
    from cortex_pg.evolution import linked_notes, set_links

    a = store.add(
        "Alice works at Acme Corp in Berlin.",
        user_id="alice",
        session_id="s1",
        time=datetime(2024, 5, 1, tzinfo=UTC),
        tags=["work"],
    )
    ids = store.add_many(
        [
            {"content": "Bob met Alice at Acme Corp.", "tags": ["meeting"]},
            {"content": "Acme Corp moved to Munich.", "metadata": {"kind": "news"}},
            {"content": "Alice likes hiking in the Alps."},
        ],
        user_id="alice",
        session_id="s1",
    )
    store.add("Carol keeps her own notes.", user_id="carol")
    store.get(a, user_id="alice")
    store.get(ids[0], user_id="alice", touch=True)
    store.update(ids[2], user_id="alice", content="Alice likes hiking and skiing in the Alps.")
    set_links(
        store, a, {ids[0]: {"type": "supports", "strength": 0.8, "reason": "same company"}}, user_id="alice"
    )
    linked_notes(store, a, user_id="alice", depth=2)
    store.search("Acme", user_id="alice")
    store.search(
        "where does Alice work",
        user_id="alice",
        where_filter={"tags": {"$contains": "work"}},
        date_from="2024-01-01",
        date_to="2025-01-01",
        memory_source="ltm",
        context="work",
    )
    store.search("Acme Corp", user_id="alice", entities=True, expand_entities=True, include_links=True)
    entities = EntityStore(store.engine)
    entities.entity("alice", "Acme Corp")
    entities.related_entities("alice", "Alice", 2)
    ctx = ContextualMemory(store=store, user_id="alice", session_id="s1")
    ctx.push_context("task", {"name": "report"})
    ctx.get_current_context()
    ctx.pop_context()
    store.history(ids[2], user_id="alice")
    store.count(user_id="alice")
    store.delete(ids[1], user_id="alice")


def _scans(node: dict, out: list[dict]) -> list[dict]:
    out.append(node)
    for child in node.get("Plans", []):
        _scans(child, out)
    return out


def _routing_problems(plan: dict) -> list[str]:
    problems = []
    for node in _scans(plan, []):
        rel = node.get("Relation Name")
        if rel not in DIST or node["Node Type"] == "ModifyTable":
            continue  # inserts route by the row's user_id; updates/deletes are checked on their scans
        conds = " ".join(str(node.get(k, "")) for k in ("Index Cond", "Recheck Cond", "Filter", "TID Cond"))
        conds += " ".join(str(c.get("Index Cond", "")) for c in node.get("Plans", []))
        if not EQ_CONST.search(conds):
            problems.append(f"{node['Node Type']} on {rel} without user_id = constant: {conds.strip()!r}")
    return problems


def test_hot_statements_have_an_equality_on_user_id(db_url):
    store = MemoryStore.open(
        db_url, embedder=HashingEmbedder(), auto_migrate=False, extract_entities=True, enqueue_evolution=True
    )
    try:
        seen, hook = _capture(store.engine)
        _scenario(store)
        event.remove(store.engine, "before_cursor_execute", hook)
        checked, failing = 0, {}
        raw = store.engine.raw_connection()
        try:
            cur = raw.cursor()
            for statement, params in seen:
                if not (TABLE_RE.search(statement) or FUNC_RE.search(statement)):
                    continue
                cur.execute("EXPLAIN (FORMAT JSON) " + statement, params or None)
                plan = cur.fetchone()[0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                checked += 1
                problems = _routing_problems(plan[0]["Plan"])
                if problems:
                    failing[statement] = problems
            raw.rollback()
        finally:
            raw.close()
    finally:
        store.close()
    assert checked >= 25, checked  # the scenario reached the hot paths
    touched = " ".join(s for s, _ in seen)
    for needle in (
        "cortex.search_notes(",
        "cortex.linked_notes(",
        "cortex.related_entities(",
        "cortex.context_push(",
        "cortex.context_pop(",
        "cortex.touch_notes(",
        "INSERT INTO cortex.notes",
        "DELETE FROM cortex.notes",
        "UPDATE cortex.notes",
        "INSERT INTO cortex.embeddings",
    ):
        assert needle in touched, needle
    unexplained = {s: p for s, p in failing.items() if not any(k in s for k in KNOWN_FANOUT)}
    assert unexplained == {}, json.dumps(unexplained, indent=1)


ALIAS_STOP = {
    "where",
    "join",
    "on",
    "set",
    "using",
    "select",
    "values",
    "returning",
    "group",
    "order",
    "limit",
    "left",
    "inner",
    "cross",
    "union",
    "as",
    "for",
    "and",
    "or",
    "into",
    "from",
    "when",
    "then",
    "natural",
    "full",
    "right",
    "lateral",
    "with",
    "default",
}
REF_RE = re.compile(r"\b(insert\s+into\s+)?cortex\.(\w+)\b(?:\s+(?:as\s+)?([a-z_]\w*))?")
EQ_RE = re.compile(r"(?:\b([a-z_]\w*)\.)?user_id\s*=\s*(?:([a-z_]\w*)\.user_id|(p_user_id|\$1)\b)")
EQ_REV_RE = re.compile(r"(?:(p_user_id|\$1))\s*=\s*(?:([a-z_]\w*)\.)?user_id\b")


def unrouted_references(body: str) -> list[str]:
    """References to distributed tables in a function body not tied to the user argument."""
    body = re.sub(r"--[^\n]*", "", body.lower())
    body = re.sub(r"'(?:[^']|'')*'", "''", body)  # string literals name no table
    edges: dict[str, set[str]] = {}

    def link(x: str, y: str) -> None:
        edges.setdefault(x, set()).add(y)
        edges.setdefault(y, set()).add(x)

    for m in EQ_RE.finditer(body):
        left = m.group(1) or "<bare>"
        link(left, m.group(2) or "<user>")
    for m in EQ_REV_RE.finditer(body):
        link(m.group(2) or "<bare>", "<user>")
    anchored, todo = set(), ["<user>"]
    while todo:
        x = todo.pop()
        if x not in anchored:
            anchored.add(x)
            todo.extend(edges.get(x, ()))
    missing = []
    for m in REF_RE.finditer(body):
        insert, table, alias = m.groups()
        if table not in DIST or insert:
            continue  # inserts route by the inserted user_id
        if alias is None or alias in ALIAS_STOP:
            alias = "<bare>"
        if alias not in anchored:
            missing.append(f"cortex.{table} {alias}")
    return missing


def test_tenant_function_bodies_filter_on_the_user_argument(db_url):
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p "
                    "JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = 'cortex' AND p.proname = ANY(:names) AND 'p_user_id' = ANY(p.proargnames)"
                ),
                {"names": list(distribution.TENANT_FUNCTIONS)},
            ).all()
    finally:
        store.close()
    names = {sig.split("(")[0] for sig, _ in rows}
    assert {
        "cortex.search_notes",
        "cortex.linked_notes",
        "cortex.related_entities",
        "cortex.context_pop",
    } <= names
    refs = sum(1 for _, b in rows for m in REF_RE.finditer(b.lower()) if m.group(2) in DIST)
    assert refs >= 15, refs  # the check saw the bodies' table references
    problems = {sig: unrouted_references(body) for sig, body in rows}
    assert {k: v for k, v in problems.items() if v} == {}


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ("SELECT * FROM cortex.notes n WHERE n.id = p_id", ["cortex.notes n"]),
        (
            "SELECT * FROM cortex.notes n JOIN cortex.embeddings e ON e.note_id = n.id "
            "WHERE n.user_id = p_user_id",
            ["cortex.embeddings e"],
        ),
        ("DELETE FROM cortex.context_frames WHERE scope = p_scope", ["cortex.context_frames <bare>"]),
        (
            "SELECT * FROM cortex.notes n JOIN cortex.embeddings e ON e.user_id = n.user_id "
            "WHERE n.user_id = p_user_id",
            [],
        ),
        ("INSERT INTO cortex.note_history (user_id) VALUES (p_user_id)", []),
        ("SELECT * FROM cortex.embedding_models m WHERE m.active", []),
    ],
)
def test_the_body_check_finds_a_missing_user_filter(body, missing):
    assert unrouted_references(body) == missing
