"""Entity and relation extraction: offline heuristics, or an injected LLM function.

Entities (offline, improving on calute's ``EntityMemory._extract_entities``):
    * runs of capitalised words, joined by single spaces (or ``&``): "Acme Corp",
      "New York", "Johnson & Johnson". A sentence-initial stop word ("The", "This", "When",
      "After", pronouns, ...) does not start an entity: "The meeting" gives nothing,
      "When Alice left" gives Alice; "The" followed by a capitalised word is part of the name
      anywhere ("The Company hired Bob" and "joined The Company" give "The Company");
    * a sentence-initial common word (:data:`LEAD_WORDS`: "Later", "Meet", "Please", ...) does
      not start an entity either ("Meet Bob" gives Bob); a single capitalised word at the start
      of a sentence that is a common English word (:data:`COMMON_WORDS`: "Plan", "Meeting",
      "Status", ...) is not an entity. Words that are also common first names or product
      names ("Grace", "Frank", "Python") are in neither list;
    * names with an apostrophe after one capital: "O'Brien", "D'Angelo", "L'Oréal";
    * a word repeated back to back ends a name ("Meet Bob Bob works" gives Bob);
    * acronyms and CamelCase names: "IBM", "OpenAI", "GitHub", "iPhone", "GPT-4";
    * quoted strings ("..." and curly quotes), 2-60 characters, as concepts;
    * possessives stripped ("Alice's" and "Acme Corp's" give Alice and Acme Corp);
    * one-letter words, weekday and month names and job titles (CEO, CTO, VP, ...) alone are
      not entities.
    Kinds: quoted strings are ``concept``; acronyms, CamelCase names and names ending in an
    organisation word (Corp, Inc, Ltd, LLC, Company, Group, Bank, University, ...) are
    ``organization``; a name after a title (Mr, Mrs, Ms, Dr, Prof) or on the person side of a
    relation below is ``person``; the rest is ``other``.

Relations (offline; both sides are extracted entities, so multi-word names work on both
sides; the verb phrase must stand alone between them, optionally after "also", "now",
"still", "currently", and before "the"):

    =================================  ==================  ==========================
    text between the two entities      relation            single-valued (closes old)
    =================================  ==================  ==========================
    works at / works for / is at       works_at            yes
    works with                         works_with          no
    knows                              knows               no
    created / founded / built          created / founded / built   no
    co-founded                         founded             no
    is the X of / is a X of / is an X of   x_of (e.g. ceo_of, friend_of)   no
    lives in                           lives_in            yes
    manages                            manages             no
    reports to                         reports_to          yes
    likes / prefers                    likes / prefers     no
    =================================  ==================  ==========================

Past tenses of works/lives ("worked at") assert no current fact and are not matched.

LLM extraction: pass ``llm_extract``, a function ``text -> dict`` (for example a thin
wrapper over the shared LLM client that asks for JSON). Its result must match
:data:`LLM_SCHEMA`; an answer that does not (or an exception) is logged and the offline
heuristics are used instead, so a flaky model never loses a memory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


KINDS = ("person", "organization", "concept", "other")

#: Relations where a newer fact about the same source replaces the older one.
SINGLE_VALUED = frozenset({"works_at", "lives_in", "reports_to"})

#: JSON schema of what ``llm_extract`` must return.
LLM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["entities"],
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 200},
                    "kind": {"enum": list(KINDS)},
                },
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "type", "target"],
                "properties": {
                    "source": {"type": "string", "minLength": 1},
                    "type": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_ -]{0,63}$"},
                    "target": {"type": "string", "minLength": 1},
                },
            },
        },
    },
}

LlmExtract = Callable[[str], Mapping[str, Any]]

STOP_WORDS = _words(
    """
    The This That These Those A An When Where What Why How Who Whom Whose Which While If
    In On At By For From To Of With Without After Before During Since Until As Because
    It Its He She They We I You Me My Our Your His Her Their Them Us Him
    And But Or So Then Also Yet Still There Here Some Many Every Each All Any No Not Yes
    Maybe Perhaps Hi Hello Hey Thanks Thank Dear Please Let Do Does Did Is Are Was Were Be
    Been Can Could Would Should Will Shall May Might Must Have Has Had Today Yesterday
    Tomorrow Tonight Now Last Next First Once Just Only Even Well Oh Ok Okay Sure Actually
    Remember Note Analyze Analyse Check Create Make Use Add Find Get Tell Show Write Read
    """
)

#: Sentence-initial adverbs and imperative verbs: dropped from the start of a capitalised run
#: at the start of a sentence, like :data:`STOP_WORDS`.
LEAD_WORDS = _words(
    """
    Later Meanwhile However Finally Afterwards Anyway Besides Otherwise Therefore Thus Instead
    Again Soon Sometimes Usually Often Never Always Recently Currently Overall Apparently
    Hopefully Unfortunately Fortunately Basically Clearly Obviously Really Very Please Ask Call
    Meet Send Email Schedule Plan Review Discuss Prepare Finish Complete Start Continue Buy
    Book Order Pay Help Try Keep Give Take Bring Need Want Think Consider Remind Follow Share
    Update Fix Build Test Deploy Run Move Change Set Put Open Close Look See Watch Visit Invite
    Contact Confirm Summarize Summarise Research Explain Describe List Compare Draft Ping Study
    Learn Investigate Evaluate Assess Identify Organize Organise Collect Gather Process
    """
)

#: Common English words that are not an entity when alone at the start of a sentence
#: ("Plan: ...", "Status update ...", "Meeting went well").
COMMON_WORDS = LEAD_WORDS | _words(
    """
    Meeting Task Tasks Summary Result Results Status Notes Done Good Great Nice Sorry Agenda
    Action Actions Goal Goals Idea Ideas Question Questions Answer Problem Problems Issue Issues
    Bug Bugs Feature Features Project Projects Report Reports Team Teams Everyone Someone Nobody
    Everything Something Nothing Anyone People Customer Customers User Users Sales Revenue Data
    Analysis Budget Deadline Launch Release Feedback Decision Outcome Context Background Step
    Steps Priority Risk Risks Cost Costs Price Time Work Weather Lunch Dinner Breakfast Morning
    Afternoon Evening Night Week Month Year Most More Less Few Several Both Either Neither Other
    Another Such Same Old Big Small Important Interesting Welcome Right Wrong True False Great
    Overview Conclusion Reminder Todo Important Urgent Follow-up Draft Update Updates Progress
    Went Got Made Said Told Asked Called Met Came Left Found Thought Felt Seemed Spent Tried
    """
)

MONTHS_AND_DAYS = _words(
    """
    January February March April May June July August September October November December
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday
    """
)

ORG_WORDS = _words(
    """
    Corp Corporation Inc Incorporated Ltd Limited LLC LLP PLC GmbH AG SA Co Company Group
    Holdings Bank University College Institute Labs Lab Laboratory Foundation Association
    Agency Systems Technologies Technology Software Solutions Partners Ventures Capital
    Industries Enterprises Studios Media Networks Hospital School Society Council Ministry
    """
)

#: Job titles: words of "is the CEO of", not entities on their own.
ROLE_WORDS = _words("CEO CTO CFO COO CIO CMO CISO VP SVP EVP PM HR")

TITLES = ("Mr", "Mrs", "Ms", "Miss", "Dr", "Prof", "Sir", "Madam")

_UP = "A-ZÀ-ÖØ-Þ"
_LOW = "a-zß-öø-ÿ"
# Capitalised word, acronym or CamelCase ("Alice", "IBM", "OpenAI", "GPT-4"), or a lower-case
# start with an inner capital ("iPhone", "eBay").
_TOKEN = (
    rf"(?:(?:[{_UP}]['’](?=[{_UP}]))?[{_UP}][{_LOW}0-9]*(?:[{_UP}][{_LOW}0-9]*)*(?:-[{_UP}{_LOW}0-9]+)*"
    rf"|[{_LOW}]+[{_UP}][{_UP}{_LOW}0-9]*)"
)
_POSSESSIVE = r"(?:['’]s\b|(?<=s)['’](?!\w))?"
_RUN = re.compile(rf"(?<![\w'’])({_TOKEN}(?:[ \t]+(?:&[ \t]+)?{_TOKEN})*){_POSSESSIVE}(?![\w])")
_QUOTED = re.compile(r"\"([^\"\n]{2,60})\"|“([^”\n]{2,60})”")
_SENTENCE_END = re.compile(r"(?:^|[.!?][\"'”’)\]]*\s+|\n\s*|[:;]\s+[\"“]?|^[\"“])$")
_TITLE_BEFORE = re.compile(rf"(?:{'|'.join(TITLES)})\.?\s+$")


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity found in a text.

    Attributes:
        name: as written (possessive stripped, white space collapsed).
        kind: one of :data:`KINDS`.
        offset: character offset of the first mention in the text, None when unknown.
    """

    name: str
    kind: str = "other"
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Relation:
    """A fact ``source --relation--> target`` said by a text (names as in :class:`Mention`)."""

    source: str
    relation: str
    target: str

    @property
    def single_valued(self) -> bool:
        return self.relation in SINGLE_VALUED


