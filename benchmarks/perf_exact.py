"""Exact references for the speed benchmark: brute-force cosine top-k and hybrid search in Python.

``exact_hybrid`` recomputes, over every note of a tenant, the ranking that
``cortex.search_notes`` (``sql/functions/search_notes/v7.sql``) documents, so the benchmark can
measure how far the database's bounded candidate lists stray from it:

* v = the mean of the query's cosine with the note's text embedding, weighed by the length
  prior ``w = least(1, sqrt(dl / LENGTH_PRIOR_LEXEMES))`` (dl: the note's distinct lexemes), and
  with its context embedding (the text's cosine, unweighed, when it has none); vector candidates: the ``pool`` notes whose
  text embedding is nearest;
* s = Okapi BM25 over the query's lexemes (``to_tsvector('english')``, without quotes or
  backslashes, in order of first position, at most 64), k1 = 1.2, b = 0.75,
  ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, N and df over the tenant's current notes,
  document length = number of distinct lexemes, tf = number of positions (0 without a match);
  text candidates: every note holding a query lexeme (the database bounds them per term);
* fusion over the candidates U: ``rel = 0.5 minmax(v) + 0.5 s / max(s)`` over the signals
  present (minmax of equal values: 1; s / max(s): 0 when no candidate matched a term);
* expansion: the session neighbours (previous and next note by time, then insertion order) of
  the 5 best by rel join, scored with U's bounds;
* smoothing: ``r = minmax(rel)`` over the expanded set (rel itself when all are equal),
  ``relevance = (r + 0.3 max(r_prev,
  r_next)) / 1.3`` (a neighbour counts only when it is itself a candidate);
* ``pool = max(2 * limit, 20)``; results by relevance descending, ties by id.

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
LENGTH_PRIOR_LEXEMES = 24  # search_notes v7: least(1, sqrt(dl / 24)) weighs the text cosine
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
SELECT n.id::text AS id, n.tsv::text AS tsv, e.embedding::text AS embedding, c.embedding::text AS context,
       n.session_id, n.created_at, n.seq
FROM cortex.notes n
JOIN cortex.embeddings e ON e.user_id = n.user_id AND e.note_id = n.id AND e.model = :model
                        AND e.kind = 'text' AND e.window_no = 0
LEFT JOIN cortex.embeddings c ON c.user_id = n.user_id AND c.note_id = n.id AND c.model = :model
                             AND c.kind = 'context'
WHERE n.user_id = :user_id AND n.merged_into IS NULL
"""


def length_prior(dl: float) -> float:
    """The weight of a note's text cosine for a note of ``dl`` distinct lexemes, in [0, 1]."""
    return min(1.0, math.sqrt(dl / LENGTH_PRIOR_LEXEMES))


def pool_size(limit: int) -> int:
    """Candidates per ranker: ``max(2 * limit, 20)``, at most 1000."""
    return min(max(2 * limit, 20), 1000)


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
    contexts: np.ndarray | None = None
    prev: list[int | None] = field(default_factory=list)
    next: list[int | None] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        ids: list[str],
        vectors: np.ndarray,
        lexemes: list[dict[str, int]],
        contexts: np.ndarray | None = None,
        order: list[tuple] | None = None,
    ) -> TenantIndex:
        """``contexts``: context embeddings (rows of NaN where a note has none); ``order``: per
        row (session, created_at, seq), which gives each note's session neighbours."""
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for row, terms in enumerate(lexemes):
            for lex, tf in terms.items():
                postings[lex].append((row, tf))
        dl = np.array([len(t) for t in lexemes], dtype=np.float64)
        prev: list[int | None] = [None] * len(ids)
        nxt: list[int | None] = [None] * len(ids)
        if order is not None:
            by_session: dict[object, list[int]] = defaultdict(list)
            for row, (session, *_rest) in enumerate(order):
                by_session[session].append(row)
            for rows in by_session.values():
                rows.sort(key=lambda r: order[r][1:])
                for a, b in zip(rows, rows[1:], strict=False):
                    nxt[a], prev[b] = b, a
        return cls(list(ids), np.asarray(vectors, dtype=np.float32), dict(postings), dl, contexts, prev, nxt)

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
    ctx = (
        np.stack([parse_vector(r.context) if r.context else np.full(vecs.shape[1], np.nan) for r in rows])
        if rows
        else None
    )
    order = [(r.session_id, r.created_at, r.seq) for r in rows]
    return TenantIndex.build(ids, vecs, [parse_tsvector(r.tsv) for r in rows], ctx, order)


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


