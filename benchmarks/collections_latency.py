"""Search latency with smart collections off and on, and what collections add (p50/p95).

Usage:
    python benchmarks/collections_latency.py [--notes 2000] [--queries 200] [--embedder minilm]
        [--database-url URL]

A synthetic tenant: ``--notes`` notes in 8 categories of two levels (``work.programming``,
``personal.health``, ...), each note a sentence of its category's vocabulary; the collection
jobs run before timing (so up to 4 collections are searched per query). Each query (a pair of
words of one category) is searched with ``collections=False`` and ``collections=True`` at limit
10; the query's embedding is cached by the store after the first call, so both timings exclude
it. Prints p50 and p95 of each and of the per-query difference (the added latency).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from _database import database_url

from cortex_pg.evolution.worker import Worker
from cortex_pg.store import MemoryStore

VOCABULARY = {
    "work.programming": "python code profiling latency cache database query refactor tests deploy",
    "work.meetings": "standup sprint roadmap planning retro agenda minutes decision stakeholder",
    "personal.health": "doctor sleep vitamin blood pressure headache allergy dentist water",
    "personal.finance": "budget savings rent invoice taxes pension mortgage expenses bank",
    "hobbies.cars": "engine tyres brakes oil clutch roadster track exhaust turbo",
    "hobbies.cooking": "recipe oven bread pasta garlic sauce bake dough spices",
    "workout.running": "run pace interval tempo marathon stretching hills sprint shoes",
    "travel.europe": "train flight hotel museum lisbon paris itinerary passport luggage",
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args(argv)
    rng = random.Random(7)
    with database_url(args.database_url, prefix="cortex-pg-collections-") as url:
        store = MemoryStore.open(url, embedder=args.embedder, auto_migrate=True)
        cats = list(VOCABULARY)
        items = []
        for i in range(args.notes):
            cat = cats[i % len(cats)]
            words = rng.sample(VOCABULARY[cat].split(), 5)
            items.append({"content": f"Note {i}: {' '.join(words)}", "user_id": "bench", "category": cat})
        store.add_many(items)
        jobs = Worker(store, listen=False).process_available()
        queries = []
        for _ in range(args.queries):
            words = VOCABULARY[rng.choice(cats)].split()
            queries.append(" ".join(rng.sample(words, 2)))
        off, on = [], []
        for q in queries:
            store.search(q, user_id="bench", limit=10, touch=False)  # embeds and caches the query
            t = time.perf_counter()
            store.search(q, user_id="bench", limit=10, touch=False)
            off.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            store.search(q, user_id="bench", limit=10, touch=False, collections=True)
            on.append((time.perf_counter() - t) * 1000)
        added = [b - a for a, b in zip(off, on, strict=True)]
        print(
            f"{args.notes} notes, {jobs} collection jobs, {len(queries)} queries, embedder {store.embedder.name}"
        )
        for name, values in (("collections off", off), ("collections on", on), ("added", added)):
            print(
                f"{name:16s} p50 {percentile(values, 0.5):7.1f} ms  p95 {percentile(values, 0.95):7.1f} ms"
                f"  mean {statistics.mean(values):7.1f} ms"
            )
        store.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
