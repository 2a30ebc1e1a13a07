"""Concurrent searches: 100 asyncio tasks on one event loop (AsyncMemoryStore) against 10 threads
on the synchronous MemoryStore, same database, same queries.

Prints, per mode, the searches run, the wall time, searches per second, the median and 95th
percentile latency (ms), and the ratios async / threads. Default embedder: hashing (the database
does the work); ``--embedder minilm`` includes the model (in worker threads either way; the query
cache is off so each search embeds its query).

    .venv/bin/python benchmarks/async_concurrency.py [--notes 2000] [--rounds 3] [--url URL]

With no URL (and no DATABASE_URL) a temporary embedded server is used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from _database import database_url

from cortex_pg.store import MemoryStore
from cortex_pg.store.async_store import AsyncMemoryStore

USER = "bench"
TASKS = 100
THREADS = 10


def _queries(rounds: int) -> list[str]:
    return [f"note {i % 500} about topic {i % 37}" for i in range(TASKS * rounds)]


def _summary(name: str, latencies: list[float], wall: float) -> dict[str, float]:
    lat = sorted(latencies)
    row = {
        "searches": len(lat),
        "wall_s": wall,
        "per_s": len(lat) / wall,
        "p50_ms": statistics.median(lat) * 1000,
        "p95_ms": lat[int(0.95 * (len(lat) - 1))] * 1000,
    }
    print(
        f"{name:<26} {row['searches']:>6.0f} searches  {row['wall_s']:7.2f} s  {row['per_s']:8.1f} /s  "
        f"p50 {row['p50_ms']:7.1f} ms  p95 {row['p95_ms']:7.1f} ms"
    )
    return row


def run_threads(store: MemoryStore, queries: list[str]) -> dict[str, float]:
    def one(q: str) -> float:
        t0 = time.perf_counter()
        assert store.search(q, user_id=USER, limit=10, touch=False)
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        latencies = list(pool.map(one, queries))
    return _summary(f"sync, {THREADS} threads", latencies, time.perf_counter() - t0)


async def run_tasks(store: AsyncMemoryStore, queries: list[str]) -> dict[str, float]:
    async def one(q: str) -> float:
        t0 = time.perf_counter()
        assert await store.search(q, user_id=USER, limit=10, touch=False)
        return time.perf_counter() - t0

    latencies: list[float] = []
    t0 = time.perf_counter()
    for start in range(0, len(queries), TASKS):  # TASKS searches in flight at once, per round
        latencies += await asyncio.gather(*(one(q) for q in queries[start : start + TASKS]))
    return _summary(f"async, {TASKS} tasks", latencies, time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help=f"rounds of {TASKS} searches")
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--pool", type=int, default=10, help="async connections (and as many overflow)")
    args = parser.parse_args()
    with database_url(args.url, prefix="cortex-pg-bench-") as url:
        store = MemoryStore.open(url, embedder=args.embedder, auto_migrate=True, query_cache_size=0)
        store.add_many(
            [{"content": f"note {i} about topic {i % 37}: detail {i * 13}"} for i in range(args.notes)],
            user_id=USER,
            to_stm=False,
            bulk=True,
        )
        queries = _queries(args.rounds)
        print(
            f"{args.notes} notes, {len(queries)} searches per mode, embedder {args.embedder} (after a warm-up round per mode)"
        )
        run_threads(store, queries[:TASKS])  # warm-up: pool, plans, caches

        async def on_loop() -> dict[str, float]:
            astore = AsyncMemoryStore.over(store, pool_size=args.pool)
            try:
                await run_tasks(astore, queries[:TASKS])  # warm-up
                return await run_tasks(astore, queries)
            finally:
                await astore.close()

        threads = run_threads(store, queries)
        tasks = asyncio.run(on_loop())
        print(
            f"ratio async/threads: throughput {tasks['per_s'] / threads['per_s']:.2f}x, "
            f"p50 latency {tasks['p50_ms'] / threads['p50_ms']:.2f}x, p95 latency "
            f"{tasks['p95_ms'] / threads['p95_ms']:.2f}x"
        )
        store.close()


if __name__ == "__main__":
    main()
