"""The constants of the search ranking (``cortex.search_notes`` v8 and later, its ``p_ranking`` argument;
``answer_weight`` since v12, ``speaker_weight`` since v13, its full-text part since v14;
``date_weight`` and ``unnamed_query_weight`` are applied by the library around it).

The defaults are the library's ranking, chosen on LoCoMo dev conversations (see
``sql/functions/search_notes/v9.sql`` and README "Benchmarks" for each constant's measured
range); a caller overrides
any of them per search (``MemoryStore.search(..., ranking={...})``), e.g. to reproduce the
reference rankings of ``benchmarks/locomo_recall.py``.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from cortex_pg.errors import ValidationError

FUSIONS = ("score", "rrf")
#: attributes applied by the library's search statement, not passed to cortex.search_notes
CLIENT_SIDE = ("date_weight", "unnamed_query_weight")


@dataclass(frozen=True)
class Ranking:
    """How a search fuses and smooths its signals.

    Attributes:
        fusion: ``"score"`` (normalised-score fusion: min-max of the semantic score and BM25
            scaled by its maximum over the candidates, weighted) or ``"rrf"`` (reciprocal rank
            fusion, Cormack, Clarke and Buettcher 2009: weight / (rrf_k + rank) per ranker,
            scaled so rank 1 is 1).
        vector_weight: weight of the semantic signal in [0, 1]; BM25 weighs 1 - vector_weight
            (when a search has only one of the two signals, that one counts alone). A ranker
            weighed 0 is not run: 1 is a vector-only search (no full-text candidates; results'
            ``text_score`` 0), 0 a BM25-only one (no HNSW scan; ``semantic_score`` None) unless
            the query has no full-text terms (stop words only), when the vector signal is kept.
        context_weight: share of the note's context embedding (the note read after its session
            predecessor) in its semantic score, in [0, 1]; 0 = the text embedding alone.
        length_prior: d0 of the length prior: the text cosine of a note of dl distinct lexemes
            is multiplied by min(1, sqrt(dl / d0)); 0 turns it off. 0 or in [1, 10000] lexemes.
        smoothing_prev: share of the previous note's relevance (same session) a note takes,
            in [0, 1] (a reply inherits from what it answers).
        smoothing_next: share of the next note's relevance a note takes, in [0, 1].
        expansion: the session neighbours of this many best candidates join the candidates,
            0..50.
        rrf_k: k of reciprocal rank fusion, 1..10000 (used with ``fusion="rrf"``).
        answer_weight: the share of a question's relevance its answer takes, in [0, 1]: a
            long-term candidate whose text has a question mark ending a sentence (not a URL's)
            brings its next long-term note of the session (the answer; none kept in short-term
            memory alone made between them) into the candidates, scored at least
            ``answer_weight`` times the question's relevance (after smoothing). 0 = off.
        speaker_weight: the weight of a note's speaker being named by the query, in [0, 1]: a
            note's speaker is its ``metadata["speaker"]``, a string of at most 200 characters
            (the conversation ingest writes it for each turn; any other value is no speaker),
            named when its words (lower case, letters and digits as the database's
            ``LC_CTYPE`` classifies them) appear in a row among the query's ("What does
            Melanie's son like?" names ``"Melanie"``, "Mel" does not; the query's temporal
            keywords, such as "last", are left out first; a speaker that is a common word,
            ``"user"``, is named by any query that uses it). When the query names the speaker
            of a candidate, every candidate's relevance becomes ``(relevance + speaker_weight
            * named) / (1 + speaker_weight)`` (named 1 or 0), after the smoothing and the answer
            rule: a question about a person is mostly answered by what that person said. The
            words of every speaker of the tenant the query names (its current long-term notes'
            speakers, ``cortex.speaker_counts``) also leave the query's full-text terms, unless
            no term would be left (search v14): a turn that starts with the speaker's name no
            longer matches by the name alone. 0 = off (both).
        date_weight: weight of the dates a query names, in [0, 1]. When the query names a day
            or a month with its year ("on 9 November, 2022", "in May 2023";
            :func:`cortex_pg.temporal.query_date_window`, widened by a day or a week) and that
            window meets the search's own, the search runs within the window and without it,
            and a note of the window scores ``(1 - date_weight) * score + date_weight`` (its
            score in the window's search), any other ``(1 - date_weight) * score``: the named
            time's best note usually comes first (a ``context``, a ``temporal_weight`` or the
            entity signal can still move it down), and a strong match from another time can
            still pass its weaker ones. 0 = off (one search, dates read as words only). Applied
            by the library's search statement, not by ``cortex.search_notes``.
        unnamed_query_weight: the share, in [0, 1], of the query embedded without the names of
            the tenant's speakers it names (read as ``speaker_weight`` reads a name;
            ``cortex.query_without_speakers``: "What activities has Melanie done with her
            family?" -> "What activities has done with her family?"). When the query names one,
            its embedding is ``(1 - w) * e(query) + w * e(query without the names)``,
            normalised: a name pulls the query's embedding toward the turns that address that
            person ("Hey Melanie! ...") more than toward what the person said, which seldom
            holds the name (the reason search v14 leaves names out of the full-text terms).
            Costs one lookup of the tenant's speakers per search and, when a name is found, a
            second embedding (cached like the query's). 0 = off (the query embedded as written,
            no lookup). Applied by the library, which embeds the query, not by
            ``cortex.search_notes``.
    """

    fusion: str = "score"
    vector_weight: float = 0.5
    context_weight: float = 0.5
    length_prior: float = 24.0
    smoothing_prev: float = 0.3
    smoothing_next: float = 0.3
    expansion: int = 5
    rrf_k: float = 60.0
    answer_weight: float = 0.9
    speaker_weight: float = 0.08
    date_weight: float = 0.3
    unnamed_query_weight: float = 0.4

    def __post_init__(self) -> None:
        for key in _RANGES:
            object.__setattr__(self, key, _checked(key, getattr(self, key), "ranking"))
        if self.fusion not in FUSIONS:
            raise ValidationError(
                "ranking.fusion", f"must be one of {', '.join(FUSIONS)}, got {self.fusion!r}"
            )

    @classmethod
    def parse(cls, value: Ranking | Mapping[str, Any] | None, field: str = "ranking") -> Ranking:
        """A ranking from None (the defaults), a :class:`Ranking`, or a mapping of some of its
        attributes (the others keep their defaults).

        Raises:
            ValidationError: not a mapping, an unknown key, or a value of the wrong type or out
                of range; the field is ``ranking.<key>`` (a Ranking built directly checks its
                values alike).
        """
        if value is None:
            return cls()
        if isinstance(value, Ranking):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError(field, f"must be a Ranking or a mapping, got {type(value).__name__}")
        known = {f.name for f in fields(cls)}
        for key in value:
            if key not in known:
                if not isinstance(key, str) or not key or not key.isprintable():
                    # a key that cannot stand in a field name (not text, empty, a lone
                    # surrogate, a control character): named by its JSON form
                    raise ValidationError(
                        field, f"unknown key {json.dumps(str(key))}; known keys: {', '.join(sorted(known))}"
                    )
                raise ValidationError(f"{field}.{key}", f"unknown; known keys: {', '.join(sorted(known))}")
        return replace(cls(), **value)

    def to_json(self) -> str:
        """The ``p_ranking`` argument of ``cortex.search_notes`` (every attribute but
        ``date_weight`` and ``unnamed_query_weight``, which the library applies around it)."""
        return json.dumps({k: v for k, v in asdict(self).items() if k not in CLIENT_SIDE})


_RANGES: dict[str, tuple[float, float]] = {
    "vector_weight": (0, 1),
    "context_weight": (0, 1),
    "length_prior": (0, 10000),
    "smoothing_prev": (0, 1),
    "smoothing_next": (0, 1),
    "expansion": (0, 50),
    "rrf_k": (1, 10000),
    "answer_weight": (0, 1),
    "speaker_weight": (0, 1),
    "date_weight": (0, 1),
    "unnamed_query_weight": (0, 1),
}


def _checked(key: str, raw: object, field: str) -> float | int:
    """``raw`` as the number attribute ``key`` holds (``expansion`` a whole number)."""
    where = f"{field}.{key}"
    if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
        raise ValidationError(where, f"must be a number, got {raw!r}")
    low, high = _RANGES[key]
    # compared before any conversion: an integer too large for a float is out of range, not an
    # OverflowError
    if not (isinstance(raw, numbers.Integral) or math.isfinite(raw)) or not low <= raw <= high:
        raise ValidationError(where, f"must be in [{low}, {high}], got {raw!r}")
    if key == "length_prior" and 0 < raw < 1:
        raise ValidationError(where, f"must be 0 (off) or in [1, {high}] lexemes, got {raw!r}")
    if key == "expansion":
        if raw != int(raw):
            raise ValidationError(where, f"must be a whole number, got {raw!r}")
        return int(raw)
    return float(raw)
