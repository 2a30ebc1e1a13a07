"""Offline entity and relation extraction (no database)."""

from __future__ import annotations

import pytest

from cortex_pg.entities.extract import Relation, extract, extract_entities, validate_llm_answer
from cortex_pg.entities.patterns import NEGATIVE_EXAMPLES, PATTERNS, SHAPE_EXAMPLES, SINGLE_VALUED


@pytest.mark.parametrize(
    ("sentence", "present", "absent"),
    [
        ("Alice works at Acme Corp", ["Alice", "Acme Corp"], ["Acme", "Corp"]),
        ("IBM and OpenAI both use GitHub.", ["IBM", "OpenAI", "GitHub"], []),
        ("Bob joined The Company in May.", ["Bob", "The Company"], ["The", "May"]),
        ("The meeting was long.", [], ["The"]),
        ("This is fine. When Alice arrived, Bob left.", ["Alice", "Bob"], ["This", "When", "When Alice"]),
        ("Alice's manager met Acme Corp's lawyer.", ["Alice", "Acme Corp"], ["Alice's", "Acme Corp's"]),
        ('She calls it "deep work" every day.', ["deep work"], ["She"]),
        ("I bought an iPhone on Monday.", ["iPhone"], ["I", "Monday"]),
        ("Carol Ann Smith lives in New York City", ["Carol Ann Smith", "New York City"], ["New York"]),
        ("Johnson & Johnson hired Dave.", ["Johnson & Johnson", "Dave"], []),
        # sentence-initial common words are not entities; "The" + a capitalised word is a name
        ("Later, Bob called. Plan the launch with Alice.", ["Bob", "Alice"], ["Later", "Plan"]),
        ("Meeting went well. Status: green. Later Bob left.", ["Bob"], ["Meeting", "Status", "Later Bob"]),
        ("The Company hired Bob.", ["The Company", "Bob"], ["Company", "The"]),
        ("The IBM team met on Monday.", ["IBM"], ["The IBM", "The"]),
        ("Meet Bob Bob works at Globex Inc", ["Bob", "Globex Inc"], ["Meet Bob", "Bob Bob", "Meet Bob Bob"]),
        ("Grace prefers Rust. Frank likes Python.", ["Grace", "Rust", "Frank", "Python"], []),
        # apostrophe names
        (
            "Mr. O'Brien met D'Angelo at L'Oréal.",
            ["O'Brien", "D'Angelo", "L'Oréal"],
            ["Brien", "Angelo", "O"],
        ),
        ("O'Brien's car is red. I'm sure I'll go.", ["O'Brien"], ["O'Brien's", "I'm", "I'll"]),
        # chat words, sentence-initial -ing words and contractions
        (
            "Wow John, great! Yeah Maria. Taking care of Max.",
            ["John", "Maria", "Max"],
            ["Wow John", "Taking"],
        ),
        ("Don't worry, Bob. Being there helps.", ["Bob"], ["Don", "Being"]),
        ("Glad I could help, Jon! See you Fri.", ["Jon"], ["Glad", "Glad I", "Fri"]),
    ],
)
def test_entity_table(sentence, present, absent):
    names = extract_entities(sentence)
    for name in present:
        assert name in names, (sentence, names)
    for name in absent:
        assert name not in names, (sentence, names)


@pytest.mark.parametrize(
    ("sentence", "relation"),
    [
        ("Alice works at Acme Corp", Relation("Alice", "works_at", "Acme Corp")),
        (
            "Alice Smith now works for Johnson & Johnson.",
            Relation("Alice Smith", "works_at", "Johnson & Johnson"),
        ),
        ("Bob works with Carol on weekends.", Relation("Bob", "works_with", "Carol")),
        ("Carol knows Dave.", Relation("Carol", "knows", "Dave")),
        ("Grace Hopper created COBOL.", Relation("Grace Hopper", "created", "COBOL")),
        ("Sam Altman co-founded OpenAI.", Relation("Sam Altman", "founded", "OpenAI")),
        ("Linus built Git.", Relation("Linus", "built", "Git")),
        ("Bob is the CEO of Acme Corp.", Relation("Bob", "ceo_of", "Acme Corp")),
        ("Eve is a friend of Frank.", Relation("Eve", "friend_of", "Frank")),
        ("Dr. Smith lives in New York City.", Relation("Smith", "lives_in", "New York City")),
        ("Dave manages Eve.", Relation("Dave", "manages", "Eve")),
        ("Eve reports to Dave.", Relation("Eve", "reports_to", "Dave")),
        ("Frank likes Python.", Relation("Frank", "likes", "Python")),
        ("Grace prefers Rust.", Relation("Grace", "prefers", "Rust")),
    ],
)
def test_relation_table(sentence, relation):
    assert relation in extract(sentence).relations


def test_kinds_and_determinism():
    ex = extract("Alice works at Acme Corp. IBM hired Bob.")
    kinds = {m.name: m.kind for m in ex.entities}
    assert (
        kinds["Alice"] == "person" and kinds["Acme Corp"] == "organization" and kinds["IBM"] == "organization"
    )
    assert [m.name for m in ex.entities] == ["Alice", "Acme Corp", "IBM", "Bob"]  # first-mention order
    assert ex.entities[1].offset == 15


