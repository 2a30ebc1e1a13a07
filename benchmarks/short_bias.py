"""Bias toward very short notes: how often they reach the top 5, and remedies tried on the
search's own candidates, on the document benchmark and on LoCoMo.

Usage:
    python benchmarks/short_bias.py [--locomo ../shared/data/locomo-dev.json]
        [--embedding-cache FILE.npz] [--locomo-cache FILE.npz] [--embedder minilm]

For each question, ``MemoryStore.search`` returns its 20 best (from the statement's pool of
max(2 · limit, 20) = 40 candidates) with each candidate's vector score ``v``
(``semantic_score``) and BM25 ``s`` (``text_score``). The pool is then re-ranked in Python by the statement's fusion,
``0.5 · minmax(v') + 0.5 · minmax(s')`` (without the session-neighbour smoothing, so the
``fused`` row is the reference for the remedies), with:

* ``fused``: v' = v, s' = s;
* ``bm25-floor``: s' = BM25 with the document length floored at half the tenant's mean,
  ``dl' = greatest(dl, 0.5 · avgdl)`` (k1 = 1.2, b = 0.75, the statement's idf), read from
  ``cortex.bm25_postings`` / ``bm25_terms`` / ``bm25_corpus``;
* ``vec-prior``: v' = v · least(1, sqrt(distinct_lexemes / 8)), distinct lexemes =
  ``length(notes.tsv)``;
* ``both``: the two together.

Printed per corpus and ranking: R@5 / nDCG@5 (documents: answer passages, as in
``doc_recall.py``; the ``chunk`` mode's notes) or R@5 / R@10 (LoCoMo evidence turns), and the
share of top-5 results under 100 characters. ``sql`` is the statement's own order.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_recall  # noqa: E402

POOL = 20
FLOOR = 0.5  # × avgdl
PRIOR_LEXEMES = 8

BM25_FLOORED = """
WITH q AS (SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', :q)) AS t
           WHERE t.lexeme !~ '[\\\\'']'),
c AS (SELECT doc_count::float8 AS n, total_length::float8 / greatest(doc_count, 1) AS avgdl
      FROM cortex.bm25_corpus WHERE user_id = :u)
