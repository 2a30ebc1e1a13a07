"""Exact references for the speed benchmark: brute-force cosine top-k and hybrid search in Python.

``exact_hybrid`` recomputes, over every note of a tenant, the ranking that
``cortex.search_notes`` (``sql/functions/search_notes/v4.sql``) documents, so the benchmark can
measure how far the database's bounded candidate lists stray from it:

* vector list: cosine distance ``1 - a.b / (|a| |b|)``, ascending, ties by id; its top ``pool``;
* text list: Okapi BM25 over the query's lexemes (``to_tsvector('english')``, without quotes or
  backslashes, in order of first position, at most 64), k1 = 1.2, b = 0.75,
  ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, N and df over the tenant's current notes,
  document length = number of distinct lexemes, tf = number of positions; notes that contain a
  query lexeme, by score descending, ties by id; its top ``pool``;
* fusion: coverage-weighted reciprocal rank fusion, k = 60,
  ``relevance = (1/(60 + rank_vec) + cov/(60 + rank_text)) * 61 / rankers`` with
  ``cov = sum(idf of the query terms the note holds) / sum(idf of all query terms)``;
* ``pool = max(2 * limit, 40)``; results by relevance descending, ties by id.

Ids are compared as strings: PostgreSQL orders uuids bytewise, as their lowercase hex text.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import text

K1 = 1.2
B = 0.75
RRF_K = 60

_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")

# the query's lexemes exactly as search_notes v4 takes them
QUERY_TERMS_SQL = r"""
SELECT t.lexeme
FROM unnest(to_tsvector('english', left(coalesce(CAST(:q AS text), ''), 100000))) AS t
WHERE t.lexeme !~ '[\\'']'
ORDER BY t.positions[1]
LIMIT 64
"""

TENANT_SQL = """
SELECT n.id::text AS id, n.tsv::text AS tsv, e.embedding::text AS embedding
FROM cortex.notes n
JOIN cortex.embeddings e ON e.user_id = n.user_id AND e.note_id = n.id AND e.model = :model
WHERE n.user_id = :user_id AND n.merged_into IS NULL
"""


def pool_size(limit: int) -> int:
    """Candidates per ranker: ``max(2 * limit, 40)``, at most 1000."""
    return min(max(2 * limit, 40), 1000)


def parse_tsvector(value: str) -> dict[str, int]:
    """``{lexeme: tf}`` of a tsvector's text form (``'word':1,3 'other':2``); tf = positions, 1 if none."""
    out: dict[str, int] = {}
    for m in _LEXEME.finditer(value or ""):
        out[m.group(1).replace("''", "'")] = len(m.group(2).split(",")) if m.group(2) else 1
    return out


def parse_vector(value: str) -> np.ndarray:
    """A pgvector text literal (``[0.1,0.2]``) as float32."""
    return np.array(value.strip("[]").split(","), dtype=np.float32)


@dataclass
class TenantIndex:
    """One tenant's notes for exact search: ids, unit-free vectors and an inverted index.

    Attributes:
        ids: note ids (uuid text), row order of ``vectors``.
        vectors: float32 array (n, dim).
        postings: lexeme -> list of (row, tf).
        dl: distinct lexemes per row.
    """

    ids: list[str]
    vectors: np.ndarray
    postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    dl: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def build(cls, ids: list[str], vectors: np.ndarray, lexemes: list[dict[str, int]]) -> TenantIndex:
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for row, terms in enumerate(lexemes):
            for lex, tf in terms.items():
                postings[lex].append((row, tf))
        dl = np.array([len(t) for t in lexemes], dtype=np.float64)
        return cls(list(ids), np.asarray(vectors, dtype=np.float32), dict(postings), dl)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def avgdl(self) -> float:
        return max(float(self.dl.sum()) / max(self.n, 1), 1.0)


def load_tenant(conn, user_id: str, model: str) -> TenantIndex:  # noqa: ANN001
    """The tenant's current long-term notes as a :class:`TenantIndex` (vectors as stored)."""
    rows = conn.execute(text(TENANT_SQL), {"user_id": user_id, "model": model}).all()
    ids = [r.id for r in rows]
    vecs = np.stack([parse_vector(r.embedding) for r in rows]) if rows else np.zeros((0, 1), np.float32)
    return TenantIndex.build(ids, vecs, [parse_tsvector(r.tsv) for r in rows])