def test_apostrophe_names_are_people_not_organizations():
    ex = extract("Sean O'Brien works at Acme Corp. D'Angelo knows Sean O'Brien.")
    kinds = {m.name: m.kind for m in ex.entities}
    assert kinds["Sean O'Brien"] == "person" and kinds["D'Angelo"] == "person"
    assert Relation("Sean O'Brien", "works_at", "Acme Corp") in ex.relations


def test_no_relation_without_the_phrase():
    assert extract("Alice worked at Acme Corp years ago.").relations == []  # past tense: no current fact
    assert extract("Alice and Acme Corp.").relations == []


def test_explicit_entities_bypass_extraction():
    ex = extract("alice works at acme", entities=["alice", "acme"])
    assert ex.names == ["alice", "acme"]
    assert ex.relations == [Relation("alice", "works_at", "acme")]


def test_llm_hook_used_when_valid_and_falls_back_otherwise():
    def good(text):
        return {
            "entities": [{"name": "Alice", "kind": "person"}, {"name": "Wonderland", "kind": "other"}],
            "relations": [{"source": "Alice", "type": "visited", "target": "Wonderland"}],
        }

    ex = extract("Alice went down the hole to Wonderland.", llm_extract=good)
    assert ex.names == ["Alice", "Wonderland"] and ex.relations == [
        Relation("Alice", "visited", "Wonderland")
    ]

    def bad(text):
        return {"entities": [{"name": "", "kind": "alien"}]}

    def broken(text):
        raise TimeoutError("model down")

    for hook in (bad, broken):
        assert extract("Alice works at Acme Corp", llm_extract=hook).relations == [
            Relation("Alice", "works_at", "Acme Corp")
        ]
    assert validate_llm_answer({"entities": [{"name": "x", "kind": "alien"}]}).startswith("entities[0].kind")
    assert validate_llm_answer({"entities": [], "relations": [{"source": "a", "target": "b"}]}) is not None
    assert validate_llm_answer({"entities": []}) is None


# ---------------------------------------------------------------------- the pattern table
def _facts(sentence):
    return {(r.source, r.relation, r.target) for r in extract(sentence).relations}


_PATTERN_EXAMPLES = [
    pytest.param(sentence, facts, id=f"{p.name}: {sentence}")
    for p in PATTERNS
    for sentence, facts in p.examples
]
_SHAPE_EXAMPLES = [
    pytest.param(sentence, facts, id=f"{shape}: {sentence}")
    for shape, rows in SHAPE_EXAMPLES.items()
    for sentence, facts in rows
]


def test_every_pattern_has_examples():
    assert all(p.examples for p in PATTERNS)
    assert {"coordinated verb phrases", "object lists", "quoted and multi-word names"} <= set(SHAPE_EXAMPLES)
    assert {p.shape for p in PATTERNS} == {"verb", "noun"}
    assert any(not p.forward and p.shape == "verb" for p in PATTERNS)  # passives
    assert {"works_at", "lives_in", "reports_to"} == SINGLE_VALUED


@pytest.mark.parametrize(("sentence", "facts"), _PATTERN_EXAMPLES + _SHAPE_EXAMPLES)
def test_pattern_examples(sentence, facts):
    found = _facts(sentence)
    assert set(facts) <= found, (sentence, found)


@pytest.mark.parametrize(("sentence", "facts"), [pytest.param(s, f, id=s) for s, f in NEGATIVE_EXAMPLES])
def test_negative_examples(sentence, facts):
    assert not set(facts) & _facts(sentence), sentence


def test_coordination_finds_exactly_the_stated_facts():
    # the shape from a user's report: the second verb's object is linked to the subject
    assert _facts("Alice works at Acme Corp and knows Carol.") == {
        ("Alice", "works_at", "Acme Corp"),
        ("Alice", "knows", "Carol"),
    }
    assert _facts('Carol created "Project X".') == {("Carol", "created", "Project X")}
    # a list item with its own verb phrase starts a new clause
    assert _facts("Alice knows Bob and Carol works at Acme Corp.") == {
        ("Alice", "knows", "Bob"),
        ("Carol", "works_at", "Acme Corp"),
    }
    # filler longer than four words ends the chain
    assert _facts("Bob works with Carol on most of the long weekends and knows Dave.") == {
        ("Bob", "works_with", "Carol")
    }


def test_kinds_follow_the_table():
    ex = extract("Alice's manager Bob knows Carol. Project Apollo is managed by Dave.")
    kinds = {m.name: m.kind for m in ex.entities}
    assert Relation("Bob", "manager_of", "Alice") in ex.relations
    assert kinds["Bob"] == "person" and kinds["Carol"] == "person"
    assert Relation("Dave", "manages", "Project Apollo") in ex.relations
    assert kinds["Project Apollo"] == "other"  # the target of manages is not forced to person here
