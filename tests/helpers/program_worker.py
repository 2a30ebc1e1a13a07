"""The standing program's worker: one process running a seeded mix of operations on
overlapping users, recording what it was acknowledged (run by tests/test_program.py)."""

from __future__ import annotations

import random
import traceback
from typing import Any

USERS = ("alice", "bob", "carol")
SESSIONS = ("s1", "s2")
NAMES = ("Alice Smith", "Bob Jones", "Paris", "Acme Corp", "Berlin")
STM_CAPACITY = 5


def _content(worker: int, n: int, rng: random.Random) -> str:
    a, b = rng.sample(NAMES, 2)
    return f"Worker {worker} op {n}: {a} met {b} to talk about project {rng.randint(0, 10**6)}"


def run(url: str, worker: int, ops: int, seed: int) -> dict[str, Any]:
    """Run ``ops`` operations; returns the acknowledged effects and every exception (as text)."""
    from cortex_pg.compat.calute.contextual import ContextualMemory
    from cortex_pg.embeddings import HashingEmbedder
    from cortex_pg.store import MemoryStore

    rng = random.Random(seed)
    store = MemoryStore.open(
        url, embedder=HashingEmbedder(), auto_migrate=False, stm_capacity=STM_CAPACITY, extract_entities=True
    )
    contexts = {u: ContextualMemory(store=store, user_id=u, stack_scope="shared") for u in USERS}
    live: dict[str, str] = {}  # note id -> user
    out: dict[str, Any] = {"added": {}, "deleted": [], "pushed": {}, "popped": {}, "errors": [], "ops": {}}
    n = 0

    def add() -> None:
        user = rng.choice(USERS)
        nid = store.add(_content(worker, n, rng), user_id=user, session_id=rng.choice(SESSIONS))
        live[nid] = user
        out["added"][nid] = user

    def add_many() -> None:
        user = rng.choice(USERS)
        items = [
            {"content": _content(worker, n * 10 + k, rng), "session_id": rng.choice(SESSIONS)}
            for k in range(3)
        ]
        for nid in store.add_many(items, user_id=user):
            live[nid] = user
            out["added"][nid] = user

    def search() -> None:
        store.search(rng.choice(NAMES), user_id=rng.choice(USERS), limit=5)

    def update() -> None:
        if live:
            nid = rng.choice(sorted(live))
            store.update(nid, user_id=live[nid], importance=rng.random(), tags=[f"t{n}"])

    def delete() -> None:
        if live:
            nid = rng.choice(sorted(live))
            assert store.delete(nid, user_id=live.pop(nid))
            out["deleted"].append(nid)

    def push() -> None:
        user = rng.choice(USERS)
        contexts[user].push_context("task", {"worker": worker, "n": n})
        out["pushed"][user] = out["pushed"].get(user, 0) + 1

    def pop() -> None:
        user = rng.choice(USERS)
        if contexts[user].pop_context() is not None:
            out["popped"][user] = out["popped"].get(user, 0) + 1

    table = [(add, 4), (add_many, 2), (search, 3), (update, 2), (delete, 1), (push, 1), (pop, 1)]
    fns = [f for f, _ in table]
    weights = [w for _, w in table]
    for n in range(ops):  # noqa: B007 - the operations read n (closures)
        fn = rng.choices(fns, weights)[0]
        out["ops"][fn.__name__] = out["ops"].get(fn.__name__, 0) + 1
        try:
            fn()
        except Exception:  # noqa: BLE001 - the program counts every escaped exception
            out["errors"].append(f"{fn.__name__}: {traceback.format_exc(limit=3)}")
    store.close()
    return out