def _minmax(values: dict[int, float], lo: float, hi: float, flat: str = "one") -> dict[int, float]:
    """Min-max normalisation; when ``hi == lo`` every value maps to 1 (``flat="one"``) or stays
    itself (``"keep"``, relevance)."""
    if hi > lo:
        return {k: min(max((x - lo) / (hi - lo), 0.0), 1.0) for k, x in values.items()}
    if flat == "keep":
        return dict(values)
    return {k: 1.0 for k in values}


def exact_hybrid(
    index: TenantIndex,
    query_vector: np.ndarray | None,
    terms: list[str],
    limit: int,
    distances: np.ndarray | None = None,
    context_distances: np.ndarray | None = None,
) -> list[tuple[str, float]]:
    """The documented hybrid ranking over all of the tenant's notes: ``[(id, relevance)]``, best first.

    ``distances`` / ``context_distances``: per-row cosine distances of the text and context
    embeddings to use instead of computing them (pgvector's own, so near-ties break as in the
    database; NaN where a note has no context embedding); the vector signal is on when a query
    vector or ``distances`` is given.
    """
    pool = pool_size(limit)
    vector_on = query_vector is not None or distances is not None
    v: dict[int, float] = {}
    if vector_on:
        d_text = cosine_distances(index.vectors, query_vector) if distances is None else np.asarray(distances)
        if context_distances is not None:
            d_ctx = np.asarray(context_distances, dtype=np.float64)
        elif index.contexts is not None and query_vector is not None:
            d_ctx = cosine_distances(np.nan_to_num(index.contexts), query_vector)
            d_ctx[np.isnan(index.contexts).any(axis=1)] = np.nan
        else:
            d_ctx = np.full(len(d_text), np.nan)
        nearest = sorted(range(index.n), key=lambda r: (d_text[r], index.ids[r]))[:pool]
        v_all = {}
        for r in range(index.n):
            text_cos = length_prior(index.dl[r]) * (1 - d_text[r])
            context_cos = 1 - (d_text[r] if np.isnan(d_ctx[r]) else d_ctx[r])
            v_all[r] = (text_cos + context_cos) / 2
    score, _cov = bm25_scores(index, terms) if terms else ({}, {})
    pool_rows = set(nearest if vector_on else []) | set(score)
    if not pool_rows:
        return []

    def signals(rows: set[int]) -> tuple[dict[int, float], dict[int, float]]:
        return ({r: v_all[r] for r in rows} if vector_on else {}), {r: score.get(r, 0.0) for r in rows}

    v, s = signals(pool_rows)
    weights = (0.5 if vector_on else 0.0) + (0.5 if terms else 0.0)
    v_lo, v_hi = (min(v.values()), max(v.values())) if v else (0.0, 0.0)
    s_hi = max(s.values())

    def fuse(rows: set[int], v: dict[int, float], s: dict[int, float]) -> dict[int, float]:
        mv = _minmax(v, v_lo, v_hi)
        ms = {r: (min(x / s_hi, 1.0) if s_hi > 0 else 0.0) for r, x in s.items()}
        return {
            r: ((0.5 * mv[r] if vector_on else 0.0) + (0.5 * ms[r] if terms else 0.0)) / max(weights, 1e-9)
            for r in rows
        }

    rel = fuse(pool_rows, v, s)
    top = sorted(rel, key=lambda r: (-rel[r], index.ids[r]))[:5]
    extra = {n for r in top for n in (index.prev[r], index.next[r]) if n is not None} - pool_rows
    if extra:
        rel.update(fuse(extra, *signals(extra)))
    lo, hi = min(rel.values()), max(rel.values())
    r_norm = _minmax(rel, lo, hi, "keep")
    out = []
    for r, x in r_norm.items():
        neighbours = [r_norm.get(n, 0.0) for n in (index.prev[r], index.next[r]) if n is not None]
        out.append((index.ids[r], (x + 0.3 * max(neighbours, default=0.0)) / 1.3))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out[:limit]


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
