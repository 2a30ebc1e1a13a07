"""Search with collections: the global search plus a search inside each relevant collection.

1. Global: :meth:`MemoryStore.search` over the user's notes, as without collections.
2. Discovery (one SQL statement, :data:`repository.DISCOVER`): the user's top 4 collections by
   cosine(query, centroid) >= 0.3 (:data:`rules.DISCOVERY_MIN_SIMILARITY`).
3. Per collection, an :data:`Enhancer` decides whether it is relevant and with which query to
   search it: offline (:func:`offline_enhancer`) every discovered collection is relevant, and
   one with cosine >= 0.45 appends its query helper's keywords; with an LLM
   (:class:`LLMEnhancer`) one ``{relevant, enhanced_query}`` call per collection, the calls
   concurrent.
4. Each relevant collection is searched with ``cortex.search_notes`` restricted to its notes
   by the filter ``{"category": {"$under": path}}`` (whole path segments), AND-ed with the
   caller's where_filter; the same temporal weight, date window, session, tiers and ``now``
   as the global search, so recency and the window apply to every result.
5. Every result gets ``composite_score = 0.3 * collection_similarity + 0.7 * score``, the
   similarity being 0 for a result found only by the global search; a note found more than
   once keeps its best composite (a collection result wins a tie). Results are ordered by
   composite score, best first, and cut to ``limit``.

The query embedding is computed once per distinct text: the texts are embedded in one batch
before the searches, which then find them in the store's query cache.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from cortex_pg.collections import repository
from cortex_pg.collections.rules import (
    DISCOVERY_LIMIT,
    DISCOVERY_MIN_SIMILARITY,
    ENHANCE_MIN_SIMILARITY,
    composite_score,
    enhanced_query,
)
from cortex_pg.errors import translate_db_errors
from cortex_pg.llm import prompts
from cortex_pg.llm.client import LLMClient, LLMError
from cortex_pg.store import sql, validation
from cortex_pg.store.records import SearchResult
from cortex_pg.store.rows import vector_literal
from cortex_pg.temporal import parse_instant

if TYPE_CHECKING:
    from cortex_pg.store.memory_store import MemoryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to search a collection, and with which query (``enhanced``: it differs from the
    caller's)."""

    relevant: bool
    query: str
    enhanced: bool


#: (query, discovered collections) -> one Decision per collection, in order
Enhancer = Callable[[str, Sequence[repository.CollectionHit]], list[Decision]]


def offline_enhancer(query: str, hits: Sequence[repository.CollectionHit]) -> list[Decision]:
    """Every discovered collection is relevant; cosine >= 0.45 appends up to 5 query-helper words
    the query lacks (:func:`rules.enhanced_query`)."""
    out = []
    for hit in hits:
        q = enhanced_query(query, hit.query_helper) if hit.similarity >= ENHANCE_MIN_SIMILARITY else query
        out.append(Decision(True, q, q != query))
    return out


class LLMEnhancer:
    """One ``{relevant, enhanced_query}`` LLM call per collection (``prompts.enhance_messages``),
    run concurrently; a failed call falls back to :func:`offline_enhancer` for that collection."""

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm

    def __call__(self, query: str, hits: Sequence[repository.CollectionHit]) -> list[Decision]:
        def decide(hit: repository.CollectionHit) -> Decision:
            try:
                data = self.llm.complete_json(
                    prompts.enhance_messages(query, hit.path, hit.description, hit.query_helper),
                    prompts.ENHANCE_SCHEMA,
                    "collection_query",
                )
            except LLMError as exc:
                log.warning("collection %s: query enhanced offline: %s", hit.path, exc)
                return offline_enhancer(query, [hit])[0]
            q = data["enhanced_query"].strip() or query
            return Decision(bool(data["relevant"]), q, q != query)

        if not hits:
            return []
        with ThreadPoolExecutor(max_workers=len(hits)) as pool:
            return list(pool.map(decide, hits))


def _within(where_filter: Mapping[str, Any] | None, path: str) -> dict[str, Any]:
    inside = {"category": {"$under": path}}
    return inside if not where_filter else {"$and": [dict(where_filter), inside]}


def search_with_collections(
    store: MemoryStore,
    query: str,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    limit: int = 10,
    where_filter: Mapping[str, Any] | None = None,
    now: datetime | str | None = None,
    touch: bool = True,
    include_links: bool = False,
    link_depth: int = 1,
    enhancer: Enhancer | None = None,
    **options: Any,
) -> list[SearchResult]:
    """Search with collections (see the module doc); the arguments are those of
    :meth:`MemoryStore.search`, plus ``enhancer`` (default :func:`offline_enhancer`).

    Returns:
        Up to ``limit`` results by ``composite_score`` (in [-0.3, 1]), best first, each with
        ``search_strategy`` (``"collection"`` or ``"global"``), ``collection_name`` and
        ``collection_similarity`` (cosine in [-1, 1]; None for global results),
        ``query_enhanced``; with ``include_links`` the linked notes after them.

    Raises:
        ValidationError: bad arguments (as :meth:`MemoryStore.search`).
    """
    q = validation.query(query)
    uid = validation.scope_id(user_id, "user_id")
    lim = validation.limit(limit)
    touch = validation.flag(touch, "touch")
    include_links = validation.flag(include_links, "include_links")
    depth = validation.link_depth(link_depth)
    at = parse_instant(now, "now") or datetime.now(UTC)
    common = dict(options, user_id=uid, session_id=session_id, limit=lim, now=at, touch=False)
    found = [
        dataclasses.replace(
            r, search_strategy="global", query_enhanced=False, composite_score=composite_score(0.0, r.score)
        )
        for r in store.search(q, where_filter=where_filter, **common)
    ]
    [vector] = store._query_vectors([q])
    with translate_db_errors(), store.engine.connect() as conn:
        hits = repository.discover(
            conn,
            uid,
            store.embedder.name,
            vector_literal(vector),
            min_similarity=DISCOVERY_MIN_SIMILARITY,
            limit=DISCOVERY_LIMIT,
        )
    decisions = (enhancer or offline_enhancer)(q, hits)
    wanted = [d for d in decisions if d.relevant]
    if wanted:
        store._query_vectors(list(dict.fromkeys(d.query for d in wanted)))  # one batch, then cached
    for hit, decision in zip(hits, decisions, strict=True):
        if not decision.relevant:
            continue
        found += [
            dataclasses.replace(
                r,
                search_strategy="collection",
                collection_name=hit.path,
                collection_similarity=hit.similarity,
                query_enhanced=decision.enhanced,
                composite_score=composite_score(hit.similarity, r.score),
            )
            for r in store.search(decision.query, where_filter=_within(where_filter, hit.path), **common)
        ]
    best: dict[str, SearchResult] = {}
    for r in sorted(found, key=lambda r: r.search_strategy != "collection"):  # collections first: win ties
        if r.id not in best or r.composite_score > best[r.id].composite_score:
            best[r.id] = r
    results = sorted(best.values(), key=lambda r: (-r.composite_score, r.id))[:lim]
    if results and (touch or include_links):
        with translate_db_errors(), store.engine.begin() as conn:
            if touch:
                conn.execute(text(sql.TOUCH), {"user_id": uid, "ids": [r.id for r in results]})
            if include_links:
                from cortex_pg.store.traversal import expand_results

                results += expand_results(conn, uid, results, extra=lim, depth=depth, session_id=session_id)
    return results
