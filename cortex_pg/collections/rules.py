"""The constants and pure rules of smart collections (no database, no model).

Thresholds are cosine similarities in [-1, 1] between L2-normalised vectors (a centroid is
compared by direction: ``1 - (centroid <=> query)``, pgvector's cosine distance).

* :data:`CATEGORY_MIN_SIMILARITY` — offline category: a note joins the nearest collection when
  its cosine with that collection's centroid is at least this, else gets :func:`keyword_path`.
* :data:`DISCOVERY_MIN_SIMILARITY` / :data:`DISCOVERY_LIMIT` — search: the user's top 4
  collections by cosine(query, centroid) at or above 0.3 are searched.
* :data:`ENHANCE_MIN_SIMILARITY` — offline query enhancement: a discovered collection whose
  cosine is at least 0.45 appends its query helper's keywords to the query.
* :data:`COLLECTION_WEIGHT` — composite score ``0.3 * collection_similarity + 0.7 * score``
  (Prem Cortex's hybrid retrieval).

Creation and refresh thresholds live in SQL (``sql/functions/collections/v1.sql``): a prefix
becomes a collection at 10 notes (``cortex.collection_min_notes``), unless its parent has at
least 30 notes and it has fewer than 0.3 times the parent's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CATEGORY_MIN_SIMILARITY = 0.5
DISCOVERY_MIN_SIMILARITY = 0.3
DISCOVERY_LIMIT = 4
ENHANCE_MIN_SIMILARITY = 0.45
COLLECTION_WEIGHT = 0.3
HELPER_KEYWORDS = 5
SAMPLE_NOTES = 20
FALLBACK_CATEGORY = "misc"
FORBIDDEN_CATEGORIES = frozenset({"general", "uncategorized", "uncategorised", "misc", "other", "none"})

#: characters of a category (``cortex_pg.store.validation.MAX_CATEGORY_LENGTH``, repeated here
#: to keep this module free of the store); a derived segment is cut to half of it
MAX_CATEGORY_LENGTH = 255
_SEGMENT = re.compile(r"[^a-z0-9]+")
_LLM_PATH = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+){1,3}$")


def slug(text: str) -> str:
    """``text`` as one path segment: lower-case ASCII letters and digits, words joined by ``_``
    (``"Neural networks"`` -> ``"neural_networks"``); ``""`` when nothing is left."""
    return _SEGMENT.sub("_", text.lower()).strip("_")


def keyword_path(keywords: Sequence[str]) -> str:
    """The offline category of a note that is near no collection: the slugs of its first two
    distinct keywords, in the keywords' order (``["Neural networks", "human brain"]`` ->
    ``"neural_networks.human_brain"``), one segment when there is one keyword, ``"misc"`` when
    there is none. The keywords are the note's own (the caller's, else YAKE's, which is
    deterministic), so the same text always gets the same path. A segment is cut to 127
    characters, so the path fits a category's 255."""
    segments: list[str] = []
    for kw in keywords:
        s = slug(kw)[: (MAX_CATEGORY_LENGTH - 1) // 2].strip("_")
        if s and s not in segments:
            segments.append(s)
        if len(segments) == 2:
            break
    return ".".join(segments) or FALLBACK_CATEGORY


def clean_llm_category(value: object) -> str | None:
    """An LLM's category when it follows the rule (lower-case dot path of 2-4 segments of
    ``[a-z0-9_]``, first segment not general/uncategorized/misc/other, at most 255
    characters), else None (the caller falls back to the offline rule)."""
    if not isinstance(value, str):
        return None
    path = value.strip().lower().replace(" ", "_").replace("/", ".")
    if (
        len(path) > MAX_CATEGORY_LENGTH
        or not _LLM_PATH.match(path)
        or path.split(".")[0] in FORBIDDEN_CATEGORIES
    ):
        return None
    return path


def composite_score(collection_similarity: float, score: float) -> float:
    """``0.3 * collection_similarity + 0.7 * score`` (Prem Cortex's composite of a result found
    through a collection; ``score`` is the result's own search score in [0, 1])."""
    return COLLECTION_WEIGHT * collection_similarity + (1 - COLLECTION_WEIGHT) * score


def enhanced_query(query: str, query_helper: str, limit: int = HELPER_KEYWORDS) -> str:
    """``query`` followed by up to ``limit`` words of ``query_helper`` it does not contain yet
    (case-insensitive); ``query`` itself when there is nothing to add."""
    have = {w.lower() for w in re.findall(r"\w+", query)}
    extra = [w for w in query_helper.split() if w.lower() not in have][:limit]
    return f"{query} {' '.join(extra)}" if extra else query
