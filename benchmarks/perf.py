"""Speed and scale of cortex-pg beside raw pgvector and ChromaDB, on one corpus, in one run.

Usage:
    python benchmarks/perf.py --size 10000 --locomo ../shared/data/locomo-dev.json
        [--out results/perf-10000.json] [--database-url URL] [--skip chroma,concurrency,...]
        [--no-embed] [--duration 10] [--e2e-notes 1000] [--e2e-queries 100]

Parts (each can be left out with ``--skip``; ``ingest`` always runs, everything reads it):
  ingest       ``MemoryStore.add_many`` per tenant, vectors precomputed (lookup embedder),
               HNSW in place; database size per 10k notes.
  latency      p50/p95/p99 over the held-out queries, query vector precomputed: vector-only
               (``store.search`` with ``vector_weight`` 1), hybrid (``store.search``), hybrid + date
               window (30 % of the time range) + ``where_filter``, ``memory_source="ltm"``, the
               10 %-tenant against a ~1 %-tenant (same queries).
  quality      recall@10 of the vector ranker against exact cosine (numpy) over the tenant's
               notes, unfiltered and with the date window + metadata filter; overlap of the
               hybrid top 10 with an exact hybrid computed in Python (``perf_exact``).
  e2e          the real MiniLM model: ``add_many`` of a sample (share of time not spent
               embedding), client RSS, ``store.search`` with and without a query cache.
  raw          pgvector on a plain table in the same server: incremental insert of every
               distinct note in the ingest's order (HNSW in place; the first 5,000 rows or
               so timed apart), COPY + index build, filtered search at ef_search 40 and 100.
  chroma       ChromaDB PersistentClient, cosine HNSW: add rate, search with a tenant ``where``
               and unfiltered.
  concurrency  1, 2, 4, 8 threads searching (hybrid) for ``--duration`` s each while one thread
               ingests: queries/s, p95, ingest notes/s.
  bulk         ``add_many(..., bulk=True)`` of the whole corpus into an empty database.

Vectors: all-MiniLM-L6-v2, from the cache of ``perf_corpus`` (computed and cached when
missing, unless ``--no-embed``, which stops with the missing file's name instead). The
database is a fresh embedded server in a temporary directory unless ``--database-url`` names
an empty database (``bulk`` then needs the right to CREATE DATABASE). Timings on a shared
machine are noisy: compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import perf_corpus
from _database import database_url
from perf_exact import (
    exact_hybrid,
    exact_vector_rows,
    load_tenant,
    percentiles,
    query_terms,
    recall,
)
from sqlalchemy import text
from sqlalchemy.engine import make_url

from cortex_pg.embeddings import MiniLMEmbedder
from cortex_pg.store import MemoryStore
from cortex_pg.store.rows import vector_literal as store_vector_literal
from cortex_pg.store.writing import INDEX_BUILD_MEMORY
from cortex_pg.temporal import query_date_window, without_temporal_keywords

PARTS = ("latency", "quality", "e2e", "raw", "chroma", "concurrency", "bulk")
KINDS = ("meeting", "preference", "task", "fact", "chat")
LIMIT = 10
WARMUP = 20
MODEL = MiniLMEmbedder.MODEL_NAME
DIM = 384

# the search's vector candidates (search_notes v6: text embeddings, tenant, window, filter)
RANKER_SQL = text(
    "SELECT e.note_id FROM cortex.embeddings e "
    "JOIN cortex.notes n ON n.user_id = e.user_id AND n.id = e.note_id "
    "WHERE e.model = :model AND e.kind = 'text' AND e.user_id = :user_id AND n.merged_into IS NULL "
    "AND (CAST(:date_from AS timestamptz) IS NULL OR n.created_at >= CAST(:date_from AS timestamptz)) "
    "AND (CAST(:date_to AS timestamptz) IS NULL OR n.created_at < CAST(:date_to AS timestamptz)) "
    "AND (CAST(:filter AS jsonb) IS NULL OR n.metadata @> CAST(:filter AS jsonb)) "
    f"ORDER BY e.embedding::vector({DIM}) <=> CAST(:vec AS vector({DIM})) LIMIT :limit"
)

TARGETS = (
    # key, label, comparison, threshold
    ("hybrid_p50_ms", "hybrid p50, 10 %-tenant (ms)", "<=", 8.0),
    ("hybrid_p95_ms", "hybrid p95, 10 %-tenant (ms)", "<=", 20.0),
    ("vector_p50_ms", "vector-only p50, 10 %-tenant (ms)", "<=", 4.0),
    ("tenant_ratio", "hybrid p50 10 %-tenant / 1 %-tenant", "<=", 1.5),
    ("vector_recall_filtered", "vector recall@10, date + metadata filter", ">=", 0.97),
    ("small_tenant_full", "small tenant: share of searches returning limit rows", ">=", 1.0),
    ("ingest_vs_raw", "incremental add_many / raw pgvector insert", ">=", 0.8),
    ("bulk_notes_s", "bulk add_many (notes/s)", ">=", 5000.0),
    ("e2e_non_embed_share", "end-to-end ingest: share not embedding", "<=", 0.15),
)


# ---------------------------------------------------------------------------- helpers
class LookupEmbedder:
    """Gives the cached MiniLM vector of every text it was built with; an unknown text is an error.

    Args:
        table: text -> float32 vector of length ``dim``.
    """

    name = MODEL
    dim = DIM

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(t).tolist() for t in texts]

    def _vector(self, text: str) -> np.ndarray:
        if text in self.table:
            return self.table[text]
        # a context text (the predecessor, a newline, the note): the normalised mean of the two
        # cached vectors stands in for MiniLM's, so the index holds as many rows as in real use
        cut = text.find("\n")
        while cut >= 0:
            head, tail = text[:cut], text[cut + 1 :]
            if head in self.table and tail in self.table:
                v = self.table[head] + self.table[tail]
                return v / max(float(np.linalg.norm(v)), 1e-12)
            cut = text.find("\n", cut + 1)
        raise LookupError(f"no cached vector for text {text!r}")


class TimedEmbedder:
    """Wraps an embedder and adds up the seconds spent in ``embed``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        t = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - t


