"""Value types returned by the store: a stored note and a scored search result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Note:
    """A note as stored (no embedding vector).

    Attributes:
        id: UUID string.
        memory_tier: ``"ltm"`` (table ``notes``) or ``"stm"`` (UNLOGGED ``stm_notes``).
        created_at: the memory's own time (caller-supplied or insertion time), aware UTC.
        importance: in [0, 1].
        merged_into: id of the note this one was merged into, else None (LTM only).
    """

    id: str
    user_id: str
    session_id: str
    content: str
    keywords: list[str]
    tags: list[str]
    context: str | None
    category: str | None
    memory_type: str
    metadata: dict[str, Any]
    importance: float
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime
    access_count: int
    memory_tier: str = "ltm"
    merged_into: str | None = None
    evolution_history: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (datetimes as ISO 8601 strings)."""
        return _jsonable(asdict(self))


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A note returned by :meth:`MemoryStore.search`, with its scores.

    Attributes:
        score: final score, ``(1 - w) * relevance_score + w * recency_score``; higher is better.
            When the query names a day or month (``Ranking.date_weight`` d > 0), that score
            times ``1 - d``, plus ``d`` for a note of the named window.
        relevance_score: normalised-score fusion of the vector and BM25 scores, smoothed with the
            note's session neighbours (``search_notes`` v5 and later), an answer at least
            ``Ranking.answer_weight`` of its question's (v12), then, when the query names a
            candidate's speaker, ``(relevance + w * named) / (1 + w)`` with ``w`` =
            ``Ranking.speaker_weight`` and named 1 for a note of that speaker, else 0 (v13), in
            [0, 1]; for a note of a query's named window, its relevance among the window's
            candidates (and its ``vector_rank`` / ``text_rank`` are ranks among those: in a
            dated search a rank may repeat).
        semantic_score: ``(1 - c) * w * cos(query, text) + c * cos(query, context)``: the
            note's text embedding (its best window) weighed by the length prior
            ``w = min(1, sqrt(dl / 24))`` for a note of ``dl`` distinct lexemes, and its context
            embedding (the text's cosine when it has none), ``c`` = the ranking's
            ``context_weight`` (0.5) (``search_notes`` v8), in [-1, 1] (None when searching
            without an embedding, with ``vector_weight`` 0 (the vector ranker is not run), or for
            a note not embedded yet).
        distance: ``1 - semantic_score``, in [0, 2].
        text_score: Okapi BM25 score of the note for the query (0 when no term matched, and with
            ``vector_weight`` 1, which does not run the full-text ranker).
        recency_score: ``exp(-age_days / 7)`` in [0, 1] (0 beyond 4,900 days), age measured from ``now``.
        vector_rank / text_rank: 1-based rank by ``semantic_score`` / ``text_score`` among the
            candidates, None without that signal (or, for text, without a matching term).
        entity_score / entity_rank: the note's coverage of the query's entities (idf-weighted, in
            [0, 1]) and its rank in the entity candidate list, when the entity signal is on.
        context_score: cosine (in [-1, 1]) of the search's context and the note, when a context
            was given; then ``score = 0.3 * blended + 0.7 * context_score``, in [-0.7, 1].
        is_linked: True for a note appended by ``search(include_links=True)`` because a result
            links to it (Prem Cortex result shape); then ``linked_from`` is that result's id and
            ``relationship_type`` / ``relationship_strength`` (in [0, 1]) / ``relationship_reason``
            describe the link.
        search_strategy: ``"collection"`` or ``"global"`` for a search with collections
            (``search(collections=True)``, see :mod:`cortex_pg.collections.search`), else None;
            then ``collection_name`` (the collection's path, None for global results),
            ``collection_similarity`` (cosine(query, centroid) in [-1, 1]), ``query_enhanced``
            (searched with the collection's enhanced query) and ``composite_score``
            (``0.3 * collection_similarity + 0.7 * score``, similarity 0 for global results).
    """

    note: Note
    score: float
    relevance_score: float
    semantic_score: float | None
    distance: float | None
    text_score: float
    recency_score: float
    vector_rank: int | None
    text_rank: int | None
    context_score: float | None = None
    entity_score: float | None = None
    entity_rank: int | None = None
    is_linked: bool = False
    linked_from: str | None = None
    relationship_type: str | None = None
    relationship_strength: float | None = None
    relationship_reason: str | None = None
    search_strategy: str | None = None
    collection_name: str | None = None
    collection_similarity: float | None = None
    query_enhanced: bool | None = None
    composite_score: float | None = None

    @property
    def id(self) -> str:
        return self.note.id

    @property
    def content(self) -> str:
        return self.note.content

    @property
    def memory_tier(self) -> str:
        return self.note.memory_tier

    @property
    def created_at(self) -> datetime:
        return self.note.created_at

    @property
    def metadata(self) -> dict[str, Any]:
        return self.note.metadata

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-friendly dict: the note's fields plus the scores."""
        out = self.note.to_dict()
        out.update(
            score=self.score,
            relevance_score=self.relevance_score,
            semantic_score=self.semantic_score,
            distance=self.distance,
            text_score=self.text_score,
            recency_score=self.recency_score,
            vector_rank=self.vector_rank,
            text_rank=self.text_rank,
            context_score=self.context_score,
            entity_score=self.entity_score,
            entity_rank=self.entity_rank,
            is_linked=self.is_linked,
        )
        if self.search_strategy is not None:
            out.update(
                search_strategy=self.search_strategy,
                collection_name=self.collection_name,
                collection_similarity=self.collection_similarity,
                query_enhanced=self.query_enhanced,
                composite_score=self.composite_score,
            )
        if self.is_linked:
            out.update(
                linked_from=self.linked_from,
                relationship_type=self.relationship_type,
                relationship_strength=self.relationship_strength,
                relationship_reason=self.relationship_reason,
            )
        return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in d.items()}
