"""The standing program: security.

* SQL is never assembled from input by string formatting: an AST scan of the package finds
  every statement built with an f-string, ``%``, ``.format`` or ``+`` that reaches
  ``text()``, ``execute()``, ``exec_driver_sql()`` or ``op.execute()``. Such a statement may
  only interpolate names that come from the code itself: UPPER_CASE module constants, loop
  variables over literal tuples, and the identifiers in :data:`CODE_DERIVED` (each with the
  reason it is not input). A function parameter (input) interpolated into SQL fails the test.
* no pickle for stored data; secrets never logged nor written to history; the embedded
  server listens on a Unix socket only.
"""

from __future__ import annotations

import ast
import logging
import os
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from tests.conftest import _libpq

PACKAGE = Path(__file__).resolve().parents[1] / "cortex_pg"
SQL_CALLS = {"text", "execute", "exec_driver_sql"}

# (module, name): why an interpolated name is code, not input
CODE_DERIVED = {
    ("store/changing.py", "set_sql"): "assignments of column names from the fixed UPDATABLE_FIELDS",
    ("store/changing.py", "table"): "loop over the literal pairs of tier and note table",
    ("store/writing.py", "quoted"): "index name read from cortex.embedding_models, quoted by the dialect",
    ("db/tenancy.py", "ident"): "psycopg.sql.Identifier of a role name checked to be alphanumeric",
    ("migrations/versions/0012_note_tsvector_prefix.py", "expr"): "one of two module constants",
    ("compat/calute/shelf.py", "self"): "self.table: TABLES[tier], a constant table name",
    ("compat/item_views.py", "rows"): "a SQL fragment of the shelf (constant per tier), not caller text",
    ("evolution/worker.py", "queue"): "queue.CHANNEL, a module constant",
    ("store/reading.py", "parts"): "SELECTs over the constant table map, one per literal tier",
    ("entities/memory.py", "entity_sql"): "entity_sql.ITEM_SESSIONS, a module constant",
    ("entities/memory.py", "where"): "self.WHERE, a class constant, and compile_where's SQL, compiled "
    "by cortex.compile_filter, which quotes every value",
    ("store/reading.py", "table"): "the constant tier -> table map",
}


def _formatted_names(node: ast.AST) -> set[str] | None:
    """Names interpolated into a formatted string expression; None when not formatted."""
    if isinstance(node, ast.JoinedStr):
        return {
            n.id
            for v in node.values
            if isinstance(v, ast.FormattedValue)
            for n in ast.walk(v)
            if isinstance(n, ast.Name)
        }
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
        if isinstance(node.op, ast.Add) and not any(
            isinstance(s, ast.Constant | ast.JoinedStr) for s in (node.left, node.right)
        ):
            return None
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return None


def _scan() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]} - {"self", "cls"}
            for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
                name = getattr(call.func, "attr", getattr(call.func, "id", None))
                if name not in SQL_CALLS or not call.args:
                    continue
                names = _formatted_names(call.args[0])
                if not names:
                    continue
                literal_loops = {
                    t.target.id
                    for t in ast.walk(fn)
                    if isinstance(t, ast.For | ast.comprehension)
                    and isinstance(t.target, ast.Name)
                    and (
                        (isinstance(t.iter, ast.Name) and t.iter.id.isupper())  # over a constant
                        or (
                            isinstance(t.iter, ast.Tuple | ast.List)
                            and all(isinstance(e, ast.Constant) for e in t.iter.elts)
                        )
                    )
                }
                for n in sorted(names - literal_loops - {"int", "float"}):
                    if n.isupper() or n in {"text", "str", "len", "sql"}:
                        continue
                    if (rel, n) in CODE_DERIVED:
                        continue
                    kind = "input (a parameter)" if n in params else "not known to be code"
                    problems.append(f"{rel}:{call.lineno} {fn.name}: {n} is {kind}")
    return problems


def test_no_sql_is_formatted_from_input():
    assert _scan() == []


def test_the_scan_catches_formatted_input(tmp_path, monkeypatch):
    bad = PACKAGE / "_scan_probe.py"
    bad.write_text("def f(conn, user):\n    conn.execute(text(f\"SELECT * FROM t WHERE u = '{user}'\"))\n")
    try:
        assert any("user is input" in p for p in _scan())
    finally:
        bad.unlink()


def test_no_pickle_in_the_package():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                mods = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(m.split(".")[0] in ("pickle", "cPickle", "dill", "shelve") for m in mods), path


def test_secrets_are_not_logged_or_written_to_history(db_url, caplog, monkeypatch):
    secret_key, secret_pw = "sk-test-do-not-log-1234567890", "pw-do-not-log-0987"
    monkeypatch.setenv("OPENAI_API_KEY", secret_key)
    url = make_url(db_url).set(password=secret_pw).render_as_string(hide_password=False)
    caplog.set_level(logging.DEBUG)
    store = MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
    nid = store.add("a note", user_id="u")
    store.update(nid, user_id="u", content="a changed note")
    store.delete(nid, user_id="u")
    store.close()
    assert secret_key not in caplog.text and secret_pw not in caplog.text
    with psycopg.connect(**_libpq(db_url)) as conn:
        dump = conn.execute(
            "SELECT coalesce(string_agg(h::text, ' '), '') FROM cortex.note_history h"
        ).fetchone()[0]
    assert dump and secret_key not in dump and secret_pw not in dump


def test_embedded_server_listens_on_a_unix_socket_only(server_url):
    if os.environ.get("CORTEX_PG_TEST_DSN") or os.environ.get("DATABASE_URL"):
        pytest.skip("an external server is configured")
    with psycopg.connect(**_libpq(server_url)) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""
        assert conn.execute("SELECT inet_server_addr()").fetchone()[0] is None  # a socket
