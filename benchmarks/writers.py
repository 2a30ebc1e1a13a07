"""Concurrent writers: P processes x N ``add`` calls against T threads x N, on one database.

Separates start-up (open: server attach, schema check, model registration, embedder load)
from the adds, and prints figures (seconds, adds per second). Default embedder: hashing, so
model start-up is not measured; ``--embedder minilm`` adds it.

    .venv/bin/python benchmarks/writers.py --processes 2 --threads 4 --adds 200 [--url URL]

With no URL (and no DATABASE_URL) a temporary embedded server is used.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
import time

from _database import database_url

from cortex_pg.store import MemoryStore


def _writer(url: str, embedder: str, tag: str, adds: int, same_scope: bool, out) -> None:  # noqa: ANN001
    t0 = time.perf_counter()
    store = MemoryStore.open(url, embedder=embedder, auto_migrate=True)
    opened = time.perf_counter()
    for i in range(adds):
        session = "shared" if same_scope else tag
        store.add(
            f"note {i} written by {tag}: the quick brown fox {i * 7}", user_id="bench", session_id=session
        )
    done = time.perf_counter()
    store.close()
    out.put((tag, opened - t0, done - opened))


def run(url: str, embedder: str, processes: int, threads: int, adds: int, same_scope: bool) -> None:
    MemoryStore.open(url, embedder=embedder, auto_migrate=True).close()  # migrate once
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    t0 = time.perf_counter()
    procs = [
        ctx.Process(target=_writer, args=(url, embedder, f"p{i}", adds, same_scope, q))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    startup = max(r[1] for r in results)
    writing = max(r[2] for r in results)
    total = processes * adds
    print(
        f"{processes} processes x {adds} adds: wall {wall:.1f} s (start-up {startup:.1f} s, adds {writing:.1f} s, "
        f"{total / writing:.0f} adds/s)"
    )

    import queue as _q

    tq: _q.Queue = _q.Queue()
    t0 = time.perf_counter()
    ts = [
        threading.Thread(target=_writer, args=(url, embedder, f"t{i}", adds, same_scope, tq))
        for i in range(threads)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    results = [tq.get() for _ in ts]
    writing = max(r[2] for r in results)
    print(
        f"{threads} threads x {adds} adds: wall {wall:.1f} s (adds {writing:.1f} s, "
        f"{threads * adds / writing:.0f} adds/s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    ap.add_argument("--embedder", default="hashing")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--adds", type=int, default=200)
    ap.add_argument("--same-scope", action="store_true", help="every writer adds to one user and session")
    args = ap.parse_args()
    with database_url(args.url, prefix="cortex-bench-") as url:
        run(url, args.embedder, args.processes, args.threads, args.adds, args.same_scope)


if __name__ == "__main__":
    main()