class _CacheOnly:
    """Stands in for MiniLM under ``--no-embed``: a cache miss stops the run with the file's name."""

    name = MODEL
    dim = DIM

    def __init__(self, label: str) -> None:
        self.label = label

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        cached = sorted(p.name for p in perf_corpus.cache_dir().glob(f"{self.label}-*.npy"))
        raise SystemExit(
            f"--no-embed: no cached {self.label} vectors for this corpus in {perf_corpus.cache_dir()} "
            f"(present: {', '.join(cached) or 'none'}); wait for the embedding job or run without --no-embed"
        )


def vector_literal(vec: np.ndarray) -> str:
    """pgvector's text form of a float32 vector, as the store writes a query's (``%.9g`` each,
    exact for a float32); formatting each number with ``str`` took 0.37 ms for 384 dimensions,
    3.7x the store's 0.10 ms, inside the timed vector-only searches."""
    return store_vector_literal(vec.tolist())


def rss_mb() -> dict[str, float]:
    """Resident set size of this process now and at its peak, in MiB."""
    out = {"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["now"] = int(line.split()[1]) / 1024
    return out


def timed(
    fn: Callable[[Any], Any], args: Sequence[Any], warmup: int = WARMUP
) -> tuple[list[float], list[Any]]:
    """Call ``fn`` on the first ``warmup`` args untimed, then on every arg: (latencies in ms, results)."""
    for a in args[:warmup]:
        fn(a)
    lat, out = [], []
    for a in args:
        t = time.perf_counter()
        out.append(fn(a))
        lat.append((time.perf_counter() - t) * 1000)
    return lat, out


def libpq(url: str, database: str | None = None) -> dict[str, Any]:
    u = make_url(url)
    if database:
        u = u.set(database=database)
    params = {"dbname": u.database, "user": u.username, "password": u.password, "port": u.port}
    params["host"] = u.host or u.query.get("host")
    return {k: v for k, v in params.items() if v is not None}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- the run
class Bench:
    """One run: the corpus, its vectors, the store, and the results as they come."""

    def __init__(self, args: argparse.Namespace, url: str) -> None:
        self.args = args
        self.url = url
        self.res: dict[str, Any] = {}
        c = perf_corpus.build(args.size, args.locomo)
        self.corpus = c
        say(f"corpus: {len(c.texts)} notes, {len(c.queries)} queries; loading vectors")
        self.vecs = self._vectors(c.texts, "notes")
        self.qvecs = self._vectors(c.queries, "queries")
        rng = random.Random(perf_corpus.SEED + 2)
        self.kinds = [rng.choice(KINDS) for _ in c.texts]
        # a note is (tenant, text): later copies are the same note (add_many returns its id)
        first: dict[tuple[str, str], int] = {}
        self.canon = [
            first.setdefault((t, x), i) for i, (t, x) in enumerate(zip(c.tenants, c.texts, strict=True))
        ]
        self.rows = [i for i, k in enumerate(self.canon) if k == i]
        self.rows_by_tenant: dict[str, list[int]] = defaultdict(list)
        for i in self.rows:
            self.rows_by_tenant[c.tenants[i]].append(i)
        t0, t1 = min(c.times), max(c.times)
        self.window = (t0 + (t1 - t0) * 0.35, t0 + (t1 - t0) * 0.65)
        self.filter = {"kind": "meeting"}
        table = dict(zip(c.texts, self.vecs, strict=True))
        table.update(zip(c.queries, self.qvecs, strict=True))
        self.embedder = LookupEmbedder(table)
        self.note_ids: list[str] = []
        self._matrices: dict[tuple[str | None, bool], np.ndarray] = {}
        sizes = {t: len(r) for t, r in self.rows_by_tenant.items()}
        self.big = "t001"
        target = 0.01 * len(self.rows)
        self.small = min(
            (t for t in sizes if t not in ("t000", "t001")), key=lambda t: abs(sizes[t] - target)
        )
        self.res["corpus"] = {
            "size": len(c.texts),
            "distinct_notes": len(self.rows),
            "queries": len(c.queries),
            "tenants": len(sizes),
            "big_tenant": [self.big, sizes[self.big]],
            "small_tenant": [self.small, sizes[self.small]],
            "locomo": bool(args.locomo and args.locomo.exists()),
            "window": [self.window[0].isoformat(), self.window[1].isoformat()],
            "filter": self.filter,
        }

    def _vectors(self, texts: list[str], label: str) -> np.ndarray:
        emb = _CacheOnly(label) if self.args.no_embed else MiniLMEmbedder()
        return perf_corpus.vectors(texts, emb, label, progress=lambda n: say(f"  embedded {n}/{len(texts)}"))

    def items(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        c = self.corpus
        return [
            {"content": c.texts[i], "time": c.times[i], "metadata": {"kind": self.kinds[i]}} for i in rows
        ]

    def tenant_items(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        c = self.corpus
        return [
            {
                "user_id": c.tenants[i],
                "content": c.texts[i],
                "time": c.times[i],
                "metadata": {"kind": self.kinds[i]},
            }
            for i in rows
        ]

    # ------------------------------------------------------------------ exact truth
    def truth(self, q: int, tenant: str | None, filtered: bool = False) -> list[int]:
        """Corpus rows of the exact top 10 for query ``q`` (tenant None = all notes)."""
        rows = self.rows if tenant is None else self.rows_by_tenant[tenant]
        if filtered:
            lo, hi = self.window
            c = self.corpus
            rows = [i for i in rows if lo <= c.times[i] < hi and self.kinds[i] == self.filter["kind"]]
        if not rows:
            return []
        key = (tenant, filtered)
        if key not in self._matrices:
            self._matrices[key] = self.vecs[rows]
        mat = self._matrices[key]
        # unit vectors: cosine distance = 1 - dot; float32 here, exact enough for a top 10
        top = exact_vector_rows(mat, None, LIMIT, distances=1.0 - mat @ self.qvecs[q])
        return [rows[r] for r in top]

    # ------------------------------------------------------------------ parts
    def ingest(self) -> None:
        store = MemoryStore.open(self.url, embedder=self.embedder, auto_migrate=True)
        self.store = store
        with store.engine.connect() as conn:
            before = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            notes_before = conn.execute(text("SELECT count(*) FROM cortex.notes")).scalar_one()
        c = self.corpus
        by_tenant: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(c.tenants):
            by_tenant[t].append(i)
        ids: dict[int, str] = {}
        say(f"ingest: add_many per tenant, {len(c.texts)} notes, batch {self.args.batch_size}")
        t0 = time.perf_counter()
        for tenant, rows in sorted(by_tenant.items()):
            out = store.add_many(
                self.items(rows), user_id=tenant, to_stm=False, batch_size=self.args.batch_size
            )
            ids.update(zip(rows, out, strict=True))
        secs = time.perf_counter() - t0
        self.note_ids = [ids[i] for i in range(len(c.texts))]
        # searches are measured in a steady state: statistics fresh, as autovacuum leaves them
        t1 = time.perf_counter()
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        vacuum_s = time.perf_counter() - t1
        with store.engine.connect() as conn:
            after = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            rels = conn.execute(
                text(
                    # a partitioned table or index: the sum over its partitions
                    "SELECT c.relname, coalesce((SELECT sum(pg_total_relation_size(t.relid))::bigint "
                    "FROM pg_partition_tree(c.oid) t), pg_total_relation_size(c.oid)) AS bytes FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'cortex' AND (c.relname IN "
                    "('notes', 'embeddings', 'bm25_postings', 'bm25_terms', 'bm25_corpus') "
                    "OR c.relname LIKE 'ix_embeddings_hnsw_%')"
                )
            ).all()
            notes = conn.execute(text("SELECT count(*) FROM cortex.notes")).scalar_one()
        stored = notes - notes_before
        per10k = 10000 / max(notes, 1) / 2**20  # the relations hold every note
        self.res["ingest"] = {
            "notes": len(c.texts),
            "stored": stored,
            "seconds": secs,
            "notes_per_s": len(c.texts) / secs,
            "stored_notes_per_s": stored / secs,
            "batch_size": self.args.batch_size,
            "vacuum_analyze_s": vacuum_s,
        }
        self.res["size"] = {
            "database_mb_per_10k": (after - before) * 10000 / max(stored, 1) / 2**20,
            "relations_mb_per_10k": {r.relname: r.bytes * per10k for r in rels},
        }
        say(f"  {len(c.texts) / secs:.0f} notes/s ({secs:.1f} s), {stored} stored")

    def _vector_search(self, tenant: str, q: int, filtered: bool = False) -> list[str]:
        """The vector-only search: ``store.search`` with ``vector_weight`` 1, which runs the
        vector ranker alone (search_notes v11), as a plain-SQL call without a query text does."""
        kw: dict[str, Any] = {"ranking": {"vector_weight": 1}}
        if filtered:
            kw.update(date_from=self.window[0], date_to=self.window[1], where_filter=self.filter)
        return self._hybrid(tenant, q, **kw)

    def _vector_ranker(self, tenant: str, q: int, filtered: bool = False) -> list[str]:
        """The vector ranker alone, as the search runs it: the nearest text embeddings of the
        tenant by the model's HNSW index (same ef_search, 40 for a limit of 10, and iterative scan),
        top ``LIMIT``."""
        with self.store.engine.begin() as conn:
            conn.execute(text("SELECT set_config('hnsw.ef_search', '40', true)"))
            conn.execute(text("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)"))
            return [
                str(r.note_id) for r in conn.execute(RANKER_SQL, self._vector_params(tenant, q, filtered))
            ]

    def _vector_params(self, tenant: str, q: int, filtered: bool) -> dict[str, Any]:
        return {
            "user_id": tenant,
            "vec": vector_literal(self.qvecs[q]),
            "limit": LIMIT,
            "date_from": self.window[0] if filtered else None,
            "date_to": self.window[1] if filtered else None,
            "filter": json.dumps(self.filter) if filtered else None,
            "model": MODEL,
        }

    def _hybrid(self, tenant: str, q: int, **kw: Any) -> list[str]:
        res = self.store.search(self.corpus.queries[q], user_id=tenant, limit=LIMIT, touch=False, **kw)
        return [str(r.note.id) for r in res]

    def latency(self) -> None:
        c = self.corpus
        qs = list(range(len(c.queries)))
        qt = c.query_tenants
        out: dict[str, Any] = {}
        self._results: dict[str, list[Any]] = {}
        runs: list[tuple[str, Callable[[int], Any]]] = [
            ("vector-only", lambda q: self._vector_search(qt[q], q)),
            ("vector-only, date + filter", lambda q: self._vector_search(qt[q], q, filtered=True)),
            ("hybrid", lambda q: self._hybrid(qt[q], q)),
            (
                "hybrid + date + filter",
                lambda q: self._hybrid(
                    qt[q], q, date_from=self.window[0], date_to=self.window[1], where_filter=self.filter
                ),
            ),
            ('hybrid, memory_source="ltm"', lambda q: self._hybrid(qt[q], q, memory_source="ltm")),
            (f"hybrid, 10 %-tenant {self.big}", lambda q: self._hybrid(self.big, q)),
            (f"hybrid, ~1 %-tenant {self.small}", lambda q: self._hybrid(self.small, q)),
            (f"vector-only, 10 %-tenant {self.big}", lambda q: self._vector_search(self.big, q)),
            (f"vector-only, ~1 %-tenant {self.small}", lambda q: self._vector_search(self.small, q)),
        ]
        for name, fn in runs:
            say(f"latency: {name}")
            lat, results = timed(fn, qs)
            out[name] = percentiles(lat)
            self._results[name] = results
        small = self._results[f"hybrid, ~1 %-tenant {self.small}"]
        out["small_tenant_full"] = sum(len(r) == LIMIT for r in small) / len(small)
        big_p50 = out[f"hybrid, 10 %-tenant {self.big}"]["p50"]
        out["tenant_ratio"] = big_p50 / out[f"hybrid, ~1 %-tenant {self.small}"]["p50"]
        out["vector_tenant_ratio"] = (
            out[f"vector-only, 10 %-tenant {self.big}"]["p50"]
            / out[f"vector-only, ~1 %-tenant {self.small}"]["p50"]
        )
        self.res["latency"] = out

    def quality(self) -> None:
        c = self.corpus
        if not getattr(self, "_results", None):
            say("quality: needs latency's results; running the searches untimed")
            self._results = {
                "vector-only": [self._vector_search(c.query_tenants[q], q) for q in range(len(c.queries))],
                "vector-only, date + filter": [
                    self._vector_search(c.query_tenants[q], q, filtered=True) for q in range(len(c.queries))
                ],
                "hybrid": [self._hybrid(c.query_tenants[q], q) for q in range(len(c.queries))],
            }
        say("quality: exact vector and hybrid rankings")
        ids = self.note_ids
        rec, rec_f = [], []
        for q in range(len(c.queries)):
            t = c.query_tenants[q]
            rec.append(recall(self._vector_ranker(t, q), [ids[i] for i in self.truth(q, t)]))
            rec_f.append(
                recall(
                    self._vector_ranker(t, q, filtered=True),
                    [ids[i] for i in self.truth(q, t, filtered=True)],
                )
            )
        overlap, top1, overlap_v = [], [], []
        indexes = {}
        with self.store.engine.connect() as conn:
            for q, found in enumerate(self._results["hybrid"]):
                t = c.query_tenants[q]
                named = conn.execute(
                    text("SELECT cortex.query_without_speakers(:u, :q)"), {"u": t, "q": c.queries[q]}
                ).scalar_one()
                if query_date_window(c.queries[q]) is not None or named is not None:
                    # a query naming its dates is ranked with them (README, "Named dates"), one
                    # naming a speaker with the query without the name blended into its embedding
                    # (step 0); the exact recomputation is of the formula without either:
                    # compared with that search
                    found = self._hybrid(t, q, ranking={"date_weight": 0, "unnamed_query_weight": 0})
                if t not in indexes:
                    indexes[t] = load_tenant(conn, t, MODEL)
                terms = query_terms(conn, without_temporal_keywords(c.queries[q]))
                exact = [i for i, _ in exact_hybrid(indexes[t], self.qvecs[q], terms, LIMIT)]
                overlap.append(recall(found, exact))
                top1.append(bool(found) and bool(exact) and found[0] == exact[0])
                exact_v = [i for i, _ in exact_hybrid(indexes[t], self.qvecs[q], [], LIMIT)]
                overlap_v.append(recall(self._results["vector-only"][q], exact_v))
        self.res["quality"] = {
            "vector_recall": float(np.mean(rec)),
            "vector_recall_filtered": float(np.mean(rec_f)),
            "vector_only_overlap": float(np.mean(overlap_v)),
            "hybrid_overlap": float(np.mean(overlap)),
            "hybrid_top1_agreement": float(np.mean(top1)),
        }

    def e2e(self) -> None:
        args = self.args
        minilm = TimedEmbedder(MiniLMEmbedder())
        say("e2e: loading MiniLM")
        rss0 = rss_mb()
        minilm.embed(["warm up"])
        minilm.seconds = 0.0
        rss1 = rss_mb()
        store = MemoryStore.open(self.url, embedder=minilm, auto_migrate=True)
        rng = random.Random(perf_corpus.SEED + 3)
        sample = rng.sample(self.rows, min(args.e2e_notes, len(self.rows)))
        say(f"e2e: add_many of {len(sample)} notes with MiniLM")
        t0 = time.perf_counter()
        store.add_many(self.items(sample), user_id="e2e", to_stm=False, batch_size=args.batch_size)
        total = time.perf_counter() - t0
        out: dict[str, Any] = {
            "ingest_notes": len(sample),
            "ingest_notes_per_s": len(sample) / total,
            "ingest_embed_s": minilm.seconds,
            "ingest_total_s": total,
            "non_embed_share": (total - minilm.seconds) / total,
            "rss_mb_before_model": rss0.get("now"),
            "rss_mb_with_model": rss_mb().get("now"),
            "rss_mb_peak": rss_mb()["peak"],
            "rss_mb_after_warmup": rss1.get("now"),
        }
        c = self.corpus
        qs = list(range(min(args.e2e_queries, len(c.queries))))

        def search(s: MemoryStore) -> Callable[[int], Any]:
            return lambda q: s.search(c.queries[q], user_id=c.query_tenants[q], limit=LIMIT, touch=False)

        say(f"e2e: {len(qs)} searches with MiniLM, no query cache")
        lat, _ = timed(search(store), qs, warmup=5)
        out["search_no_cache"] = percentiles(lat)
        store.close()
        try:
            cached = MemoryStore.open(
                self.url, embedder=minilm.inner, auto_migrate=True, query_cache_size=1024
            )
        except TypeError:
            out["search_cache_cold"] = out["search_cache_warm"] = "n/a"
        else:
            say("e2e: the same searches with query_cache_size=1024, twice")
            lat, _ = timed(search(cached), qs, warmup=0)
            out["search_cache_cold"] = percentiles(lat)
            lat, _ = timed(search(cached), qs, warmup=0)
            out["search_cache_warm"] = percentiles(lat)
            cached.close()
        self.res["e2e"] = out

    def raw(self) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        c = self.corpus
        out: dict[str, Any] = {}
        with psycopg.connect(**libpq(self.url), autocommit=True) as conn:
            register_vector(conn)
            conn.execute("DROP TABLE IF EXISTS bench_raw")
            conn.execute(
                f"CREATE TABLE bench_raw (id bigserial PRIMARY KEY, tenant text, embedding vector({DIM}))"
            )
            index_sql = (
                "CREATE INDEX bench_raw_hnsw ON bench_raw USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
            conn.execute(index_sql)
            # the reference does the ingest's work: every distinct note, tenant after tenant in the
            # ingest's order, a transaction per batch of a tenant's rows, into one table whose
            # graph grows as the store's did (inserting into a small table is cheaper per row:
            # the rate of the first 5,000 rows or so, whole batches, is reported apart)
            by_tenant: dict[str, list[int]] = defaultdict(list)
            for i in self.rows:
                by_tenant[c.tenants[i]].append(i)
            bs = self.args.batch_size
            batches = [
                rows[s : s + bs] for _, rows in sorted(by_tenant.items()) for s in range(0, len(rows), bs)
            ]
            if self.args.raw_sample:
                kept, batches = batches, []
                left = self.args.raw_sample
                for b in kept:
                    if left <= 0:
                        break
                    batches.append(b[:left])
                    left -= len(batches[-1])
            sample = [i for b in batches for i in b]
            say(f"raw: incremental insert of {len(sample)} rows, HNSW in place")
            done = 0
            t0 = time.perf_counter()
            for batch in batches:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO bench_raw (id, tenant, embedding) VALUES (%s, %s, %s)",
                        [(i, c.tenants[i], self.vecs[i]) for i in batch],
                    )
                if done < 5000 <= done + len(batch):
                    out["insert_first_rows"] = done + len(batch)
                    out["insert_first_rows_per_s"] = out["insert_first_rows"] / (time.perf_counter() - t0)
                done += len(batch)
            secs = time.perf_counter() - t0
            out["insert_rows"] = len(sample)
            out["insert_rows_per_s"] = len(sample) / secs
            conn.execute("TRUNCATE bench_raw")
            conn.execute("DROP INDEX bench_raw_hnsw")
            say(f"raw: COPY of {len(self.rows)} rows, then the HNSW build")
            t0 = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy("COPY bench_raw (id, tenant, embedding) FROM STDIN (FORMAT BINARY)") as cp,
            ):
                cp.set_types(["int8", "text", "vector"])
                for i in self.rows:
                    cp.write_row((i, c.tenants[i], self.vecs[i]))
            out["copy_s"] = time.perf_counter() - t0
            out["copy_rows_per_s"] = len(self.rows) / out["copy_s"]
            # built with the memory the store's own build after a bulk load takes (with the
            # server's default of 64 MB pgvector finishes a 100k graph on disk, 2.3x slower) and
            # the server's parallel maintenance workers
            conn.execute(f"SET maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
            t0 = time.perf_counter()
            conn.execute(index_sql)
            out["index_build_s"] = time.perf_counter() - t0
            out["maintenance_work_mem"] = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
            out["parallel_maintenance_workers"] = int(
                conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
            )
            conn.execute("RESET maintenance_work_mem")
            conn.execute("ANALYZE bench_raw")
            conn.execute("SET hnsw.iterative_scan = relaxed_order")
            qs = list(range(len(c.queries)))
            for ef in (40, 100):
                conn.execute(f"SET hnsw.ef_search = {ef}")
                say(f"raw: filtered search, ef_search {ef}")

                def run(q: int) -> list[int]:
                    return [
                        r[0]
                        for r in conn.execute(
                            "SELECT id FROM bench_raw WHERE tenant = %s ORDER BY embedding <=> %s LIMIT 10",
                            (c.query_tenants[q], self.qvecs[q]),
                        )
                    ]

                lat, found = timed(run, qs)
                rec = [recall(f, self.truth(q, c.query_tenants[q])) for q, f in enumerate(found)]
                out[f"search_ef{ef}"] = percentiles(lat) | {"recall": float(np.mean(rec))}
            conn.execute("DROP TABLE bench_raw")
        self.res["raw"] = out

    def chroma(self) -> None:
        try:
            import chromadb
            from chromadb.config import Settings
        except ImportError:
            self.res["chroma"] = "n/a (pip install 'cortex-pg[bench]')"
            return
        c = self.corpus
        tmp = Path(tempfile.mkdtemp(prefix="cortex-pg-perf-chroma-"))
        out: dict[str, Any] = {"version": chromadb.__version__}
        try:
            client = chromadb.PersistentClient(path=str(tmp), settings=Settings(anonymized_telemetry=False))
            col = client.create_collection("bench", metadata={"hnsw:space": "cosine"})
            step = min(client.get_max_batch_size(), 5000)
            say(f"chroma: add of {len(self.rows)} vectors")
            t0 = time.perf_counter()
            for s in range(0, len(self.rows), step):
                rows = self.rows[s : s + step]
                col.add(
                    ids=[str(i) for i in rows],
                    embeddings=self.vecs[rows],
                    metadatas=[{"tenant": c.tenants[i]} for i in rows],
                )
            out["add_s"] = time.perf_counter() - t0
            out["add_rows_per_s"] = len(self.rows) / out["add_s"]
            qs = list(range(len(c.queries)))
            for name, tenant_where in (("filtered", True), ("unfiltered", False)):
                say(f"chroma: {name} search")

                def run(q: int, tenant_where: bool = tenant_where) -> list[int]:
                    kw = {"where": {"tenant": c.query_tenants[q]}} if tenant_where else {}
                    r = col.query(
                        query_embeddings=[self.qvecs[q]], n_results=LIMIT, include=["distances"], **kw
                    )
                    return [int(i) for i in r["ids"][0]]

                lat, found = timed(run, qs)
                rec = [
                    recall(f, self.truth(q, c.query_tenants[q] if tenant_where else None))
                    for q, f in enumerate(found)
                ]
                out[name] = percentiles(lat) | {"recall": float(np.mean(rec))}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.res["chroma"] = out

    def concurrency(self) -> None:
        rng = random.Random(perf_corpus.SEED + 4)
        order = list(range(len(self.corpus.texts)))
        rng.shuffle(order)
        self._ingest_order, self._ingest_at = order, 0
        self.res["concurrency"] = {str(n): self._concurrency_level(n) for n in (1, 2, 4, 8)}

    def _concurrency_level(self, n: int) -> dict[str, Any]:
        """``n`` threads run hybrid searches for ``--duration`` s while one thread adds notes (the
        corpus again, under session ``concurrency-<n>``, 50 per call, into the searched tenants)."""
        c = self.corpus
        say(f"concurrency: {n} searching thread(s) + 1 ingesting, {self.args.duration:.0f} s")
        stop = threading.Event()
        lats: list[list[float]] = [[] for _ in range(n)]
        ingested = 0
        errors: list[str] = []

        def searcher(k: int) -> None:
            q = k
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    self._hybrid(c.query_tenants[q % len(c.queries)], q % len(c.queries))
                except Exception as exc:  # noqa: BLE001 - counted and reported, not fatal
                    errors.append(repr(exc))
                lats[k].append((time.perf_counter() - t) * 1000)
                q += n

        def ingester() -> None:
            nonlocal ingested
            order = self._ingest_order
            while not stop.is_set():
                rows = [order[(self._ingest_at + j) % len(order)] for j in range(50)]
                self._ingest_at += 50
                try:
                    self.store.add_many(self.tenant_items(rows), session_id=f"concurrency-{n}", to_stm=False)
                    ingested += len(rows)
                except Exception as exc:  # noqa: BLE001 - counted and reported, not fatal
                    errors.append(repr(exc))

        threads = [threading.Thread(target=searcher, args=(k,)) for k in range(n)]
        threads.append(threading.Thread(target=ingester))
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        time.sleep(self.args.duration)
        stop.set()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t0
        all_lat = [x for per in lats for x in per]
        p = percentiles(all_lat)
        return {
            "queries_per_s": len(all_lat) / secs,
            "p50": p["p50"],
            "p95": p["p95"],
            "ingest_notes_per_s": ingested / secs,
            "errors": len(errors),
            "first_errors": errors[:3],
        }

    def bulk(self) -> None:
        import psycopg

        name = "cortex_perf_bulk"
        admin = libpq(self.url)
        with psycopg.connect(**admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        url = make_url(self.url).set(database=name).render_as_string(hide_password=False)
        try:
            store = MemoryStore.open(url, embedder=self.embedder, auto_migrate=True)
            items = self.tenant_items(range(len(self.corpus.texts)))
            say(f"bulk: add_many(bulk=True) of {len(items)} notes into an empty store")
            t0 = time.perf_counter()
            try:
                store.add_many(items, to_stm=False, bulk=True)
            except TypeError as exc:
                if "bulk" not in str(exc):
                    raise
                self.res["bulk"] = "n/a (add_many has no bulk keyword yet)"
            else:
                secs = time.perf_counter() - t0
                self.res["bulk"] = {"notes": len(items), "seconds": secs, "notes_per_s": len(items) / secs}
            store.close()
        finally:
            with psycopg.connect(**admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------------------- report
def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets with the measured values (None = not measured in this run)."""
    lat = res.get("latency") or {}
    # the targets are stated for a tenant of 10k notes in a 100k store: the 10 % tenant
    big = next((v for k, v in lat.items() if k.startswith("hybrid, 10 %")), None)
    big_vector = next((v for k, v in lat.items() if k.startswith("vector-only, 10 %")), None)
    raw = res.get("raw") or {}
    bulk = res.get("bulk")
    e2e = res.get("e2e") or {}
    values = {
        "hybrid_p50_ms": big and big["p50"],
        "hybrid_p95_ms": big and big["p95"],
        "vector_p50_ms": big_vector and big_vector["p50"],
        "tenant_ratio": lat.get("tenant_ratio"),
        "vector_recall_filtered": (res.get("quality") or {}).get("vector_recall_filtered"),
        "small_tenant_full": lat.get("small_tenant_full"),
        # distinct notes written per second on both sides (the corpus repeats some texts in a
        # tenant, which add_many answers without a write)
        "ingest_vs_raw": raw.get("insert_rows_per_s")
        and _stored_rate(res["ingest"]) / raw["insert_rows_per_s"],
        "bulk_notes_s": bulk.get("notes_per_s") if isinstance(bulk, dict) else None,
        "e2e_non_embed_share": e2e.get("non_embed_share"),
    }
    out = []
    for key, label, op, limit in TARGETS:
        v = values[key]
        ok = None if v is None else (v <= limit if op == "<=" else v >= limit)
        out.append({"key": key, "target": f"{label} {op} {limit:g}", "value": v, "pass": ok})
    return out


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}×" if a and b else "n/a"


def render(res: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report as (title, header, rows) tables."""
    tables = []
    lat = res.get("latency")
    raw = res.get("raw") if isinstance(res.get("raw"), dict) else {}
    ch = res.get("chroma") if isinstance(res.get("chroma"), dict) else {}
    raw40 = (raw.get("search_ef40") or {}).get("p50")
    ch_f = (ch.get("filtered") or {}).get("p50")
    if lat:
        rows = []
        for name, v in lat.items():
            if isinstance(v, dict):
                rows.append(
                    [
                        name,
                        _fmt(v["p50"], 2),
                        _fmt(v["p95"], 2),
                        _fmt(v["p99"], 2),
                        _ratio(v["p50"], raw40),
                        _ratio(v["p50"], ch_f),
                    ]
                )
        for name, v in (
            ("raw pgvector, ef_search 40", raw.get("search_ef40")),
            ("raw pgvector, ef_search 100", raw.get("search_ef100")),
            ("ChromaDB, tenant where", ch.get("filtered")),
            ("ChromaDB, unfiltered", ch.get("unfiltered")),
        ):
            if v:
                rows.append([name, _fmt(v["p50"], 2), _fmt(v["p95"], 2), _fmt(v["p99"], 2), "", ""])
        e2e = res.get("e2e") or {}
        for name, key in (
            ("e2e MiniLM, no query cache", "search_no_cache"),
            ("e2e MiniLM, cache (cold)", "search_cache_cold"),
            ("e2e MiniLM, cache (warm)", "search_cache_warm"),
        ):
            v = e2e.get(key)
            if isinstance(v, dict):
                rows.append([name, _fmt(v["p50"], 2), _fmt(v["p95"], 2), _fmt(v["p99"], 2), "", ""])
            elif v:
                rows.append([name, v, "", "", "", ""])
        rows.append(
            [
                "small tenant: searches returning limit rows",
                _fmt(lat.get("small_tenant_full"), 3),
                "",
                "",
                "",
                "",
            ]
        )
        rows.append(
            ["hybrid p50 10 %-tenant / ~1 %-tenant", _fmt(lat.get("tenant_ratio"), 2), "", "", "", ""]
        )
        rows.append(
            ["vector p50 10 %-tenant / ~1 %-tenant", _fmt(lat.get("vector_tenant_ratio"), 2), "", "", "", ""]
        )
        tables.append(
            (
                "Search latency (ms), query vector precomputed",
                ["search", "p50", "p95", "p99", "/ raw p50", "/ Chroma p50"],
                rows,
            )
        )
    rows = []
    q = res.get("quality") or {}
    if q:
        rows += [
            ["cortex-pg vector ranker, tenant", _fmt(q["vector_recall"], 3)],
            ["cortex-pg vector ranker, tenant + date + metadata", _fmt(q["vector_recall_filtered"], 3)],
            [
                "cortex-pg vector-only top-10 overlap with its exact recomputation",
                _fmt(q.get("vector_only_overlap"), 3),
            ],
            ["cortex-pg hybrid top-10 overlap with exact hybrid", _fmt(q["hybrid_overlap"], 3)],
            ["cortex-pg hybrid top-1 agreement with exact hybrid", _fmt(q["hybrid_top1_agreement"], 3)],
        ]
    for name, v in (
        ("raw pgvector ef 40, tenant", raw.get("search_ef40")),
        ("raw pgvector ef 100, tenant", raw.get("search_ef100")),
        ("ChromaDB, tenant where", ch.get("filtered")),
        ("ChromaDB, unfiltered", ch.get("unfiltered")),
    ):
        if v:
            rows.append([name, _fmt(v["recall"], 3)])
    if rows:
        tables.append(("Quality: recall@10 against exact search", ["ranker", "value"], rows))
    ing = res.get("ingest") or {}
    rows = [
        [
            "cortex-pg add_many, incremental (HNSW in place)"
            + (
                f", notes stored ({ing['stored']} of {ing['notes']} items)"
                if ing.get("stored_notes_per_s") is not None
                else ""
            ),
            _fmt(_stored_rate(ing) if ing else None, 0),
            _ratio(_stored_rate(ing) if ing else None, raw.get("insert_rows_per_s")),
        ]
    ]
    bulk = res.get("bulk")
    if bulk is not None:
        rows.append(
            [
                "cortex-pg add_many(bulk=True), empty store",
                _fmt(bulk.get("notes_per_s"), 0) if isinstance(bulk, dict) else bulk,
                _ratio(
                    bulk.get("notes_per_s") if isinstance(bulk, dict) else None,
                    raw.get("copy_rows_per_s") and len_over(raw),
                ),
            ]
        )
    if raw:
        rows.append(
            [
                f"raw pgvector INSERT, incremental (HNSW in place), {raw['insert_rows']} rows",
                _fmt(raw["insert_rows_per_s"], 0),
                "",
            ]
        )
        if raw.get("insert_first_rows") and raw["insert_first_rows"] < raw["insert_rows"]:
            rows.append(
                [
                    f"  the first {raw['insert_first_rows']} rows (a small table)",
                    _fmt(raw["insert_first_rows_per_s"], 0),
                    "",
                ]
            )
        rows.append(
            [
                f"raw pgvector COPY ({_fmt(raw['copy_s'], 1)} s) + index build ({_fmt(raw['index_build_s'], 1)} s"
                + (
                    f", maintenance_work_mem {raw['maintenance_work_mem']}, "
                    f"{raw['parallel_maintenance_workers']} parallel workers)"
                    if "parallel_maintenance_workers" in raw
                    else ")"
                ),
                _fmt(len_over(raw), 0),
                "",
            ]
        )
    if ch:
        rows.append(
            [
                "ChromaDB add",
                _fmt(ch["add_rows_per_s"], 0),
                _ratio(ing.get("notes_per_s"), ch["add_rows_per_s"]),
            ]
        )
    e2e = res.get("e2e") or {}
    if e2e:
        rows.append(
            [
                f"cortex-pg add_many with MiniLM ({e2e['ingest_notes']} notes; not embedding {e2e['non_embed_share']:.1%})",
                _fmt(e2e["ingest_notes_per_s"], 0),
                "",
            ]
        )
    tables.append(("Ingest (notes/s)", ["path", "notes/s", "ratio"], rows))
    size = res.get("size") or {}
    rows = [["database growth", _fmt(size.get("database_mb_per_10k"), 1)]]
    rows += [[k, _fmt(v, 1)] for k, v in sorted((size.get("relations_mb_per_10k") or {}).items())]
    if e2e:
        rows.append(
            [
                "client RSS before / with MiniLM (MiB)",
                f"{_fmt(e2e['rss_mb_before_model'], 0)} / {_fmt(e2e['rss_mb_with_model'], 0)}",
            ]
        )
    tables.append(("Size (MiB per 10k notes)", ["what", "MiB"], rows))
    conc = res.get("concurrency") or {}
    if conc:
        rows = [
            [
                n,
                _fmt(v["queries_per_s"], 1),
                _fmt(v["p50"], 1),
                _fmt(v["p95"], 1),
                _fmt(v["ingest_notes_per_s"], 0),
                str(v["errors"]),
            ]
            for n, v in conc.items()
        ]
        tables.append(
            (
                "Concurrency: hybrid searches while one thread ingests",
                ["threads", "queries/s", "p50 ms", "p95 ms", "ingest notes/s", "errors"],
                rows,
            )
        )
    rows = [
        [t["target"], _fmt(t["value"], 3), {True: "pass", False: "FAIL", None: "n/a"}[t["pass"]]]
        for t in res["targets"]
    ]
    rows.append(
        ["locomo_recall.py R@10 within 0.5 points of before", "run benchmarks/locomo_recall.py", "n/a"]
    )
    tables.append(("Targets (issue 10; meant for 100k notes)", ["target", "value", ""], rows))
    return tables


def _stored_rate(ingest: dict[str, Any]) -> float | None:
    """Distinct notes stored per second by the incremental ingest (older results: items/s)."""
    rate = ingest.get("stored_notes_per_s")
    return ingest.get("notes_per_s") if rate is None else rate


def len_over(raw: dict[str, Any]) -> float | None:
    """Rows per second of COPY followed by the index build (the raw bulk path)."""
    if "copy_s" not in raw:
        return None
    return raw["copy_rows_per_s"] * raw["copy_s"] / (raw["copy_s"] + raw["index_build_s"])


def print_tables(tables: list[tuple[str, list[str], list[list[str]]]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        for title, header, rows in tables:
            print(f"\n{title}\n" + " | ".join(header))
            for r in rows:
                print(" | ".join(r))
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    for title, header, rows in tables:
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(header):
            t.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            t.add_row(*r)
        console.print(t)


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--locomo", type=Path, default=None, help="LoCoMo JSON whose turns start the corpus")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default results/perf-<size>.json)")
    ap.add_argument(
        "--database-url", default=None, help="an empty database (default: a fresh embedded server)"
    )
    ap.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {','.join(PARTS)}")
    ap.add_argument("--no-embed", action="store_true", help="stop when a vector cache file is missing")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per concurrency level")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument(
        "--raw-sample",
        type=int,
        default=0,
        help="rows of the raw incremental insert (default 0: every distinct note, as the ingest)",
    )
    ap.add_argument("--e2e-notes", type=int, default=1000)
    ap.add_argument("--e2e-queries", type=int, default=100)
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(PARTS)
    if unknown:
        ap.error(f"unknown part(s) in --skip: {', '.join(sorted(unknown))}; known: {', '.join(PARTS)}")
    out_path = args.out or Path("results") / f"perf-{args.size}.json"

    with database_url(args.database_url, prefix="cortex-pg-perf-") as url:
        started = time.perf_counter()
        bench = Bench(args, url)
        bench.ingest()
        for part in PARTS:
            if part not in skip:
                t0 = time.perf_counter()
                getattr(bench, part)()
                bench.res.setdefault("seconds", {})[part] = time.perf_counter() - t0
        bench.store.close()
        res = bench.res
    res["targets"] = targets(res)
    res["run"] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "commit": _commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "skipped": sorted(skip),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    print_tables(render(res))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=2, default=str))
    say(f"results written to {out_path} ({res['run']['seconds']:.0f} s)")
    return 0


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