SELECT p.note_id::text AS id,
       sum(ln(1 + (c.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) * p.tf * 2.2
           / (p.tf + 1.2 * (1 - 0.75 + 0.75 * greatest(p.dl, :floor * c.avgdl) / c.avgdl))) AS s
FROM cortex.bm25_postings p JOIN q ON q.lexeme = p.lexeme CROSS JOIN c
LEFT JOIN cortex.bm25_terms t ON t.user_id = :u AND t.lexeme = p.lexeme
WHERE p.user_id = :u AND p.note_id = ANY (CAST(:ids AS uuid[]))
GROUP BY p.note_id
"""
LEXEMES = (
    "SELECT id::text, length(tsv) FROM cortex.notes WHERE user_id = :u AND id = ANY (CAST(:ids AS uuid[]))"
)


def _minmax(xs: list[float | None]) -> list[float]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return [0.0] * len(xs)
    lo, hi = min(vals), max(vals)
    return [0.0 if x is None else (1.0 if hi == lo else (x - lo) / (hi - lo)) for x in xs]


def rescorer(store: Any, user: str, variant: str) -> Callable[[str, list[Any]], list[Any]]:
    """Re-rank a pool of results of ``user`` by the fusion with ``variant``'s changes (module doc)."""

    def rescore(query: str, results: list[Any]) -> list[Any]:
        if variant == "sql" or not results:
            return results
        ids = [str(r.id) for r in results]
        v = [r.semantic_score for r in results]
        s = [r.text_score or 0.0 for r in results]
        with store.engine.connect() as conn:
            if variant in ("bm25-floor", "both"):
                floored = dict(
                    conn.execute(
                        text(BM25_FLOORED), {"q": query, "u": user, "ids": ids, "floor": FLOOR}
                    ).all()
                )
                s = [float(floored.get(i, 0.0)) for i in ids]
            if variant in ("vec-prior", "both"):
                lex = dict(conn.execute(text(LEXEMES), {"u": user, "ids": ids}).all())
                v = [
                    None if x is None else x * min(1.0, math.sqrt(lex.get(i, 0) / PRIOR_LEXEMES))
                    for x, i in zip(v, ids, strict=True)
                ]
        fused = [0.5 * a + 0.5 * b for a, b in zip(_minmax(v), _minmax(s), strict=True)]
        order = sorted(range(len(results)), key=lambda k: (-fused[k], ids[k]))
        return [results[k] for k in order]

    return rescore


VARIANTS = ("sql", "fused", "bm25-floor", "vec-prior", "both")


def documents(store: Any) -> None:
    docs, questions, _ = doc_recall.load()
    for mode in ("paragraph", "chunk"):
        info = doc_recall.ingest(store, mode, docs)
        print(f"\ndocuments, mode {mode} ({info['notes']} notes, median {info['median_chars']:.0f} chars)")
        print(f"{'ranking':<12} {'R@5':>6} {'nDCG@5':>7} {'short@5':>8}")
        for variant in VARIANTS:
            m = doc_recall.evaluate(
                store, info["user"], questions, pool=POOL, rescore=rescorer(store, info["user"], variant)
            )
            print(f"{variant:<12} {m['R@5']:>6.3f} {m['nDCG@5']:>7.3f} {m['short_share']:>8.3f}")


def locomo(store: Any, path: Path) -> None:
    from locomo_recall import evidence_ids

    from cortex_pg.ingest import read_locomo

    conversations = list(read_locomo(path))
    id_to_dia: dict[str, str] = {}
    for conv in conversations:
        for nid, item in zip(store.add_many(conv.items, to_stm=True), conv.items, strict=True):
            id_to_dia.setdefault(str(nid), item["metadata"]["dia_id"])
    print(f"\nLoCoMo ({len(id_to_dia)} turns)")
    print(f"{'ranking':<12} {'R@5':>6} {'R@10':>6} {'short@5':>8}")
    for variant in VARIANTS:
        r5, r10, short, shown = [], [], 0, 0
        for conv in conversations:
            known = {item["metadata"]["dia_id"] for item in conv.items}
            rescore = rescorer(store, conv.sample_id, variant)
            for qa in conv.qa:
                ev = evidence_ids(qa.get("evidence", []), known)
                if not ev:
                    continue
                pool = store.search(
                    qa["question"], user_id=conv.sample_id, limit=POOL, now=conv.last_time, touch=False
                )
                ranked = rescore(qa["question"], pool)
                for k, acc in ((5, r5), (10, r10)):
                    top = {id_to_dia.get(str(r.id)) for r in ranked[:k]}
                    acc.append(sum(e in top for e in ev) / len(ev))
                short += sum(len(r.content) < doc_recall.SHORT for r in ranked[:5])
                shown += len(ranked[:5])
        print(f"{variant:<12} {sum(r5) / len(r5):>6.3f} {sum(r10) / len(r10):>6.3f} {short / shown:>8.3f}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, default=None, help="a LoCoMo JSON file (skipped when absent)")
    ap.add_argument("--locomo-cache", type=Path, default=None, help="embedding cache for LoCoMo (.npz)")
    ap.add_argument("--skip-documents", action="store_true")
    args, rest = ap.parse_known_args(argv)
    store, close = doc_recall.open_store(doc_recall.arguments(rest, __doc__))
    try:
        if not args.skip_documents:
            documents(store)
        if args.locomo is not None:
            if args.locomo_cache is not None:
                from locomo_recall import DiskCachedEmbedder

                store.embedder = DiskCachedEmbedder(
                    store.embedder.inner if hasattr(store.embedder, "inner") else store.embedder,
                    args.locomo_cache,
                )
            locomo(store, args.locomo)
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