def query_terms(conn, query: str) -> list[str]:  # noqa: ANN001
    """The query's lexemes as search_notes takes them (see ``QUERY_TERMS_SQL``)."""
    return list(conn.execute(text(QUERY_TERMS_SQL), {"q": query}).scalars())


def cosine_distances(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``1 - cos(row, query)`` for every row, in float64."""
    v = vectors.astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1) * np.linalg.norm(q)
    return 1.0 - (v @ q) / np.where(norms == 0, 1.0, norms)


def exact_vector_rows(
    vectors: np.ndarray,
    query: np.ndarray | None,
    k: int,
    ids: list[str] | None = None,
    distances: np.ndarray | None = None,
) -> list[int]:
    """Rows of the ``k`` nearest vectors by cosine distance, ties by id (or row).

    ``distances`` (one per row) replaces the computed ones, e.g. pgvector's own (float32
    arithmetic), where near-ties must break as in the database.
    """
    if len(vectors) == 0:
        return []
    d = cosine_distances(vectors, query) if distances is None else np.asarray(distances, dtype=np.float64)
    keys = ids if ids is not None else list(range(len(d)))
    k = min(k, len(d))
    cand = np.argpartition(d, 4 * k - 1)[: 4 * k] if len(d) > 4 * k else np.arange(len(d))
    cand = sorted(cand.tolist(), key=lambda r: (d[r], keys[r]))
    return cand[:k]


def bm25_scores(index: TenantIndex, terms: list[str]) -> tuple[dict[int, float], dict[int, float]]:
    """BM25 score and idf coverage of every row holding one of ``terms`` (see the module doc)."""
    n = index.n
    avgdl = index.avgdl
    idf = {}
    for t in terms:
        df = len(index.postings.get(t, ()))
        idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    total_idf = sum(idf.values())
    score: dict[int, float] = defaultdict(float)
    held: dict[int, float] = defaultdict(float)
    for t in terms:
        for row, tf in index.postings.get(t, ()):
            dl = index.dl[row]
            score[row] += idf[t] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
            held[row] += idf[t]
    cov = {r: (h / total_idf if total_idf else 0.0) for r, h in held.items()}
    return dict(score), cov


def exact_hybrid(
    index: TenantIndex,
    query_vector: np.ndarray | None,
    terms: list[str],
    limit: int,
    distances: np.ndarray | None = None,
) -> list[tuple[str, float]]:
    """The documented hybrid ranking over all of the tenant's notes: ``[(id, relevance)]``, best first.

    ``distances``: per-row cosine distances to use instead of computing them (see
    :func:`exact_vector_rows`); the vector ranker is on when either is given.
    """
    pool = pool_size(limit)
    rankers = 0
    vec_rank: dict[int, int] = {}
    txt: dict[int, tuple[int, float]] = {}
    if query_vector is not None or distances is not None:
        rankers += 1
        nearest = exact_vector_rows(index.vectors, query_vector, pool, index.ids, distances)
        for r, row in enumerate(nearest, 1):
            vec_rank[row] = r
    if terms:
        rankers += 1
        score, cov = bm25_scores(index, terms)
        ranked = sorted(score, key=lambda row: (-score[row], index.ids[row]))[:pool]
        txt = {row: (r, cov[row]) for r, row in enumerate(ranked, 1)}
    fused = []
    for row in set(vec_rank) | set(txt):
        rel = 0.0
        if row in vec_rank:
            rel += 1.0 / (RRF_K + vec_rank[row])
        if row in txt:
            rel += txt[row][1] / (RRF_K + txt[row][0])
        fused.append((index.ids[row], rel * (RRF_K + 1) / max(rankers, 1)))
    fused.sort(key=lambda x: (-x[1], x[0]))
    return fused[:limit]


def recall(found: list, truth: list) -> float:
    """``|found ∩ truth| / |truth|`` (1.0 when truth is empty)."""
    if not truth:
        return 1.0
    return len(set(found) & set(truth)) / len(truth)


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 / mean of latencies in ms."""
    if not ms:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan, "mean": math.nan, "n": 0}
    a = np.asarray(ms)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "n": len(ms),
    }
