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
      names ("Grace", "Frank", "Python") are in neither list. Chat words ("Wow", "Yeah",
      "Sounds") start no entity ("Wow John" gives John), and a sentence-initial "-ing" word alone
      ("Painting helps me", "Speaking of which"; the cost: "Beijing" or "Irving" opening a
      sentence is lost there, not elsewhere); "Glad I" at the start gives nothing;
    * names with an apostrophe after one capital: "O'Brien", "D'Angelo", "L'Oréal";
    * a word repeated back to back ends a name ("Meet Bob Bob works" gives Bob);
    * a word before a contraction other than 's is not a name ("Don't", "It'll");
    * acronyms and CamelCase names: "IBM", "OpenAI", "GitHub", "iPhone", "GPT-4";
    * quoted strings ("..." and curly quotes), 2-60 characters, as concepts;
    * possessives stripped ("Alice's" and "Acme Corp's" give Alice and Acme Corp);
    * one-letter words, weekday and month names and job titles (CEO, CTO, VP, ...) alone are
      not entities.
    Kinds: quoted strings are ``concept``; acronyms, CamelCase names and names ending in an
    organisation word (Corp, Inc, Ltd, LLC, Company, Group, Bank, University, ...) are
    ``organization``; a name after a title (Mr, Mrs, Ms, Dr, Prof) or on the person side of a
    relation below is ``person``; the rest is ``other``.

Relations (offline): both sides are extracted entities, so multi-word and quoted names work
on both sides. The facts come from the table :data:`~cortex_pg.entities.patterns.PATTERNS`
(data, one row per phrase, each with the sentences it must read), applied to the text between
two neighbouring mentions; see :func:`extract_relations` for lists of objects and coordinated
verb phrases. The table:

    ====================================  =====================  ===========================
    text between the two entities         relation               single-valued (closes old)
    ====================================  =====================  ===========================
    works at / works for / is employed by  works_at              yes
    works with                            works_with             no
    knows / (passive) is known by         knows                  no
    created / was created by              created                no
    founded, co-founded / was founded by  founded                no
    built / was built by                  built                  no
    is the X of / is a X of / was the X of  x_of (ceo_of, ...)   no
    B's X A / B's X is A / B's X, A       A x_of B (manager_of)  no
    lives in                              lives_in               yes
    manages / is managed (run, led) by    manages                no
    reports to                            reports_to             yes
    likes, loves, enjoys / is liked by    likes                  no
    prefers                               prefers                no
    ====================================  =====================  ===========================

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

from cortex_pg.entities.patterns import (
    COORDINATOR,
    FILLER,
    FIRST_PERSON,
    LIST_SEPARATOR,
    PATTERNS,
    SINGLE_VALUED,
    SPEAKER_TURN,
    Pattern,
)

log = logging.getLogger(__name__)


def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


KINDS = ("person", "organization", "concept", "other")


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
    Wow Yeah Yea Yep Yup Nope Aww Aw Omg Haha Lol Hmm Cool Awesome Glad Congrats
    Congratulations Sounds Totally Gotta Gonna Wanna Bet Plus
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
    Enough Definitely Absolutely Exactly Honestly Seriously Luckily Thankfully Sadly Personally
    Especially Literally Probably Certainly Surely Way Bye Cheers Lovely Amazing Beautiful
    Wonderful Fantastic Sweet Cute Agreed Started Love Things Stuff Life Family Friends Kids
    Books Music Art Pets Nature Appreciate Stay Care Hope Wish Enjoy
    """
)

MONTHS_AND_DAYS = _words(
    """
    January February March April May June July August September October November December
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday Mon Tue Tues Wed Thu Thur Thurs
    Fri Sat
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
# a word before a contraction other than 's ("Don't", "I'm", "It'll") is not a name
_RUN = re.compile(
    rf"(?<![\w'’])({_TOKEN}(?:[ \t]+(?:&[ \t]+)?{_TOKEN})*){_POSSESSIVE}(?![\w])(?!['’](?!s\b)[a-z])"
)
_QUOTED = re.compile(r"\"([^\"\n]{2,60})\"|“([^”\n]{2,60})”")
_SENTENCE_END = re.compile(r"(?:^|[.!?][\"'”’)\]]*\s+|\n\s*|[:;]\s+[\"“]?|^[\"“])$")
# A sentence-initial "-ing" word alone ("Painting helps me", "Speaking of which") is not a name.
_GERUND = re.compile(r"[A-Z][a-z]+ing")
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
    if at_start and len(tokens) == 2 and tokens[1][1] == "I":  # "Glad I could help"
        tokens = tokens[:1]
    if at_start and len(tokens) == 1 and (tokens[0][1] in COMMON_WORDS or _GERUND.fullmatch(tokens[0][1])):
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
_COMPILED = tuple((p, re.compile(p.gap, re.IGNORECASE)) for p in PATTERNS)
_SPEAKER_TURN = re.compile(SPEAKER_TURN)
_LIST_GAP = re.compile(LIST_SEPARATOR, re.IGNORECASE)
_COORDINATED = tuple(
    (p, re.compile(FILLER + COORDINATOR + p.gap, re.IGNORECASE)) for p in PATTERNS if p.shape == "verb"
)


@dataclass(frozen=True, slots=True)
class _Occurrence:
    """A mention: its span, the entity it names, and what it reads as before the next gap."""

    start: int
    end: int
    name: str
    reads: str = ""
    left: bool = True  # may be the left side of a verb pattern
    right: bool = True  # may be the right side of a verb pattern
    pronoun: bool = False