@dataclass(frozen=True, slots=True)
class Extraction:
    """Entities (first-mention order, one per normalised name) and relations of a text."""

    entities: list[Mention] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.entities]


def fold(name: str) -> str:
    """Python mirror of ``cortex.normalize_entity_name`` (for de-duplication before SQL)."""
    return " ".join(name.split()).lower()


def relation_name(phrase: str) -> str:
    """``"CEO"`` -> ``"ceo"``, ``"best friend"`` -> ``"best_friend"``, ``"Works-At"`` -> ``"works_at"``."""
    out = re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_")
    if not out or not out[0].isalpha():
        out = "rel_" + out
    return out[:64]


# ---------------------------------------------------------------------- entities
def _sentence_starts(text: str, index: int) -> bool:
    return _SENTENCE_END.search(text[max(0, index - 4) : index]) is not None or index == 0


def _is_acronym_or_camel(token: str) -> bool:
    letters = re.sub(r"^[^\W\d_]['’]", "", token).replace("-", "")  # "O'Brien" is not CamelCase
    return sum(ch.isupper() for ch in letters) >= 2 or (letters[:1].islower() and letters != letters.lower())


def _entity_kind(name: str, text: str, offset: int) -> str:
    tokens = name.replace("&", " ").split()
    if tokens[-1].rstrip(".") in ORG_WORDS or (len(tokens) == 1 and _is_acronym_or_camel(tokens[0])):
        return "organization"
    if _TITLE_BEFORE.search(text[max(0, offset - 8) : offset]):
        return "person"
    return "other"


