"""Content analysis: keywords, context, tags (and category) — by LLM, or offline.

Offline (no LLM configured, or the LLM failed): keywords by YAKE (Campos et al., 2020;
single words and two-word phrases, top 5), tags = the keywords' single words lower-cased
(top 3), context ``"General"``. The light processor's keywords follow Prem Cortex: lower-cased
words longer than 3 letters that are not common words, first 5.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from cortex_pg.llm import prompts
from cortex_pg.llm.client import LLMClient, LLMError
from cortex_pg.store import validation

log = logging.getLogger(__name__)

MAX_KEYWORDS = 5
COMMON_WORDS = frozenset(
    [
        "the",
        "a",
        "an",
        "in",
        "on",
        "at",
        "to",
        "for",
        "and",
        "or",
        "but",
        "is",
        "are",
        "was",
        "were",
        "this",
        "that",
        "with",
        "from",
        "have",
        "has",
        "had",
        "will",
        "would",
        "could",
        "should",
        "there",
        "their",
        "they",
        "them",
        "then",
        "than",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "your",
        "about",
        "into",
        "over",
        "just",
        "very",
        "also",
        "some",
        "more",
        "most",
        "such",
        "only",
        "other",
    ]
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")


def light_keywords(content: str, limit: int = MAX_KEYWORDS) -> list[str]:
    """Up to ``limit`` lower-cased words of more than 3 letters that are not common words, in order
    (a word longer than a stored keyword may be, :data:`~cortex_pg.store.validation.MAX_LIST_ITEM_LENGTH`,
    is skipped)."""
    out: list[str] = []
    for word in _WORD.findall(content.lower()):
        word = word.strip("'-")
        if 3 < len(word) <= validation.MAX_LIST_ITEM_LENGTH and word not in COMMON_WORDS and word not in out:
            out.append(word)
        if len(out) == limit:
            break
    return out


def check_analysis(data: dict[str, Any]) -> None:
    """Check an LLM analysis answer against the store's rules for the fields it fills
    (keywords and tags: no control characters, at most 1,000 of at most 255 characters each;
    context: no NUL, at most 10,000 characters; valid Unicode throughout), so
    that an answer the store would refuse takes the offline path instead of failing its job.
    (The category is checked by :func:`~cortex_pg.collections.rules.clean_llm_category`.)

    Raises:
        ValidationError: the first field the store would refuse.
    """
    validation.string_list(data["keywords"], "keywords")
    validation.string_list(data["tags"], "tags")
    validation.note_context(data["context"], "context")


class ContentAnalyzer:
    """Keywords, context and tags for a note; the LLM when given, else the offline path.

    Args:
        llm: an :class:`LLMClient`, or None for offline analysis.
    """

    def __init__(self, llm: LLMClient | None = None) -> None:
        self.llm = llm
        self._yake: Any = None

    def analyze(
        self, content: str, *, with_category: bool = False, existing_categories: str = ""
    ) -> dict[str, Any]:
        """Analyse ``content``.

        Returns:
            ``{"keywords": [str], "context": str, "tags": [str]}`` plus ``"category"`` (a dot
            path, or None offline) when ``with_category``; ``"source"`` says ``"llm"`` or ``"offline"``
            (the LLM failed, or its answer was malformed or held text the store refuses,
            :func:`check_analysis`).
        """
        if self.llm is not None:
            try:
                data = self.llm.complete_json(
                    prompts.analysis_messages(
                        content, with_category=with_category, existing_categories=existing_categories
                    ),
                    prompts.analysis_schema(with_category),
                    "content_analysis",
                    check=check_analysis,
                )
                data["keywords"] = [k for k in data["keywords"] if k.strip()][: MAX_KEYWORDS * 2]
                data["tags"] = [t for t in data["tags"] if t.strip()]
                data["source"] = "llm"
                return data
            except LLMError as exc:
                log.warning("content analysis falls back to the offline path: %s", exc)
        return self.offline(content, with_category=with_category)

    def offline(self, content: str, *, with_category: bool = False) -> dict[str, Any]:
        keywords = self.yake_keywords(content)
        tags: list[str] = []
        for kw in keywords:
            for word in kw.lower().split():
                if word not in tags and len(word) > 2:
                    tags.append(word)
        result: dict[str, Any] = {
            "keywords": keywords,
            "context": "General",
            "tags": tags[:3],
            "source": "offline",
        }
        if with_category:
            result["category"] = None
        return result

    def yake_keywords(self, content: str, limit: int = MAX_KEYWORDS) -> list[str]:
        """Top ``limit`` YAKE keywords (1-2 words, none longer than a stored keyword may be), best
        first; light keywords when YAKE finds none."""
        if self._yake is None:
            import yake

            self._yake = yake.KeywordExtractor(lan="en", n=2, dedupLim=0.7, top=limit * 2)
        try:
            found = [kw for kw, _score in self._yake.extract_keywords(content)]
        except Exception:  # noqa: BLE001 - YAKE fails on odd inputs (e.g. only punctuation)
            found = []
        out: list[str] = []
        for kw in found:
            if len(kw.strip()) > validation.MAX_LIST_ITEM_LENGTH:
                continue
            low = kw.lower()
            covered = any(low in o.lower().split() or low == o.lower() for o in out)
            if not covered:
                out.append(kw)
            if len(out) == limit:
                break
        return out or light_keywords(content, limit)
