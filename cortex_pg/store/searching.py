"""Hybrid search: one call of ``cortex.search_notes`` per query (see its SQL file)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import Alone, Blocking, Plan, Query, Transaction, WithConnection, operation
from cortex_pg.errors import ValidationError
from cortex_pg.store import sql, validation
from cortex_pg.store.ranking import Ranking
from cortex_pg.store.records import SearchResult
from cortex_pg.store.rows import result_from_row, tenant_scoped, vector_literal
from cortex_pg.temporal import names_a_year, parse_instant, query_date_window, without_temporal_keywords

_DEFAULT_RANKING = Ranking().to_json()


def blend(a: list[float], b: list[float], weight: float) -> list[float]:
    """``(1 - weight) * a + weight * b`` scaled to norm 1 (``a`` when that sum is 0): the query
    embedding of :attr:`Ranking.unnamed_query_weight`."""
    mixed = (1 - weight) * np.asarray(a, dtype=np.float64) + weight * np.asarray(b, dtype=np.float64)
    norm = float(np.linalg.norm(mixed))
    return a if norm == 0 else (mixed / norm).tolist()


class QueryVectorCache:
    """A bounded LRU of query text -> embedding (a cache of a pure function of the text and the
    model, so it holds no state the database lacks). Thread-safe.

    Args:
        size: entries kept; 0 turns the cache off.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_many(
        self, model: str, texts: list[str], embed: Callable[[list[str]], list[list[float]]]
    ) -> list[list[float]]:
        """The vectors of ``texts``, embedding (in one call) only those not cached."""
        if self.size <= 0:
            return embed(texts)
        with self._lock:
            found = {t: self._entries.get((model, t)) for t in texts}
            for t, v in found.items():
                if v is not None:
                    self._entries.move_to_end((model, t))
        missing = [t for t, v in found.items() if v is None]
        if missing:
            for t, v in zip(missing, embed(missing), strict=True):
                found[t] = v
        with self._lock:
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            for t in missing:
                self._entries[(model, t)] = found[t]
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return [found[t] for t in texts]


