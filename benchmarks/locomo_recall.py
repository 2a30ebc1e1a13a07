"""LoCoMo evidence recall@k of cortex-pg's hybrid search, plus ingest rate and search latency.

Usage:
    python benchmarks/locomo_recall.py ../shared/data/locomo-dev.json [--k 5 10 25 50]
        [--embedder minilm|hashing] [--limit-conversations N] [--temporal-weight W]
        [--variants hybrid entities expand links collections] [--evolve]
        [--ranking '{"smoothing_prev": 0.5}'] [--ablation]

Variants (one ingest, each variant asks every question): ``hybrid`` (vector + BM25, the
default search), ``entities`` (+ entity signal), ``expand`` (+ entities one hop away),
``links`` (+ linked notes appended, ``include_links``; needs ``--evolve``), ``collections``
(search with smart collections, ``collections=True``: every turn gets the offline category of
``cortex_pg.collections.rules.keyword_path`` over its YAKE keywords at ingest, as a note
without a category gets in the Prem API, and the collection jobs run before the questions;
its search latency minus the ``hybrid`` one is what collections add). ``--ranking`` gives the
search's ranking constants (a JSON object, ``cortex_pg.store.ranking.Ranking``; the library's
defaults when absent) to every variant. ``--ablation`` asks every question under each ranking of
``ABLATION`` on the same ingest (the default, each lever taken away in turn, and the reference
rankings: MiniLM alone, BM25 alone, plain RRF) and prints one table. Entity variants
make the ingest extract entities; ``--evolve`` runs the evolution worker over every note
(offline heuristic) before the questions and reports its jobs/s.

Every conversation is ingested through the public API (``MemoryStore.add_many``; one user per
conversation, one note per turn) into a fresh database (``DATABASE_URL`` when set, else a
temporary embedded server), then every question is asked with ``now`` = the conversation's
last session time. Scoring follows the data's README: evidence ids are split on ";" and
whitespace and stripped; ids that name no turn of the conversation are dropped; questions left
with no evidence are skipped. recall@k = |evidence among the top-k turns| / |evidence|,
averaged over questions (overall and per category: 1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from _database import database_url

from cortex_pg.ingest import read_locomo
from cortex_pg.store import MemoryStore

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_NO_NEIGHBOURS = {"smoothing_prev": 0, "smoothing_next": 0, "expansion": 0, "answer_weight": 0}
#: the levers a reference ranking (one ranker alone, plain RRF) leaves out besides the neighbours
_NO_PRIORS = {"date_weight": 0, "speaker_weight": 0, "unnamed_query_weight": 0}
#: rows of ``--ablation``: (name, ranking); the levers of the default ranking are documented in
#: sql/functions/search_notes/v9.sql
ABLATION: list[tuple[str, dict]] = [
    ("default ranking", {}),
    ("- context embedding", {"context_weight": 0}),
    ("- length prior", {"length_prior": 0}),
    ("- neighbour smoothing", {"smoothing_prev": 0, "smoothing_next": 0}),
    ("- neighbour expansion", {"expansion": 0}),
    ("- answers after questions", {"answer_weight": 0}),
    ("- smoothing, expansion, answers", _NO_NEIGHBOURS),
    ("- query dates", {"date_weight": 0}),
    ("- query dates and answers", {"date_weight": 0, "answer_weight": 0}),
    ("- speaker named", {"speaker_weight": 0}),
    ("- query without the names", {"unnamed_query_weight": 0}),
    ("- speaker named, both", {"speaker_weight": 0, "unnamed_query_weight": 0}),
    ("RRF instead of score fusion", {"fusion": "rrf"}),
    (
        "MiniLM alone (cosine)",
        {"vector_weight": 1, "context_weight": 0, "length_prior": 0, **_NO_PRIORS, **_NO_NEIGHBOURS},
    ),
    ("BM25 alone", {"vector_weight": 0, **_NO_PRIORS, **_NO_NEIGHBOURS}),
    (
        "plain RRF (MiniLM + BM25)",
        {"fusion": "rrf", "context_weight": 0, "length_prior": 0, **_NO_PRIORS, **_NO_NEIGHBOURS},
    ),
]
#: the best retriever of the LoCoMo paper (Maharana et al. 2024, Table 3: DRAGON over dialog
#: turns, R@10), quoted for reference, not measured here
PAPER_REFERENCE = ("DRAGON (LoCoMo paper, quoted)", {10: 66.2})


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    """Valid evidence turn ids of a question (see the module doc)."""
    out: list[str] = []
    for entry in raw or []:
        for part in re.split(r"[;\s]+", str(entry)):
            part = part.strip()
            if part in known and part not in out:
                out.append(part)
    return out


class DiskCachedEmbedder:
    """Wraps an embedder with a vector cache on disk (``.npz``, keyed by sha256 of model and text),
    saved after every call that embedded something new."""

    def __init__(self, inner, path: Path) -> None:  # noqa: ANN001
        import numpy as np

        self.inner, self.path = inner, path
        self.name, self.dim = inner.name, inner.dim
        self.window_chars = getattr(inner, "window_chars", None)  # long notes' windows, as the inner's
        self.vectors = dict(np.load(path)) if path.exists() else {}

    def embed(self, texts):  # noqa: ANN001, ANN201
        import hashlib

        import numpy as np

        keys = [hashlib.sha256(f"{self.name}\x1f{t}".encode()).hexdigest() for t in texts]
        missing = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in self.vectors]
        if missing:
            for (k, _), v in zip(missing, self.inner.embed([t for _, t in missing]), strict=True):
                self.vectors[k] = np.asarray(v, dtype=np.float32)
            tmp = self.path.with_suffix(".tmp.npz")
            np.savez(tmp, **self.vectors)
            tmp.rename(self.path)
        return [self.vectors[k].tolist() for k in keys]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--k", type=int, nargs="+", default=[5, 10, 25, 50])
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--limit-conversations", type=int, default=None)
    ap.add_argument("--temporal-weight", type=float, default=0.0)
    ap.add_argument("--database-url", default=None)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["hybrid"],
        choices=["hybrid", "entities", "expand", "links", "collections"],
    )
    ap.add_argument("--evolve", action="store_true")
    ap.add_argument(
        "--ranking",
        type=json.loads,
        default=None,
        help='ranking constants as JSON, e.g. \'{"fusion": "rrf"}\' (cortex_pg.store.ranking.Ranking)',
    )
    ap.add_argument(
        "--ablation", action="store_true", help="every ranking of ABLATION on one ingest, one table"
    )
    ap.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        help="a .npz file of vectors by text hash: reused and extended, so later runs embed nothing",
    )
    args = ap.parse_args(argv)
    if args.ranking is not None:
        from cortex_pg.errors import ValidationError
        from cortex_pg.store.ranking import Ranking

        try:
            Ranking.parse(args.ranking)
        except ValidationError as exc:
            ap.error(f"--ranking: {exc}")

    conversations = list(read_locomo(args.path))[: args.limit_conversations]
    url = args.database_url
    if url is None:
        import os

        url = os.environ.get("DATABASE_URL")
    with database_url(url, prefix="cortex-pg-locomo-") as url:
        needs_entities = bool({"entities", "expand"} & set(args.variants))
        embedder = args.embedder
        if args.embedding_cache is not None:
            from cortex_pg.embeddings.base import embedder_from_name

            embedder = DiskCachedEmbedder(embedder_from_name(args.embedder), args.embedding_cache)
        store = MemoryStore.open(
            url,
            embedder=embedder,
            auto_migrate=True,
            extract_entities=needs_entities,
            enqueue_evolution=args.evolve,
        )
        return run(store, conversations, args)


def run(store: MemoryStore, conversations, args) -> int:  # noqa: ANN001
    # warm the model so the first batch does not carry its load time
    store.embedder.embed(["warm up"])
    n_notes = 0
    if "collections" in args.variants:
        from cortex_pg.collections.rules import keyword_path
        from cortex_pg.llm import ContentAnalyzer

        analyzer = ContentAnalyzer()
        for conv in conversations:
            for item in conv.items:
                item["category"] = keyword_path(analyzer.yake_keywords(item["content"]))
    t0 = time.perf_counter()
    id_to_dia: dict[str, str] = {}
    for conv in conversations:
        ids = store.add_many(conv.items, to_stm=True)
        for nid, item in zip(ids, conv.items, strict=True):
            id_to_dia.setdefault(nid, item["metadata"]["dia_id"])
        n_notes += len(conv.items)
    ingest_s = time.perf_counter() - t0

    print(
        f"ingest: {n_notes / ingest_s:.1f} notes/s ({ingest_s:.1f} s, embedding"
        f"{' and entity extraction' if store.extract_entities else ''} included)"
    )
    # searches are timed in a steady state: planner statistics fresh, as autovacuum leaves them
    # a minute after a load (right after it, a new store's tables have none, and searches are
    # three to four times slower until autovacuum's next round)
    from sqlalchemy import text as sql_text

    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sql_text("ANALYZE"))
    if args.evolve:
        from cortex_pg.evolution.worker import Worker

        t0 = time.perf_counter()
        worker = Worker(store, concurrency=2, listen=False)
        jobs = worker.process_available()
        evolve_s = time.perf_counter() - t0
        print(
            f"evolution: {jobs} jobs in {evolve_s:.1f} s = {jobs / evolve_s:.1f} jobs/s (offline heuristic, 1 thread)"
        )
    if "collections" in args.variants:
        from sqlalchemy import text

        from cortex_pg.evolution.worker import Worker
        from cortex_pg.store.jobs import COLLECTION_KIND

        t0 = time.perf_counter()
        jobs = Worker(store, listen=False).process_available(kinds=[COLLECTION_KIND])
        with store.engine.connect() as conn:
            n = conn.execute(text("SELECT count(*) FROM cortex.collections")).scalar_one()
        print(f"collections: {n} from {jobs} jobs in {time.perf_counter() - t0:.1f} s")
    if args.ablation:
        ablation(store, conversations, id_to_dia, args)
        return 0
    for variant in args.variants:
        evaluate(store, conversations, id_to_dia, args, variant)
    return 0


def ablation(store: MemoryStore, conversations, id_to_dia, args) -> None:  # noqa: ANN001
    """One row per ranking of ``ABLATION``: overall R@k and R@10 per category."""
    header = (
        "ranking".ljust(30)
        + "".join(f"R@{k}".rjust(7) for k in args.k)
        + "".join(f"{CATEGORIES[c][:6]}@10".rjust(11) for c in CATEGORIES)
        + "   p50 ms"
    )
    print("\n== ablation (" + ", ".join(f"R@{k}" for k in args.k) + "; per category R@10)")
    print(header)
    print("-" * len(header))
    for name, ranking in ABLATION:
        recalls, per_cat, latencies, _ = recall(store, conversations, id_to_dia, args, {"ranking": ranking})
        row = name.ljust(30) + "".join(f"{100 * statistics.mean(recalls[k]):7.1f}" for k in args.k)
        row += "".join(
            f"{100 * statistics.mean(per_cat[(c, 10)]):11.1f}" if per_cat.get((c, 10)) else " " * 11
            for c in CATEGORIES
        )
        print(row + f"{sorted(latencies)[len(latencies) // 2]:9.1f}", flush=True)
    name, figures = PAPER_REFERENCE
    print(name.ljust(30) + "".join(f"{figures[k]:7.1f}" if k in figures else "      -" for k in args.k))


def pool_size(limit: int) -> int:
    """The candidate pool ``cortex.search_notes`` uses for ``limit`` (max(2 * limit, 20))."""
    return min(max(2 * limit, 20), 1000)


def recall(store: MemoryStore, conversations, id_to_dia, args, options: dict):  # noqa: ANN001, ANN201
    """Evidence recall@k of every question: (recalls by k, recalls by (category, k), search
    latencies in ms, questions skipped). Limits with the same candidate pool share one search
    (its top k is what a search with limit k returns); others get one each, so R@k is measured
    as a caller asking for k results sees it. With ``include_links`` every k has its own
    search and its linked notes count too."""
    recalls: dict[int, list[float]] = defaultdict(list)
    per_cat: dict[tuple[int, int], list[float]] = defaultdict(list)
    latencies: list[float] = []
    skipped = 0
    by_pool: dict[int, list[int]] = defaultdict(list)
    for k in args.k:
        by_pool[k if options.get("include_links") else pool_size(k)].append(k)
    for conv in conversations:
        known = {item["metadata"]["dia_id"] for item in conv.items}
        for qa in conv.qa:
            ev = evidence_ids(qa.get("evidence", []), known)
            if not ev:
                skipped += 1
                continue
            for ks in by_pool.values():
                t = time.perf_counter()
                results = store.search(
                    qa["question"],
                    user_id=conv.sample_id,
                    limit=max(ks),
                    now=conv.last_time,
                    temporal_weight=args.temporal_weight,
                    touch=False,
                    **options,
                )
                latencies.append((time.perf_counter() - t) * 1000)
                for k in ks:
                    top = {
                        id_to_dia.get(r.id)
                        for r in (results if options.get("include_links") else results[:k])
                    }
                    value = sum(1 for e in ev if e in top) / len(ev)
                    recalls[k].append(value)
                    per_cat[(int(qa.get("category", 0)), k)].append(value)
    return recalls, per_cat, latencies, skipped


def evaluate(store: MemoryStore, conversations, id_to_dia, args, variant: str) -> None:  # noqa: ANN001
    options = {
        "hybrid": {},
        "entities": {"entities": True},
        "expand": {"entities": True, "expand_entities": True},
        "links": {"include_links": True},
        "collections": {"collections": True},
    }[variant]
    if args.ranking is not None:
        options["ranking"] = args.ranking
    recalls, per_cat, latencies, skipped = recall(store, conversations, id_to_dia, args, options)

    print(
        f"\n== variant {variant}: conversations {len(conversations)}, questions scored "
        f"{len(recalls[args.k[0]])}, skipped (no valid evidence) {skipped}, embedder {store.embedder.name}"
    )
    header = "category".ljust(16) + "".join(f"R@{k}".rjust(8) for k in args.k) + "       n"
    print(header)
    print("-" * len(header))
    for cat, name in CATEGORIES.items():
        vals = [per_cat.get((cat, k), []) for k in args.k]
        if not vals[0]:
            continue
        print(
            f"{cat} {name}".ljust(16)
            + "".join(f"{100 * statistics.mean(v):8.1f}" for v in vals)
            + f"{len(vals[0]):8d}"
        )
    print(
        "overall".ljust(16)
        + "".join(f"{100 * statistics.mean(recalls[k]):8.1f}" for k in args.k)
        + f"{len(recalls[args.k[0]]):8d}"
    )
    lat = sorted(latencies)
    p50 = lat[len(lat) // 2]
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
    print(f"search: p50 {p50:.1f} ms  p95 {p95:.1f} ms  (limits {args.k}, embedding the query included)")
    if variant == "links":
        print("(links: R@k counts the top k results plus the notes they link to, up to k more)")


if __name__ == "__main__":
    sys.exit(main())