def _speaker(text: str, by_fold: Mapping[str, str]) -> tuple[str, int] | None:
    """(speaker, offset after "Name: ") when ``text`` is a speaker's turn of a known name."""
    m = _SPEAKER_TURN.match(text)
    if m is None or fold(m.group("speaker")) not in by_fold:
        return None
    return by_fold[fold(m.group("speaker"))], m.end()


def extract_relations(text: str, entities: Iterable[str]) -> list[Relation]:
    """Relations stated between two of ``entities`` (names as they appear in ``text``).

    The reader finds every mention of the names (longest name first, case-insensitive,
    quotes around a name and a possessive after it left out of the mention), then for each
    mention tries :data:`~cortex_pg.entities.patterns.PATTERNS` on the text up to the next
    mention. In a speaker's turn ("Name: ...", Name one of ``entities``) the first-person words
    of :data:`~cortex_pg.entities.patterns.FIRST_PERSON` ("I", "I'm", "me", "my") are mentions
    of the speaker ("Mel: my dog Max" reads "Mel's dog Max"). A ``verb`` pattern also takes
      * a list of objects: further mentions joined by ", ", " and ", ", and" ("knows B, C
        and D"); a listed name followed by a verb phrase of its own starts a new clause
        ("Alice knows Bob and Carol works at Acme" gives no Alice knows Carol);
      * coordinated verb phrases of the same subject: after the objects, up to four
        lower-case words, then ",", "and", "but", ", and" or ", but" and another verb
        pattern ("A works at B and knows C"; passives keep their subject as the target).

    Returns:
        Relations in order of appearance, without duplicates.
    """
    names = sorted({" ".join(n.split()) for n in entities if n and n.strip()}, key=len, reverse=True)
    if not names:
        return []
    by_fold = {fold(n): n for n in names}
    alternation = "|".join(_flexible(n) for n in names)
    speaker = _speaker(text, by_fold)
    pronouns = "|".join(_flexible(w) for w in sorted(FIRST_PERSON, key=len, reverse=True))
    mention = re.compile(
        rf"[\"“]?(?<![\w'’])(?:(?P<name>{alternation})|(?P<me>{pronouns}))(?![\w])[\"”]?", re.IGNORECASE
    )
    occ: list[_Occurrence] = []
    for m in mention.finditer(text, speaker[1] if speaker else 0):
        if m.group("name") is not None:
            occ.append(_Occurrence(m.start(), m.end(), by_fold[fold(m.group("name"))]))
        elif speaker is not None:
            reads, left, right = FIRST_PERSON[fold(m.group("me"))]
            occ.append(_Occurrence(m.start(), m.end(), speaker[0], reads, left, right, pronoun=True))
    found: list[tuple[int, Relation]] = []

    def gap(i: int) -> str:
        return occ[i].reads + text[occ[i].end : occ[i + 1].start] if i + 1 < len(occ) else ""

    def starts_clause(i: int) -> bool:
        """True when mention i is followed by a verb phrase of its own (it is a subject)."""
        return any(p.shape == "verb" and rx.fullmatch(gap(i)) for p, rx in _COMPILED)

    def emit(at: int, pattern: Pattern, match: re.Match[str], subject: str, k: int) -> None:
        if not occ[k].right or (pattern.shape == "noun" and occ[k].pronoun):
            return
        rel = pattern.relation or relation_name(match.group("role")) + "_of"
        source, target = (subject, occ[k].name) if pattern.forward else (occ[k].name, subject)
        if fold(source) != fold(target):
            found.append((at, Relation(source, rel, target)))

    for i in range(len(occ) - 1):
        subject = occ[i].name
        j = i
        pattern_match = _match_pattern(gap(j), verbs=occ[i].left)
        while pattern_match is not None:
            pattern, match = pattern_match
            # objects: mention j + 1 and the mentions listed after it
            k = j + 1
            emit(occ[j].start, pattern, match, subject, k)
            if pattern.shape != "verb":
                break
            while k + 1 < len(occ) and _LIST_GAP.fullmatch(gap(k)) and not starts_clause(k + 1):
                k += 1
                emit(occ[k].start, pattern, match, subject, k)
            # a coordinated verb phrase of the same subject after the last object
            pattern_match = _coordinated(gap(k))
            j = k
    result: list[Relation] = []
    for _, item in sorted(found, key=lambda x: x[0]):
        if item not in result:
            result.append(item)
    return result


def _side_kinds() -> dict[str, tuple[str | None, str | None]]:
    """relation -> (kind of its source, kind of its target) where every pattern of it agrees."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for p in PATTERNS:
        if p.relation is None:
            continue
        old = out.get(p.relation, (p.source_kind, p.target_kind))
        out[p.relation] = (
            old[0] if old[0] == p.source_kind else None,
            old[1] if old[1] == p.target_kind else None,
        )
    return out


_SIDE_KINDS = _side_kinds()


def _match_pattern(gap: str, *, verbs: bool = True) -> tuple[Pattern, re.Match[str]] | None:
    for pattern, rx in _COMPILED:
        if pattern.shape == "verb" and not verbs:
            continue
        m = rx.fullmatch(gap)
        if m is not None:
            return pattern, m
    return None


def _coordinated(gap: str) -> tuple[Pattern, re.Match[str]] | None:
    """The verb pattern after filler words and a coordinator that make up ``gap``, or None."""
    for pattern, rx in _COORDINATED:
        m = rx.fullmatch(gap)
        if m is not None:
            return pattern, m
    return None


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
        source_kind, target_kind = _SIDE_KINDS.get(r.relation, (None, None))
        if source_kind and kinds.get(s) == "other":
            kinds[s] = source_kind
        if target_kind and kinds.get(t) == "other":
            kinds[t] = target_kind
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