class NoteSearch:
    """The search method of :class:`~cortex_pg.store.MemoryStore` (a mixin over its ``engine``,
    ``embedder`` and ``query_cache``)."""

    def _query_vectors(self, texts: list[str]) -> list[list[float]]:
        def embed(batch: list[str]) -> list[list[float]]:
            vectors = self.embedder.embed(batch)
            self._check_vectors(vectors, len(batch))
            return vectors

        return self.query_cache.get_many(self.embedder.name, texts, embed)

    def embed_query(self, query: str, *, unnamed: str | None = None) -> list[float]:
        """The embedding of ``query`` as :meth:`search` uses it: from the query cache, or
        embedded and checked like every stored vector. With ``unnamed`` (the query without the
        speakers it names: ``cortex.query_without_speakers``, which the caller reads in its
        tenant's transaction), the blend of both by the default
        :attr:`~cortex_pg.store.ranking.Ranking.unnamed_query_weight`, as :meth:`search` searches.

        Raises:
            EmbeddingModelError: the embedder returned a vector without a direction (see
                :func:`cortex_pg.store.writing.check_vectors`).
            EmbeddingDimensionError: a vector of another size than the model's.
        """
        if unnamed is None:
            return self._query_vectors([query])[0]
        plain, without = self._query_vectors([query, unnamed])
        return blend(plain, without, Ranking().unnamed_query_weight)

    @retry_transient
    @tenant_scoped
    @operation
    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 10,
        temporal_weight: float = 0.0,
        date_from: datetime | str | None = None,
        date_to: datetime | str | None = None,
        now: datetime | str | None = None,
        memory_source: str = "all",
        where_filter: Mapping[str, Any] | None = None,
        context: str | None = None,
        touch: bool = True,
        include_links: bool = False,
        link_depth: int = 1,
        entities: bool = False,
        expand_entities: bool = False,
        entity_weight: float = 0.5,
        collections: bool = False,
        ranking: Ranking | Mapping[str, Any] | None = None,
    ) -> Plan[list[SearchResult]]:
        """Hybrid search of one user's notes, in one database call (``cortex.search_notes``).

        Vector candidates (HNSW, cosine over text and context embeddings, weighed by a length
        prior) and BM25 full-text candidates (``cortex.bm25_postings``) are fused by normalised
        scores, widened to the best notes' session neighbours and smoothed with them (see
        ``sql/functions/search_notes/v17.sql`` and README "How search scores"), then blended
        with recency:
        ``score = (1 - temporal_weight) * relevance + temporal_weight * exp(-age_days / 7)``.
        Temporal keywords (yesterday, last, recent, ...) are left out of the full-text query:
        they ask for recency, which ``temporal_weight`` and the date window express. A query
        that names a day or month with its year ("what did I cook on 9 November, 2022?") puts
        the best note of that time first and its other notes ahead of all but strong matches
        from other times (``ranking.date_weight``, 0.3: the search runs within the named window
        and without it, in the same statement).

        Args:
            query: the question or text to match; not blank.
            user_id: the tenant searched (None = ``"default"``). Never widened to other users.
            session_id: restrict to one session; None = all the user's sessions.
            limit: results wanted, 1..10000.
            temporal_weight: recency weight in [0, 1].
            date_from, date_to: window on the note's time, ``date_from <= created_at < date_to``
                (ISO 8601 or datetime; naive = UTC).
            now: the instant ages are measured from (default: the current time).
            memory_source: ``all`` (a note in both tiers is returned once: as its STM copy, or as
                its LTM row when only that row passes the where_filter, window and session, the
                tiers' access counts and times being their own), ``ltm`` or ``stm``.
            where_filter: Chroma-style filter on columns and metadata (``$eq $ne $gt $gte $lt $lte
                $in $nin $contains $and $or $not``), compiled in SQL by ``cortex.compile_filter``;
                the same on both tiers.
            context: text describing the current situation; re-ranks the candidates with
                ``score = 0.3 * score + 0.7 * cos(context, note)`` (``context_score``, the cosine
                in [-1, 1], so the score is in [-0.7, 1]). A context with no visible character
                (whitespace, zero-width spaces: what ``query`` refuses as blank) is no context.
            touch: count returned notes as accessed (access_count, last_accessed_at; drives STM LRU).
                The search's transaction then commits without waiting for the disk
                (``synchronous_commit`` off for it alone): a server crash may lose the last
                fraction of a second of access counts, never consistency.
            include_links: append the notes the results link to (``cortex.linked_notes``, up to
                ``link_depth`` hops, best result's links first), not already returned, at most
                ``limit`` of them, marked ``is_linked=True`` with ``relationship_type`` /
                ``relationship_strength`` / ``relationship_reason`` (Prem Cortex shape); linked
                notes are not touched.
            link_depth: hops followed from each result when ``include_links``, 1..10.
            entities: use the entity signal: the query's entities (offline extraction) make notes
                that mention them a third candidate list, whose coverage joins the fusion at
                weight ``entity_weight`` (0.5) times the entities' specificity.
            expand_entities: also notes mentioning entities one relationship away (half weight).
            entity_weight: weight of the entity list in the fusion, in [0, 10].
            collections: also search the user's smart collections nearest the query and rank
                by ``composite_score = 0.3 * collection_similarity + 0.7 * score`` (see
                :mod:`cortex_pg.collections.search`; offline query enhancement).
            ranking: the ranking's constants (:class:`~cortex_pg.store.ranking.Ranking`, or a
                mapping of some of its attributes); None = the library's defaults.

        Returns:
            Up to ``limit`` results, best first; with ``include_links`` up to ``limit`` linked
            notes after them.

        Raises:
            ValidationError: bad argument (blank query, limit <= 0, weight outside [0, 1], an
                unknown ranking key as ``ranking.<key>``, a flag that is not True or False,
                link_depth outside 1..10, ...).
            EmbeddingModelError: the embedder returned a vector without a direction (zeros, NaN,
                infinite, or too small for float4) for the query or context.
        """
        touch = validation.flag(touch, "touch")
        include_links = validation.flag(include_links, "include_links")
        entities = validation.flag(entities, "entities")
        expand_entities = validation.flag(expand_entities, "expand_entities")
        depth = validation.link_depth(link_depth)
        if validation.flag(collections, "collections"):
            from cortex_pg.collections.search import search_with_collections

            # several searches (each its own plan run) and, with an LLM, concurrent calls
            return (yield Blocking(lambda: search_with_collections(
                self, query, user_id=user_id, session_id=session_id, limit=limit,
                temporal_weight=temporal_weight, date_from=date_from, date_to=date_to, now=now,
                memory_source=memory_source, where_filter=where_filter, context=context, touch=touch,
                include_links=include_links, link_depth=link_depth, entities=entities,
                expand_entities=expand_entities, entity_weight=entity_weight, ranking=ranking,
            )))  # fmt: skip
        query = validation.query(query)
        rank = Ranking.parse(ranking)
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        lim = validation.limit(limit)
        weight = validation.unit_interval(temporal_weight, "temporal_weight")
        source = validation.memory_source(memory_source)
        d_from = parse_instant(date_from, "date_from")
        d_to = parse_instant(date_to, "date_to")
        if d_from and d_to and d_from >= d_to:
            raise ValidationError("date_to", "must be later than date_from")
        at = parse_instant(now, "now") or datetime.now(UTC)
        wf = validation.where_filter(where_filter)
        query_entities: list[str] | None = None
        ent_weight = 0.0
        if entities or expand_entities:
            from cortex_pg.entities.extract import extract_entities

            query_entities = extract_entities(query) or None
            if (
                isinstance(entity_weight, bool)
                or not isinstance(entity_weight, int | float)
                or not (0 <= entity_weight <= 10)
            ):
                raise ValidationError("entity_weight", f"must be a number in [0, 10], got {entity_weight!r}")
            ent_weight = float(entity_weight)
        ctx = validation.context_or_none(context)  # (a blank context, by the query's rule, is none)
        unnamed = None  # the query without the names of the tenant's speakers it names
        if rank.unnamed_query_weight > 0:
            rows = yield Alone(sql.QUERY_WITHOUT_SPEAKERS, {"user_id": uid, "query": query})
            unnamed = rows[0]["unnamed"]
        texts = [query] + ([] if ctx is None else [ctx]) + ([] if unnamed is None else [unnamed])
        vectors = yield Blocking(self._query_vectors, (texts,))
        vector = [
            vectors[0] if unnamed is None else blend(vectors[0], vectors[-1], rank.unnamed_query_weight)
        ]
        params = {
            "where_filter": None if wf is None else json.dumps(wf),
            "context_embedding": None if ctx is None else vector_literal(vectors[1]),
            "user_id": uid,
            "embedding": vector_literal(vector[0]),
            "query": without_temporal_keywords(query),
            "limit": lim,
            "temporal_weight": weight,
            "date_from": d_from,
            "date_to": d_to,
            "now": at,
            "session_id": sid,
            "memory_source": source,
            "model": self.embedder.name,
            "touch": touch,
            "query_entities": query_entities,
            "entity_weight": ent_weight,
            "expand_entities": bool(expand_entities),
            "ranking": None if rank.to_json() == _DEFAULT_RANKING else rank.to_json(),
        }
        statement = sql.SEARCH
        named = None
        if rank.date_weight > 0 and names_a_year(query):  # (dateparser reads it off the event loop)
            named = yield Blocking(query_date_window, (query,))
        if named is not None:
            # the query's named window, within the caller's own (none left: one search)
            focus_from = max(named[0], d_from) if d_from else named[0]
            focus_to = min(named[1], d_to) if d_to else named[1]
            if focus_from < focus_to:
                statement = sql.SEARCH_DATED
                params.update(focus_from=focus_from, focus_to=focus_to, date_weight=rank.date_weight)

        if not include_links:  # the search is one statement: alone, one round trip
            return [result_from_row(r) for r in (yield Alone(statement, params))]

        def body() -> Plan[list[SearchResult]]:
            rows = yield Query(statement, params, "mappings")
            results = [result_from_row(r) for r in rows]
            if results:
                from cortex_pg.store.traversal import expand_results

                results += yield WithConnection(
                    lambda conn: expand_results(conn, uid, results, extra=lim, depth=depth, session_id=sid)
                )
            return results

        return (yield Transaction(body()))
