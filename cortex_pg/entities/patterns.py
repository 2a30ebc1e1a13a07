"""The offline relation patterns, as data: what text between two entities states which fact.

Each :class:`Pattern` is a regular expression for the words that stand between two entity
mentions (the *gap*), the relation it states, which side is the source, and examples (a
sentence and the facts a reader takes from it) that the tests run one by one. The reader in
:mod:`cortex_pg.entities.extract` applies the table to every pair of neighbouring mentions
and then follows the shapes of :data:`SHAPE_EXAMPLES` (lists of objects, coordinated verb
phrases), which hold for every ``verb`` pattern.

Regexes are matched case-insensitively against the whole gap; ``(?P<role>...)`` names the
role of ``x_of`` relations ("is the CEO of" gives ``ceo_of``). ``{lead}`` stands for an
optional adverb ("also", "now", "still", "currently").
"""

from __future__ import annotations

from dataclasses import dataclass

#: A verb phrase may start with one of these adverbs ("Alice now works at Acme").
LEAD = r"(?:(?:also|now|still|currently|really)\s+)?"
#: Forms of "to be" that make a passive ("was created by", "has been managed by").
_BE = r"(?:is|are|was|were|has\s+been|have\s+been|had\s+been)\s+"
#: Words that cannot be a role ("Alice's house in Paris" states no role "house in").
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "nor",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "with",
        "by",
        "about",
        "into",
        "over",
        "under",
        "after",
        "before",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "will",
        "would",
        "can",
        "could",
        "should",
        "may",
        "might",
        "must",
        "not",
        "no",
        "this",
        "that",
        "these",
        "those",
        "who",
        "whom",
        "whose",
        "which",
        "what",
        "when",
        "where",
        "why",
        "how",
        "while",
        "as",
        "than",
        "so",
        "if",
        "then",
        "there",
        "here",
        "it",
        "its",
        "he",
        "she",
        "they",
        "we",
        "i",
        "you",
        "me",
        "him",
        "her",
        "them",
        "us",
        "my",
        "our",
        "your",
        "his",
        "their",
    ]
)
_ADJECTIVE = r"(?!(?:" + "|".join(sorted(FUNCTION_WORDS)) + r")\b)[a-z][a-z-]*"
#: Nouns that name a relation between a possessor and a named entity ("Alice's manager Bob",
#: "my dog Max", "my home country, Sweden"); one adjective may come before ("best friend").
ROLE_NOUNS = frozenset(
    [
        "manager",
        "boss",
        "colleague",
        "coworker",
        "co-worker",
        "mentor",
        "teacher",
        "student",
        "assistant",
        "partner",
        "friend",
        "buddy",
        "neighbor",
        "neighbour",
        "roommate",
        "wife",
        "husband",
        "fiance",
        "fiancee",
        "girlfriend",
        "boyfriend",
        "son",
        "daughter",
        "mother",
        "mom",
        "mum",
        "father",
        "dad",
        "brother",
        "sister",
        "grandma",
        "grandmother",
        "grandpa",
        "grandfather",
        "cousin",
        "aunt",
        "uncle",
        "niece",
        "nephew",
        "kid",
        "child",
        "baby",
        "parent",
        "dog",
        "cat",
        "pet",
        "puppy",
        "kitten",
        "horse",
        "bird",
        "founder",
        "ceo",
        "cto",
        "cfo",
        "owner",
        "employer",
        "company",
        "team",
        "band",
        "school",
        "university",
        "hometown",
        "city",
        "town",
        "country",
        "village",
        "character",
        "book",
        "movie",
        "film",
        "song",
        "game",
        "show",
        "author",
        "artist",
    ]
)
_ROLE_NOUN = r"(?:" + "|".join(sorted(ROLE_NOUNS, key=len, reverse=True)) + r")"
ROLE = rf"(?P<role>(?:{_ADJECTIVE}\s+)?{_ROLE_NOUN})"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One row of the relation table.

    Attributes:
        name: a label for tests and documentation.
        gap: regex for the whole text between the two mentions (``{lead}`` is :data:`LEAD`).
        relation: the relation name, or None to take ``<role>_of`` from the ``role`` group.
        forward: True when the left mention is the source ("A created B"); False when it is
            the target (passive "B was created by A", possessive "B's manager A").
        shape: ``"verb"`` (takes object lists and coordinated verb phrases) or ``"noun"``
            (one pair only: possessives and appositions).
        single_valued: a newer fact with the same source and relation closes the older one.
        source_kind / target_kind: the kind an entity of kind ``other`` takes on that side.
        examples: (sentence, facts as (source, relation, target) triples) pairs; the facts
            must all be found (others may be found too).
    """

    name: str
    gap: str
    relation: str | None
    forward: bool = True
    shape: str = "verb"
    single_valued: bool = False
    source_kind: str | None = None
    target_kind: str | None = None
    examples: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = ()


def _active(verb: str) -> str:
    return rf"\s+{LEAD}(?:{verb})\s+(?:the\s+)?"


def _passive(participle: str) -> str:
    return rf"\s+{_BE}{LEAD}(?:{participle})\s+by\s+(?:the\s+)?"


PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "works at",
        _active(r"works?\s+(?:at|for)|is\s+working\s+(?:at|for)|is\s+employed\s+(?:at|by)"),
        "works_at",
        single_valued=True,
        source_kind="person",
        target_kind="organization",
        examples=(
            ("Alice works at Acme Corp", (("Alice", "works_at", "Acme Corp"),)),
            (
                "Alice Smith now works for Johnson & Johnson.",
                (("Alice Smith", "works_at", "Johnson & Johnson"),),
            ),
            ("Sean O'Brien is employed by Globex Inc.", (("Sean O'Brien", "works_at", "Globex Inc"),)),
        ),
    ),
    Pattern(
        "works with",
        _active(r"works?\s+with|is\s+working\s+with"),
        "works_with",
        source_kind="person",
        target_kind="person",
        examples=(("Bob works with Carol on weekends.", (("Bob", "works_with", "Carol"),)),),
    ),
    Pattern(
        "knows",
        _active(r"knows?"),
        "knows",
        source_kind="person",
        target_kind="person",
        examples=(("Carol knows Dave.", (("Carol", "knows", "Dave"),)),),
    ),
    Pattern(
        "is known by",
        _passive(r"known"),
        "knows",
        forward=False,
        source_kind="person",
        target_kind="person",
        examples=(("Dave is known by Carol.", (("Carol", "knows", "Dave"),)),),
    ),
    Pattern(
        "created",
        _active(r"created"),
        "created",
        examples=(
            ("Grace Hopper created COBOL.", (("Grace Hopper", "created", "COBOL"),)),
            ('Carol created "Project X" last spring.', (("Carol", "created", "Project X"),)),
        ),
    ),
    Pattern(
        "was created by",
        _passive(r"created"),
        "created",
        forward=False,
        examples=(
            ("COBOL was created by Grace Hopper.", (("Grace Hopper", "created", "COBOL"),)),
            ('"Project X" was created by Carol.', (("Carol", "created", "Project X"),)),
        ),
    ),
    Pattern(
        "founded",
        _active(r"co-?founded|founded"),
        "founded",
        examples=(
            ("Sam Altman co-founded OpenAI.", (("Sam Altman", "founded", "OpenAI"),)),
            ("Ada founded Acme Labs.", (("Ada", "founded", "Acme Labs"),)),
        ),
    ),
    Pattern(
        "was founded by",
        _passive(r"co-?founded|founded"),
        "founded",
        forward=False,
        examples=(("Acme Labs was founded by Ada Lovelace.", (("Ada Lovelace", "founded", "Acme Labs"),)),),
    ),
    Pattern(
        "built",
        _active(r"built"),
        "built",
        examples=(("Linus built Git.", (("Linus", "built", "Git"),)),),
    ),
    Pattern(
        "was built by",
        _passive(r"built"),
        "built",
        forward=False,
        examples=(("Git was built by Linus Torvalds.", (("Linus Torvalds", "built", "Git"),)),),
    ),
    Pattern(
        "is the X of",
        rf"\s+{LEAD}(?:is|was)\s+(?:the|a|an)\s+(?P<role>[\w-]+(?:\s+[\w-]+)?)\s+of\s+(?:the\s+)?",
        None,
        examples=(
            ("Bob is the CEO of Acme Corp.", (("Bob", "ceo_of", "Acme Corp"),)),
            ("Eve is a friend of Frank.", (("Eve", "friend_of", "Frank"),)),
        ),
    ),
    Pattern(
        "possessive role",
        rf"['’]s?\s+{ROLE}\s*,?\s+(?:is\s+)?",
        None,
        forward=False,
        shape="noun",
        examples=(
            ("Alice's manager Bob approved it.", (("Bob", "manager_of", "Alice"),)),
            (
                "John: my daughter Sara and my home country, Sweden.",
                (("Sara", "daughter_of", "John"), ("Sweden", "home_country_of", "John")),
            ),
            ("Carol's best friend is Dave.", (("Dave", "best_friend_of", "Carol"),)),
            ("Acme Corp's founder, Ada Lovelace, spoke.", (("Ada Lovelace", "founder_of", "Acme Corp"),)),
        ),
    ),
    Pattern(
        "lives in",
        _active(r"lives?\s+in|is\s+living\s+in"),
        "lives_in",
        single_valued=True,
        source_kind="person",
        examples=(("Dr. Smith lives in New York City.", (("Smith", "lives_in", "New York City"),)),),
    ),
    Pattern(
        "manages",
        _active(r"manages?"),
        "manages",
        source_kind="person",
        target_kind="person",
        examples=(("Dave manages Eve.", (("Dave", "manages", "Eve"),)),),
    ),
    Pattern(
        "is managed by",
        _passive(r"managed|run|led"),
        "manages",
        forward=False,
        source_kind="person",
        examples=(("Project Apollo is managed by Dave.", (("Dave", "manages", "Project Apollo"),)),),
    ),
    Pattern(
        "reports to",
        _active(r"reports?\s+to"),
        "reports_to",
        single_valued=True,
        source_kind="person",
        target_kind="person",
        examples=(("Eve reports to Dave.", (("Eve", "reports_to", "Dave"),)),),
    ),
    Pattern(
        "likes",
        _active(
            r"(?:likes?|loves?|enjoys?|liked|loved|enjoyed)(?:\s+(?:reading|watching|playing|visiting|listening\s+to))?"
        ),
        "likes",
        source_kind="person",
        examples=(
            ("Frank likes Python.", (("Frank", "likes", "Python"),)),
            ('Caroline: I loved reading "Becoming Nicole".', (("Caroline", "likes", "Becoming Nicole"),)),
        ),
    ),
    Pattern(
        "is liked by",
        _passive(r"liked|loved|enjoyed"),
        "likes",
        forward=False,
        source_kind="person",
        examples=(("Python is loved by Frank.", (("Frank", "likes", "Python"),)),),
    ),
    Pattern(
        "prefers",
        _active(r"prefers?"),
        "prefers",
        source_kind="person",
        examples=(("Grace prefers Rust.", (("Grace", "prefers", "Rust"),)),),
    ),
)

#: Separators inside a list of mentions: ", ", " and ", ", and ".
LIST_SEPARATOR = r"\s*,\s*(?:and\s+)?|\s+and\s+"
#: Words allowed after a verb phrase's objects and before the next coordinated verb phrase
#: ("Bob works with Carol on weekends and knows Dave"): up to four lower-case words that are
#: not function words such as pronouns or conjunctions ("on" and "at" are allowed).
_FILLER_WORD = r"(?!(?:and|but|or|nor|who|whom|whose|which|that|he|she|they|it|we|i|you|his|her|their|its|our|my|your|while|because|when|where|if|although|though|since|so|then)\b)[a-z][a-z'-]*"
FILLER = rf"(?:\s+{_FILLER_WORD}){{0,4}}"
#: What joins two verb phrases of one subject: ",", "and", "but", ", and", ", but" (the
#: verb pattern that follows brings its own leading white space).
COORDINATOR = r"\s*(?:,\s*(?:and|but)|,|\s+and|\s+but)"

#: Sentences for the shapes every ``verb`` pattern takes, with the facts they state; the
#: tests run them. A shape is code in the reader; these are its specification.
SHAPE_EXAMPLES: dict[str, tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...]] = {
    "coordinated verb phrases": (
        (
            "Alice works at Acme Corp and knows Carol.",
            (("Alice", "works_at", "Acme Corp"), ("Alice", "knows", "Carol")),
        ),
        (
            "Bob works with Carol on weekends, manages Dave but prefers Rust.",
            (("Bob", "works_with", "Carol"), ("Bob", "manages", "Dave"), ("Bob", "prefers", "Rust")),
        ),
        (
            "Project Apollo was created by Ada and is managed by Dave.",
            (("Ada", "created", "Project Apollo"), ("Dave", "manages", "Project Apollo")),
        ),
    ),
    "object lists": (
        (
            "Carol knows Dave, Eve and Frank.",
            (("Carol", "knows", "Dave"), ("Carol", "knows", "Eve"), ("Carol", "knows", "Frank")),
        ),
        (
            "Grace likes Python, Rust, and Go.",
            (("Grace", "likes", "Python"), ("Grace", "likes", "Rust"), ("Grace", "likes", "Go")),
        ),
        (
            "Alice knows Bob and Carol and works at Acme Corp.",
            (("Alice", "knows", "Bob"), ("Alice", "knows", "Carol"), ("Alice", "works_at", "Acme Corp")),
        ),
    ),
    "quoted and multi-word names": (
        ('"Project X" was created by Carol Ann Smith.', (("Carol Ann Smith", "created", "Project X"),)),
        (
            'Mary Jane Watson created "The Daily Planet" and "Project X".',
            (
                ("Mary Jane Watson", "created", "The Daily Planet"),
                ("Mary Jane Watson", "created", "Project X"),
            ),
        ),
        (
            "New York Life Insurance Company was founded by James Lee.",
            (("James Lee", "founded", "New York Life Insurance Company"),),
        ),
    ),
    "first person in a speaker's turn": (
        (
            "Melanie: I work at Acme Corp and love Jazz.",
            (("Melanie", "works_at", "Acme Corp"), ("Melanie", "likes", "Jazz")),
        ),
        (
            "Caroline: Thanks! My dog Max loves Seattle.",
            (("Max", "dog_of", "Caroline"), ("Max", "likes", "Seattle")),
        ),
        (
            "Jon: I'm working at Globex Inc now, Dave manages me.",
            (("Jon", "works_at", "Globex Inc"), ("Dave", "manages", "Jon")),
        ),
    ),
}

#: Sentences that state none of these facts (the reader must not find them).
NEGATIVE_EXAMPLES: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Alice worked at Acme Corp years ago.", (("Alice", "works_at", "Acme Corp"),)),
    (
        "Alice knows Bob and Carol works at Acme Corp.",
        (("Alice", "knows", "Carol"), ("Bob", "works_at", "Acme Corp")),
    ),
    # "my job at" says nothing current ("I lost my job at Door Dash")
    ("Jon: I lost my job at Door Dash.", (("Jon", "works_at", "Door Dash"),)),
    ("Alice's house in Paris is small.", (("Paris", "house_in_of", "Alice"), ("Paris", "house_of", "Alice"))),
    # a possessive names a role noun, and its right side is a name, not a pronoun
    ("Gina: I had tough times with my business, Jon.", (("Jon", "business_of", "Gina"),)),
    ("Caroline: Art's allowed me to explore.", (("Caroline", "allowed_of", "Art"),)),
    ("Melanie: Pottery is a huge part of my life.", (("Pottery", "huge_part_of", "Melanie"),)),
    ("Alice knows Bob, who likes Carol.", (("Alice", "likes", "Carol"),)),
    ("Alice knows Bob and his sister likes Carol.", (("Alice", "likes", "Carol"), ("Bob", "likes", "Carol"))),
    # "I" is the speaker only in a turn that starts with the speaker's name and a colon
    ("Dear Bob, I love Jazz.", (("Bob", "likes", "Jazz"),)),
    ("Melanie: Bob knows World War I history.", (("Bob", "knows", "Melanie"),)),
)

#: First-person words read as the speaker in a turn "Name: ..." (Name an extracted entity):
#: word -> (what it reads as before the next gap, may be the left side of a ``verb`` pattern,
#: may be the right side of one). "my" is only ever a possessor ("my dog Max" reads
#: "Name's dog Max"); no pronoun is the right side of a ``noun`` pattern.
FIRST_PERSON: dict[str, tuple[str, bool, bool]] = {
    "i'm": (" is", True, False),
    "i am": (" is", True, False),
    "i": ("", True, False),
    "me": ("", False, True),
    "my": ("'s", False, False),
}
#: A speaker's turn: the name, a colon, the words.
SPEAKER_TURN = r"\s*(?P<speaker>[^:\n]{1,60}?):\s"

#: Relations where a newer fact about the same source replaces the older one.
SINGLE_VALUED = frozenset(p.relation for p in PATTERNS if p.single_valued and p.relation)