def extract_mentions(text: str) -> list[Mention]:
    """The entities of ``text`` by the offline heuristics (see the module docstring).

    Returns:
        One :class:`Mention` per normalised name, in order of first appearance (deterministic).
    """
    found: dict[str, Mention] = {}

    def add(name: str, kind: str, offset: int) -> None:
        name = " ".join(name.split())
        key = fold(name)
        if key and key not in found:
            found[key] = Mention(name, kind, offset)

    spans: list[tuple[int, str, str]] = []
    for m in _QUOTED.finditer(text):
        inner = (m.group(1) or m.group(2)).strip()
        if inner:
            spans.append((m.start(), inner, "concept"))
    for m in _RUN.finditer(text):
        # (offset, token) pairs of the run; "&" joins tokens but never starts or ends a name
        tokens = [(t.start() + m.start(1), t.group()) for t in re.finditer(r"\S+", m.group(1))]
        # a word repeated back to back ("Meet Bob Bob works") ends one name and starts another
        cuts = [i for i in range(1, len(tokens)) if tokens[i][1].lower() == tokens[i - 1][1].lower()]
        for lo, hi in zip([0, *cuts], [*cuts, len(tokens)], strict=True):
            span = _run_entity(text, tokens[lo:hi])
            if span is not None:
                spans.append(span)
    for start, name, kind in sorted(spans, key=lambda s: s[0]):
        add(name, kind, start)
    return list(found.values())


def _run_entity(text: str, tokens: list[tuple[int, str]]) -> tuple[int, str, str] | None:
    """The (offset, name, kind) of one capitalised run's ``(offset, token)`` pairs, or None."""
    at_start = _sentence_starts(text, tokens[0][0])
    if at_start and len(tokens) == 1 and tokens[0][1] in COMMON_WORDS:
        return None
    if (
        at_start
        and (tokens[0][1] in STOP_WORDS or tokens[0][1] in LEAD_WORDS)
        and not _article_of_name(tokens)
    ):
        tokens = tokens[1:]
    while tokens and tokens[0][1] == "&":
        tokens = tokens[1:]
    while tokens and tokens[-1][1] == "&":
        tokens = tokens[:-1]
    if not tokens:
        return None
    words = [t for _, t in tokens]
    if len(words) == 1 and (
        len(words[0]) < 2 or words[0] in MONTHS_AND_DAYS or words[0] in TITLES or words[0] in ROLE_WORDS
    ):
        return None
    start = tokens[0][0]
    name = " ".join(words)
    return start, name, _entity_kind(name, text, start)


