"""Evolution decisions: the Prem Cortex JSON shape, its validation, and the offline heuristic.

A decider is any callable ``(note, neighbours) -> mapping`` returning the shape the Prem
Cortex evolution prompt asks of the LLM (``_evolution_system_prompt``)::

    {"should_evolve": bool,
     "actions": ["strengthen" | "update_neighbor" | "merge_memories", ...],
     "suggested_connections": [{"id": str, "type": str, "strength": float, "reason": str}],
     "tags_to_update": [str],                  # new tags of the NEW note
     "new_context_neighborhood": [str],        # per neighbour, same order
     "new_tags_neighborhood": [[str]],         # per neighbour, same order
     "merge_candidates": [{"id": str, "merge_strategy": "combine"|"augment"|"replace",
                           "reasoning": str}]}

Ids are a neighbour's index (``"0"``, ``"1"``, ...) or its exact id; anything else is dropped.
With no LLM configured :func:`heuristic_decider` decides from the cosine similarities and the
specific entities a neighbour shares with the note (see :func:`heuristic_decision`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cortex_pg.errors import ValidationError
from cortex_pg.store import validation

ACTIONS = ("strengthen", "update_neighbor", "merge_memories")
MERGE_STRATEGIES = ("combine", "augment", "replace")
MERGE_THRESHOLD = 0.95
LINK_THRESHOLD = 0.7
#: The entity rule: a shared entity counts when idf = ln((N + 1) / df) >= ln 10, i.e. it is
#: mentioned by at most about one in ten of the user's notes (N current notes, df notes
#: mentioning it). A speaker or the user's own name, in most notes, has idf near 0.
ENTITY_MIN_IDF = math.log(10)
#: The entity rule links only notes at least this similar (cosine), so that a rare name
#: shared by two unrelated notes (or a rare extraction mistake) is not enough on its own.
ENTITY_MIN_COSINE = 0.3


@dataclass(frozen=True, slots=True)
class NoteView:
    """What a decider sees of a note (the new note or a neighbour).

    Attributes:
        cosine: cosine similarity to the new note's embedding in [-1, 1] (neighbours only;
            1.0 for the note itself).
        shared_entity: the most specific entity this neighbour shares with the new note among
            those with idf >= :data:`ENTITY_MIN_IDF` (neighbours only; None when none).
        shared_idf: that entity's idf = ln((N + 1) / df) over the user's notes.
        specificity: ``shared_idf / ln(N + 1)`` in (0, 1] (1 would be an entity of one note).
    """

    id: uuid.UUID
    content: str
    keywords: list[str]
    tags: list[str]
    context: str | None
    category: str | None
    cosine: float = 1.0
    shared_entity: str | None = None
    shared_idf: float = 0.0
    specificity: float = 0.0


#: ``decider(note, neighbours)`` -> the decision (a mapping, or its JSON text). A decider whose
#: ``instant`` attribute is true (no I/O, e.g. :func:`heuristic_decider`) is asked inside the
#: job's transaction; any other (an LLM) before it, holding no lock (see evolution.worker).
Decider = Callable[[NoteView, Sequence[NoteView]], Mapping[str, Any] | str]


@dataclass(frozen=True, slots=True)
class SuggestedLink:
    ref: str
    type: str
    strength: float
    reason: str | None


@dataclass(frozen=True, slots=True)
class MergeCandidate:
    ref: str
    strategy: str
    reasoning: str | None


@dataclass(frozen=True, slots=True)
class Decision:
    """A validated decision (see the module doc for the fields)."""

    should_evolve: bool
    actions: tuple[str, ...]
    suggested_connections: list[SuggestedLink] = field(default_factory=list)
    tags_to_update: list[str] = field(default_factory=list)
    new_context_neighborhood: list[str] = field(default_factory=list)
    new_tags_neighborhood: list[list[str]] = field(default_factory=list)
    merge_candidates: list[MergeCandidate] = field(default_factory=list)


def _strings(value: Any, name: str) -> list[str]:
    """A list of tags (or actions) as the store keeps tags: stripped, blanks and repeats dropped.

    Raises:
        ValidationError: not a list of strings or more than the store's 1,000 (``name``), or
            a string with a NUL or other control character or a lone surrogate, or longer than
            255 characters (``name[i]``).
    """
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(name, "must be a list of strings")
    return validation.string_list(value, name)


def _text(value: str, name: str) -> str:
    """A text of the decision (a link type, a merge's reasoning) as given, when PostgreSQL
    text holds it (a link's reason and a context are checked as the store checks them).

    Raises:
        ValidationError: a NUL character or a lone surrogate (``name``).
    """
    validation.short_text(value, name)
    return value


def _objects(value: Any, name: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValidationError(name, "must be a list of objects")
    return value


def parse_decision(raw: Mapping[str, Any] | str) -> Decision:
    """Validate a decider's answer (a mapping or its JSON text) into a :class:`Decision`.

    Lenient where the original is: unknown actions are dropped, strengths are clamped to
    [0, 1], a missing link type is ``related``, an unknown merge strategy is ``combine``.
    Strict where the store is: every string it would write must be one PostgreSQL text holds
    (no NUL, no lone surrogate), tags have no control characters and the store's limits, as a
    note's tags, and a link's reason and a context are no longer than the store takes them.

    Raises:
        ValidationError: not JSON / not an object, ``should_evolve`` not a boolean, a field
            of the wrong type, or a string the store would refuse (field named ``decision.<key>``).
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValidationError("decision", f"not valid JSON: {exc.msg}") from exc
    if not isinstance(raw, Mapping):
        raise ValidationError("decision", "must be a JSON object")
    should = raw.get("should_evolve")
    if not isinstance(should, bool):
        raise ValidationError("decision.should_evolve", "must be true or false")
    actions = tuple(a for a in _strings(raw.get("actions"), "decision.actions") if a in ACTIONS)
    links = []
    for i, c in enumerate(_objects(raw.get("suggested_connections"), "decision.suggested_connections")):
        strength = c.get("strength", 0.5)
        if isinstance(strength, bool) or not isinstance(strength, int | float):
            raise ValidationError(f"decision.suggested_connections[{i}].strength", "must be a number")
        link_type = c.get("type") if isinstance(c.get("type"), str) and c.get("type").strip() else "related"
        where = f"decision.suggested_connections[{i}]"
        links.append(
            SuggestedLink(
                str(c.get("id", "")).strip(),
                _text(link_type.strip()[:64], f"{where}.type"),
                min(1.0, max(0.0, float(strength))),
                validation.link_reason(str(c["reason"]), f"{where}.reason")
                if c.get("reason") is not None
                else None,
            )
        )
    tags_hood = raw.get("new_tags_neighborhood") or []
    if not isinstance(tags_hood, list):
        raise ValidationError("decision.new_tags_neighborhood", "must be a list of lists of strings")
    merges = [
        MergeCandidate(
            str(m.get("id", "")).strip(),
            m.get("merge_strategy") if m.get("merge_strategy") in MERGE_STRATEGIES else "combine",
            _text(str(m["reasoning"]), f"decision.merge_candidates[{i}].reasoning")
            if m.get("reasoning") is not None
            else None,
        )
        for i, m in enumerate(_objects(raw.get("merge_candidates"), "decision.merge_candidates"))
    ]
    return Decision(
        should_evolve=should,
        actions=actions,
        suggested_connections=links,
        tags_to_update=_strings(raw.get("tags_to_update"), "decision.tags_to_update"),
        new_context_neighborhood=[
            validation.note_context(c, f"decision.new_context_neighborhood[{i}]")
            for i, c in enumerate(raw.get("new_context_neighborhood") or [])
            if isinstance(c, str)
        ],
        new_tags_neighborhood=[
            _strings(t, f"decision.new_tags_neighborhood[{i}]") for i, t in enumerate(tags_hood)
        ],
        merge_candidates=merges,
    )


def resolve(ref: str, note: NoteView, neighbours: Sequence[NoteView]) -> NoteView | None:
    """The neighbour a decision id refers to: an index ``"0"``.. or a neighbour's exact id.

    Returns None for anything else (out of range, an id that is not a neighbour, the note itself):
    decisions never reach notes that were not shown.
    """
    if ref.isdigit():
        i = int(ref)
        return neighbours[i] if i < len(neighbours) else None
    return next((n for n in neighbours if str(n.id) == ref and n.id != note.id), None)


def heuristic_decision(
    note: NoteView,
    neighbours: Sequence[NoteView],
    *,
    merge_threshold: float = MERGE_THRESHOLD,
    link_threshold: float = LINK_THRESHOLD,
    entity_min_cosine: float = ENTITY_MIN_COSINE,
) -> dict[str, Any]:
    """The offline decision, from cosine similarity and shared specific entities.

    * ``cosine >= merge_threshold`` (0.95): merge the new note into the most similar such
      neighbour, strategy ``augment`` (a near duplicate adds its text to the older note);
    * ``link_threshold <= cosine < merge_threshold`` (0.7 .. 0.95): link ``related`` with
      ``strength = cosine``;
    * the entity rule, ``entity_min_cosine <= cosine < link_threshold`` (0.3 .. 0.7) and the
      neighbour shares an entity with idf >= :data:`ENTITY_MIN_IDF` (``shared_entity``, set
      by :func:`~cortex_pg.evolution.evolve.neighbours_sharing_entities`): link ``related``
      with ``strength = (cosine + specificity) / 2`` (specificity = idf / ln(N + 1)), the
      reason naming the entity. Two notes about a dog named Max (MiniLM cosine about 0.6)
      are linked; two notes that share only a name in half the notes are not;
    * otherwise nothing. Tags and neighbours are never rewritten.

    Returns:
        The Prem Cortex JSON shape (see the module doc).
    """
    links: list[dict[str, Any]] = []
    merges: list[dict[str, Any]] = []
    for i, n in sorted(enumerate(neighbours), key=lambda p: -p[1].cosine):
        if n.cosine >= merge_threshold and not merges:
            merges.append(
                {
                    "id": str(i),
                    "merge_strategy": "augment",
                    "reasoning": f"cosine similarity {n.cosine:.3f} >= {merge_threshold} (offline heuristic)",
                }
            )
        elif link_threshold <= n.cosine < merge_threshold:
            links.append(
                {
                    "id": str(i),
                    "type": "related",
                    "strength": round(float(n.cosine), 6),
                    "reason": f"cosine similarity {n.cosine:.3f} (offline heuristic)",
                }
            )
        elif n.shared_entity is not None and entity_min_cosine <= n.cosine < link_threshold:
            strength = min(1.0, max(0.0, (n.cosine + n.specificity) / 2))
            links.append(
                {
                    "id": str(i),
                    "type": "related",
                    "strength": round(strength, 6),
                    "reason": f"shared entity {n.shared_entity!r} (idf {n.shared_idf:.2f}), "
                    f"cosine similarity {n.cosine:.3f} (offline entity rule)",
                }
            )
    actions = (["strengthen"] if links else []) + (["merge_memories"] if merges else [])
    return {
        "should_evolve": bool(actions),
        "actions": actions,
        "suggested_connections": links,
        "tags_to_update": list(note.tags),
        "new_context_neighborhood": [],
        "new_tags_neighborhood": [],
        "merge_candidates": merges,
    }


def heuristic_decider(
    merge_threshold: float = MERGE_THRESHOLD,
    link_threshold: float = LINK_THRESHOLD,
    entity_min_cosine: float = ENTITY_MIN_COSINE,
) -> Decider:
    """A :data:`Decider` running :func:`heuristic_decision` with these thresholds.

    Raises:
        ValidationError: unless 0 <= link_threshold <= merge_threshold <= 1 and
            0 <= entity_min_cosine <= 1 (``entity_min_cosine >= link_threshold`` turns the
            entity rule off).
    """
    if not 0.0 <= link_threshold <= merge_threshold <= 1.0 or not 0.0 <= entity_min_cosine <= 1.0:
        raise ValidationError(
            "thresholds",
            "need 0 <= link_threshold <= merge_threshold <= 1 and 0 <= entity_min_cosine <= 1",
        )

    def decide(note: NoteView, neighbours: Sequence[NoteView]) -> Mapping[str, Any]:
        return heuristic_decision(
            note,
            neighbours,
            merge_threshold=merge_threshold,
            link_threshold=link_threshold,
            entity_min_cosine=entity_min_cosine,
        )

    # no I/O, microseconds: a worker asks it inside the job's transaction (see evolution.worker)
    decide.instant = True  # type: ignore[attr-defined]
    return decide


PROMPT = """You are an AI memory evolution agent responsible for managing and evolving a knowledge base.
Analyze the new memory note and its nearest neighbours, and decide whether the memory network
should evolve.

New memory:
content: {content}
context: {context}
keywords: {keywords}

Nearest neighbour memories ({count}; refer to them by index "0".."{last}" or by their exact id):
{neighbours}

Decide:
1. strengthen: connect the new memory to neighbours (type such as similar, causal, example,
   contradicts, extends, supports, refutes, prerequisite, related; strength in [0, 1], only
   suggest strength >= 0.65) and give updated tags for the new memory.
2. update_neighbor: new context (max 2 lines) and tags per neighbour, in neighbour order.
3. merge_memories: when the new memory duplicates a neighbour, name it and a strategy
   (combine, augment or replace).
Set should_evolve true only with strong confidence. Never invent ids.
Answer with one JSON object with exactly the keys should_evolve, actions, suggested_connections,
tags_to_update, new_context_neighborhood, new_tags_neighborhood, merge_candidates."""


def build_prompt(note: NoteView, neighbours: Sequence[NoteView]) -> str:
    """The evolution prompt (after Prem Cortex ``_evolution_system_prompt``) for an LLM decider."""
    lines = [
        f'"{i}": id={n.id} content={n.content!r} context={n.context!r} keywords={n.keywords} '
        f"tags={n.tags} cosine={n.cosine:.3f}"
        + (f" shared_entity={n.shared_entity!r}" if n.shared_entity else "")
        for i, n in enumerate(neighbours)
    ]
    return PROMPT.format(
        content=note.content,
        context=note.context or "General",
        keywords=", ".join(note.keywords),
        count=len(neighbours),
        last=max(0, len(neighbours) - 1),
        neighbours="\n".join(lines),
    )


def llm_decider(complete: Callable[[str], str | Mapping[str, Any]]) -> Decider:
    """A :data:`Decider` asking an LLM: ``complete(prompt)`` returns the JSON text (or mapping).

    The answer is validated by :func:`parse_decision` as soon as it arrives; an invalid answer
    fails the attempt (retried with backoff).
    """

    def decide(note: NoteView, neighbours: Sequence[NoteView]) -> Mapping[str, Any] | str:
        return complete(build_prompt(note, neighbours))

    return decide
