"""The standing program's worker: one process running a seeded mix of operations over every
public entry point on overlapping users, recording what each operation acknowledged.

The operations are a table (:data:`TABLE`: entry point, name, weight), one method each:

* ``api``: :class:`MemoryStore` ``add``, ``add_many``, ``search``, ``get``, ``update`` (with
  links), ``delete``;
* ``facade``: calute ``ContextualMemory`` push/pop, ``ShortTermMemory`` save and search,
  ``EntityMemory.save``, ``AgenticMemorySystem.search``;
* ``cli``: ``cortex-pg add``, ``ingest``, ``search``, ``get`` and ``delete``, each a
  subprocess (``python -m cortex_pg``) on the same database, STM capacity and embedder;
* ``sql``: ``cortex.search_notes``, ``linked_notes``, ``related_entities``, ``stm_recent``,
  ``context_push`` and ``context_pop``, called as plain SQL.

A process first runs every operation of the table once (in a seeded order; the CLI's, a
Python start-up each, in process 0 only), then draws the rest by weight. Reads check what they can at once (every row belongs to the tenant asked,
STM within capacity); any exception, failed check included, is recorded, never raised.
Retries of the API (deadlocks, serialization failures: :mod:`cortex_pg.db.retry`) are counted
from its log. :mod:`tests.helpers.program` runs the processes and checks the database.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import text

from cortex_pg.documents import chunk_text

USERS = ("alice", "bob", "carol")
SESSIONS = ("s1", "s2")
NAMES = ("Alice Smith", "Bob Jones", "Paris", "Acme Corp", "Berlin")
STM_CAPACITY = 5
STACK_SCOPE = "shared"  # the context stack every process pushes to, per user (facade and SQL)
ROOT = Path(__file__).resolve().parents[2]

#: (entry point, operation, weight): the program's operations and how often each is drawn
TABLE: tuple[tuple[str, str, float], ...] = (
    ("api", "add", 4),
    ("api", "add_many", 2),
    ("api", "search", 3),
    ("api", "get", 1),
    ("api", "update", 2),
    ("api", "delete", 1),
    ("facade", "push", 1),
    ("facade", "pop", 1),
    ("facade", "stm_save", 1),
    ("facade", "stm_search", 1),
    ("facade", "entity_save", 1),
    ("facade", "prem_search", 1),
    ("cli", "cli_add", 0.1),
    ("cli", "cli_ingest", 0.1),
    ("cli", "cli_search", 0.1),
    ("cli", "cli_get", 0.1),
    ("cli", "cli_delete", 0.1),
    ("sql", "sql_search", 1),
    ("sql", "sql_linked_notes", 0.5),
    ("sql", "sql_related_entities", 0.5),
    ("sql", "sql_stm_recent", 0.5),
    ("sql", "sql_push", 0.5),
    ("sql", "sql_pop", 0.5),
)
ENTRY_POINT = {name: kind for kind, name, _ in TABLE}


class _RetryCounter(logging.Handler):
    """Counts the retry records of :mod:`cortex_pg.db.retry`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class Worker:
    """One process of the program: a store, the facades on it, and what was acknowledged."""

    def __init__(self, url: str, worker: int, seed: int) -> None:
        from cortex_pg.compat.calute.contextual import ContextualMemory
        from cortex_pg.compat.prem import AgenticMemorySystem
        from cortex_pg.embeddings import HashingEmbedder
        from cortex_pg.store import MemoryStore

        self.url, self.worker, self.n = url, worker, 0
        self.rng = random.Random(seed)
        self.store = MemoryStore.open(
            url,
            embedder=HashingEmbedder(),
            auto_migrate=False,
            stm_capacity=STM_CAPACITY,
            extract_entities=True,
        )
        self.contexts = {
            u: ContextualMemory(
                store=self.store, user_id=u, stack_scope=STACK_SCOPE, short_term_capacity=STM_CAPACITY
            )
            for u in USERS
        }
        self.prem = AgenticMemorySystem(store=self.store, enable_background_processing=False)
        self.live: dict[str, str] = {}  # LTM note id -> user, of this worker's notes
        self.out: dict[str, Any] = {
            "added": {},
            "deleted": [],
            "pushed": Counter(),
            "popped": Counter(),
            "errors": [],
            "ops": Counter(),
            "retries": 0,
            "cli_calls": 0,
        }

    # ------------------------------------------------------------------ helpers
    def content(self, k: int = 0) -> str:
        a, b = self.rng.sample(NAMES, 2)
        return f"Worker {self.worker} op {self.n}.{k}: {a} met {b} to talk about project {self.rng.randint(0, 10**6)}"

    def scope(self) -> tuple[str, str]:
        return self.rng.choice(USERS), self.rng.choice(SESSIONS)

    def added(self, nid: str, user: str) -> None:
        self.live[nid] = user
        self.out["added"][nid] = user

    def pick(self) -> tuple[str, str] | None:
        """One of this worker's live LTM notes (id, user), or None."""
        if not self.live:
            return None
        nid = self.rng.choice(sorted(self.live))
        return nid, self.live[nid]

    def forget(self, nid: str) -> None:
        del self.live[nid]
        self.out["deleted"].append(nid)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Run ``cortex-pg`` on this database; a non-zero exit is an error of the operation."""
        env = {**os.environ, "CORTEX_PG_STM_CAPACITY": str(STM_CAPACITY), "COLUMNS": "200"}
        env.pop("DATABASE_URL", None)
        self.out["cli_calls"] += 1
        done = subprocess.run(
            [sys.executable, "-m", "cortex_pg", "--database-url", self.url, "--embedder", "hashing", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"cortex-pg {args[0]} exited {done.returncode}: {done.stderr.strip()}"
        return done

    def sql(self, statement: str, **params: Any) -> list[Any]:
        with self.store.engine.begin() as conn:
            return list(conn.execute(text(statement), params).all())

    @staticmethod
    def only_tenant(users: list[str], user: str, what: str) -> None:
        assert set(users) <= {user}, f"{what} for {user!r} returned rows of {sorted(set(users) - {user})}"

    # ------------------------------------------------------------------ api
    def add(self) -> None:
        user, session = self.scope()
        self.added(self.store.add(self.content(), user_id=user, session_id=session), user)

    def add_many(self) -> None:
        user = self.rng.choice(USERS)
        items = [{"content": self.content(k), "session_id": self.rng.choice(SESSIONS)} for k in range(3)]
        for nid in self.store.add_many(items, user_id=user):
            self.added(nid, user)

    def search(self) -> None:
        user = self.rng.choice(USERS)
        results = self.store.search(self.rng.choice(NAMES), user_id=user, limit=5)
        self.only_tenant([r.note.user_id for r in results], user, "search")

    def get(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            note = self.store.get(nid, user_id=user)
            assert (note.id, note.user_id) == (nid, user)

    def update(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            peers = sorted(i for i, u in self.live.items() if u == user and i != nid)
            links = {self.rng.choice(peers): {"type": "related", "strength": 0.8}} if peers else {}
            self.store.update(
                nid, user_id=user, importance=self.rng.random(), tags=[f"t{self.n}"], links=links
            )

    def delete(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            assert self.store.delete(nid, user_id=user)
            self.forget(nid)

    # ------------------------------------------------------------------ facades
    def push(self) -> None:
        user = self.rng.choice(USERS)
        self.contexts[user].push_context("task", {"worker": self.worker, "n": self.n})
        self.out["pushed"][user] += 1

    def pop(self) -> None:
        user = self.rng.choice(USERS)
        if self.contexts[user].pop_context() is not None:
            self.out["popped"][user] += 1

    def stm_save(self) -> None:
        from cortex_pg.compat.calute.short_term import ShortTermMemory

        user, session = self.scope()
        stm = ShortTermMemory(capacity=STM_CAPACITY, store=self.store, user_id=user, session_id=session)
        stm.save(self.content(), agent_id=f"w{self.worker}")  # STM only: no LTM note

    def stm_search(self) -> None:
        from cortex_pg.compat.calute.short_term import ShortTermMemory

        user, session = self.scope()
        stm = ShortTermMemory(capacity=STM_CAPACITY, store=self.store, user_id=user, session_id=session)
        items = stm.search(self.rng.choice(NAMES), limit=10)
        assert len(items) <= STM_CAPACITY, f"{len(items)} STM items in one scope"

    def entity_save(self) -> None:
        from cortex_pg.entities import EntityMemory

        user, session = self.scope()
        item = EntityMemory(store=self.store, user_id=user, session_id=session).save(self.content())
        self.added(item.memory_id, user)

    def prem_search(self) -> None:
        user = self.rng.choice(USERS)
        results = self.prem.search(self.rng.choice(NAMES), user_id=user, limit=5)
        self.only_tenant([r["user_id"] for r in results], user, "AgenticMemorySystem.search")

    # ------------------------------------------------------------------ cli
    def cli_add(self) -> None:
        user, session = self.scope()
        nid = self.cli("add", self.content(), "--user", user, "--session", session).stdout.strip()
        self.added(nid, user)

    def cli_ingest(self) -> None:
        user, session = self.scope()
        body = "\n\n".join(self.content(k) for k in range(2)) + "\n"
        chunks = sorted({c.text for c in chunk_text(body, size=1000)})  # what ingest stores
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
            f.write(body)
        try:
            out = self.cli(
                "ingest", f.name, "--user", user, "--session", session, "--chunk-size", "1000"
            ).stdout
        finally:
            os.unlink(f.name)
        said = re.search(r"(\d+) read, (\d+) new, (\d+) already stored", out)
        n = str(len(chunks))
        assert said and said.groups() == (n, n, "0"), out
        rows = self.sql(
            "SELECT id::text FROM cortex.notes WHERE user_id = :u AND session_id = :s AND content = ANY(:c)",
            u=user,
            s=session,
            c=chunks,
        )
        assert len(rows) == len(chunks), f"ingest acknowledged {n} new notes, {len(rows)} are stored"
        for (nid,) in rows:
            self.added(nid, user)

    def cli_search(self) -> None:
        user = self.rng.choice(USERS)
        found = json.loads(self.cli("search", self.rng.choice(NAMES), "--user", user, "--json").stdout)
        self.only_tenant([r["user_id"] for r in found], user, "cortex-pg search")

    def cli_get(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            note = json.loads(self.cli("get", nid, "--user", user, "--json").stdout)
            assert (note["id"], note["user_id"]) == (nid, user)

    def cli_delete(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            self.cli("delete", nid, "--user", user)
            self.forget(nid)

    # ------------------------------------------------------------------ sql
    def sql_search(self) -> None:
        user = self.rng.choice(USERS)
        rows = self.sql(
            "SELECT user_id FROM cortex.search_notes(:u, NULL, :q, 5)", u=user, q=self.rng.choice(NAMES)
        )
        self.only_tenant([r.user_id for r in rows], user, "cortex.search_notes")

    def sql_linked_notes(self) -> None:
        if (picked := self.pick()) is not None:
            nid, user = picked
            rows = self.sql(
                "SELECT i.user_id FROM cortex.linked_notes(:u, CAST(:id AS uuid), 2, 0) l "
                "JOIN cortex.note_ids i ON i.id = l.id",
                u=user,
                id=nid,
            )
            self.only_tenant([r.user_id for r in rows], user, "cortex.linked_notes")

    def sql_related_entities(self) -> None:
        user = self.rng.choice(USERS)
        rows = self.sql(
            "SELECT e.user_id FROM cortex.related_entities(:u, :name, 2) r "
            "JOIN cortex.entities e ON e.id = r.id",
            u=user,
            name=self.rng.choice(NAMES),
        )
        self.only_tenant([r.user_id for r in rows], user, "cortex.related_entities")

    def sql_stm_recent(self) -> None:
        user, session = self.scope()
        rows = self.sql("SELECT user_id, session_id FROM cortex.stm_recent(:u, :s, 50)", u=user, s=session)
        assert len(rows) <= STM_CAPACITY, f"{len(rows)} STM notes in one scope"
        assert {(r.user_id, r.session_id) for r in rows} <= {(user, session)}

    def sql_push(self) -> None:
        user = self.rng.choice(USERS)
        data = json.dumps({"worker": self.worker, "n": self.n, "via": "sql"})
        rows = self.sql(
            "SELECT depth FROM cortex.context_push(:u, :scope, 'task', CAST(:d AS jsonb))",
            u=user,
            scope=STACK_SCOPE,
            d=data,
        )
        assert len(rows) == 1 and rows[0].depth >= 1
        self.out["pushed"][user] += 1

    def sql_pop(self) -> None:
        user = self.rng.choice(USERS)
        if self.sql("SELECT depth FROM cortex.context_pop(:u, :scope)", u=user, scope=STACK_SCOPE):
            self.out["popped"][user] += 1

    # ------------------------------------------------------------------ the run
    def run(self, ops: int) -> dict[str, Any]:
        """Run ``ops`` operations: the table once (seeded order; CLI operations in worker 0
        only), then weighted draws."""
        names = [name for _, name, _ in TABLE]
        weights = [w for _, _, w in TABLE]
        once = [n for n in names if self.worker == 0 or ENTRY_POINT[n] != "cli"]
        first = self.rng.sample(once, len(once))
        counter = _RetryCounter()
        retry_log = logging.getLogger("cortex_pg.db.retry")
        retry_log.addHandler(counter)
        retry_log.setLevel(logging.INFO)
        try:
            for self.n in range(ops):
                name = first[self.n] if self.n < len(first) else self.rng.choices(names, weights)[0]
                self.out["ops"][name] += 1
                try:
                    getattr(self, name)()
                except Exception:  # noqa: BLE001 - the program counts every escaped exception
                    self.out["errors"].append(f"{name}: {traceback.format_exc(limit=4)}")
        finally:
            retry_log.removeHandler(counter)
            self.out["retries"] = counter.count
            self.prem.shutdown()
            self.store.close()
        return self.out


def run(url: str, worker: int, ops: int, seed: int) -> dict[str, Any]:
    """Run one worker process's ``ops`` operations (the entry point of a pool process);
    returns the acknowledged effects, every exception (as text) and the retry count."""
    return Worker(url, worker, seed).run(ops)