def _article_of_name(tokens: list[tuple[int, str]]) -> bool:
    """True for "The" + a capitalised word that can be part of a name ("The Company", not
    "The IBM" or "The Monday")."""
    if tokens[0][1] != "The" or len(tokens) < 2:
        return False
    nxt = tokens[1][1]
    return not (
        _is_acronym_or_camel(nxt)
        or nxt in STOP_WORDS
        or nxt in MONTHS_AND_DAYS
        or nxt in ROLE_WORDS
        or nxt == "&"
    )


def extract_entities(text: str) -> list[str]:
    """The entity names of ``text`` (offline heuristics), in order of first appearance."""
    return [m.name for m in extract_mentions(text)]


# ---------------------------------------------------------------------- relations
_LEAD = r"(?:also\s+|now\s+|still\s+|currently\s+)?"
_VERBS: tuple[tuple[str, str | None], ...] = (
    (r"works\s+(?:at|for)|is\s+working\s+(?:at|for)|is\s+employed\s+(?:at|by)", "works_at"),
    (r"works\s+with|is\s+working\s+with", "works_with"),
    (r"knows", "knows"),
    (r"created", "created"),
    (r"co-?founded|founded", "founded"),
    (r"built", "built"),
    (r"is\s+(?:the|a|an)\s+(?P<role>[\w-]+(?:\s+[\w-]+)?)\s+of", None),
    (r"lives\s+in|is\s+living\s+in", "lives_in"),
    (r"manages", "manages"),
    (r"reports\s+to", "reports_to"),
    (r"likes|loves|enjoys", "likes"),
    (r"prefers", "prefers"),
)
_PERSON_SOURCE = {"works_at", "works_with", "knows", "lives_in", "manages", "reports_to", "likes", "prefers"}
_PERSON_TARGET = {"works_with", "knows", "manages", "reports_to"}


def extract_relations(text: str, entities: Iterable[str]) -> list[Relation]:
    """Relations of :data:`_VERBS` between two of ``entities`` (names as they appear in ``text``).

    Returns:
        Relations in order of appearance, without duplicates.
    """
    names = sorted({" ".join(n.split()) for n in entities if n and n.strip()}, key=len, reverse=True)
    if not names:
        return []
    alternation = "|".join(_flexible(n) for n in names)
    ent = rf"(?<![\w])(?:{alternation}){_POSSESSIVE}(?![\w])"
    by_fold = {fold(n): n for n in names}
    found: list[tuple[int, Relation]] = []
    for verb, relation in _VERBS:
        pattern = re.compile(
            rf"(?P<a>{ent})\s+{_LEAD}(?:{verb})\s+(?:the\s+)?(?=(?P<b>{ent}))", re.IGNORECASE
        )
        for m in pattern.finditer(text):
            rel = relation or relation_name(m.group("role")) + "_of"
            source = by_fold.get(fold(_strip_possessive(m.group("a"))))
            target = by_fold.get(fold(_strip_possessive(m.group("b"))))
            if source and target and fold(source) != fold(target):
                found.append((m.start(), Relation(source, rel, target)))
    result: list[Relation] = []
    for _, item in sorted(found, key=lambda x: x[0]):
        if item not in result:
            result.append(item)
    return result


def _flexible(name: str) -> str:
    return r"\s+".join(re.escape(part) for part in name.split())


def _strip_possessive(name: str) -> str:
    return re.sub(r"(?:['’]s|(?<=s)['’])$", "", name)


# ---------------------------------------------------------------------- entry point
def extract(
    text: str, *, entities: Iterable[str] | None = None, llm_extract: LlmExtract | None = None
) -> Extraction:
    """Entities and relations of ``text``.

    Args:
        text: the note content.
        entities: explicit entity names; they bypass entity extraction (relations are still
            read from the text, between these names only). Kinds are guessed as for
            extracted names.
        llm_extract: optional ``text -> dict`` matching :data:`LLM_SCHEMA`; when given (and
            ``entities`` is not), its answer is used; an invalid answer or an exception falls
            back to the offline heuristics (logged at WARNING).

    Returns:
        An :class:`Extraction`; entity kinds refined by the relations they take part in.
    """
    if entities is not None:
        given = [" ".join(str(e).split()) for e in entities if str(e).strip()]
        mentions = _dedupe(
            Mention(n, _entity_kind(n, text, max(text.find(n), 0)), _find(text, n)) for n in given
        )
        return _refine(Extraction(mentions, extract_relations(text, [m.name for m in mentions])))
    if llm_extract is not None:
        try:
            answer = llm_extract(text)
            problem = validate_llm_answer(answer)
        except Exception as exc:  # noqa: BLE001 - any failure of the model falls back
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return _refine(_from_llm(text, answer))
        log.warning("llm_extract answer refused (%s); using the offline heuristics", problem)
    mentions = extract_mentions(text)
    return _refine(Extraction(mentions, extract_relations(text, [m.name for m in mentions])))


def _find(text: str, name: str) -> int | None:
    m = re.search(rf"(?<![\w]){_flexible(name)}", text, re.IGNORECASE)
    return m.start() if m else None


def _dedupe(mentions: Iterable[Mention]) -> list[Mention]:
    seen: dict[str, Mention] = {}
    for m in mentions:
        seen.setdefault(fold(m.name), m)
    return list(seen.values())


def _refine(ex: Extraction) -> Extraction:
    kinds = {fold(m.name): m.kind for m in ex.entities}
    for r in ex.relations:
        s, t = fold(r.source), fold(r.target)
        if r.relation in _PERSON_SOURCE and kinds.get(s) == "other":
            kinds[s] = "person"
        if r.relation in _PERSON_TARGET and kinds.get(t) == "other":
            kinds[t] = "person"
        if r.relation == "works_at" and kinds.get(t) == "other":
            kinds[t] = "organization"
    entities = [Mention(m.name, kinds[fold(m.name)], m.offset) for m in ex.entities]
    return Extraction(entities, ex.relations)


def _from_llm(text: str, answer: Mapping[str, Any]) -> Extraction:
    mentions = _dedupe(
        Mention(" ".join(e["name"].split()), e.get("kind", "other"), _find(text, e["name"]))
        for e in answer["entities"]
    )
    known = {fold(m.name): m.name for m in mentions}
    relations: list[Relation] = []
    for r in answer.get("relations", []):
        s, t = known.get(fold(r["source"])), known.get(fold(r["target"]))
        if s and t and fold(s) != fold(t):
            item = Relation(s, relation_name(r["type"]), t)
            if item not in relations:
                relations.append(item)
    return Extraction(mentions, relations)


def validate_llm_answer(answer: object) -> str | None:
    """Check ``answer`` against :data:`LLM_SCHEMA`; returns None when valid, else the first problem.

    A small validator for this one schema (jsonschema is not a dependency): types, required
    keys, string lengths, the ``kind`` enum and the ``type`` pattern.
    """
    if not isinstance(answer, Mapping):
        return "answer is not a JSON object"
    ents = answer.get("entities")
    if not isinstance(ents, list):
        return "entities: required array"
    for i, e in enumerate(ents):
        if not isinstance(e, Mapping) or not isinstance(e.get("name"), str) or not e["name"].strip():
            return f"entities[{i}].name: required non-empty string"
        if len(e["name"]) > 200:
            return f"entities[{i}].name: longer than 200 characters"
        if "kind" in e and e["kind"] not in KINDS:
            return f"entities[{i}].kind: must be one of {', '.join(KINDS)}"
    rels = answer.get("relations", [])
    if not isinstance(rels, list):
        return "relations: must be an array"
    type_re = re.compile(LLM_SCHEMA["properties"]["relations"]["items"]["properties"]["type"]["pattern"])
    for i, r in enumerate(rels):
        if not isinstance(r, Mapping):
            return f"relations[{i}]: must be an object"
        for key in ("source", "type", "target"):
            if not isinstance(r.get(key), str) or not r[key].strip():
                return f"relations[{i}].{key}: required non-empty string"
        if not type_re.match(r["type"]):
            return f"relations[{i}].type: must match {type_re.pattern}"
    return None
