"""The offline entity rule of evolution: notes that share a specific entity are linked."""

from __future__ import annotations

import math
import uuid

import pytest
from sqlalchemy import text

from cortex_pg.errors import ValidationError
from cortex_pg.evolution import Worker
from cortex_pg.evolution.decide import (
    ENTITY_MIN_COSINE,
    ENTITY_MIN_IDF,
    LINK_THRESHOLD,
    NoteView,
    heuristic_decider,
    heuristic_decision,
)
from cortex_pg.store import MemoryStore

# everyday notes that all name the user, so "Caroline" is in nearly every note (idf ~ 0)
FILLER = [
    "Caroline went to the farmers market and bought fresh tomatoes.",
    "Caroline finished reading a long novel about sailors.",
    "Caroline had a dentist appointment in the morning.",
    "Caroline painted the kitchen walls light blue.",
    "Caroline is learning to play chess online.",
    "Caroline baked sourdough bread for the first time.",
    "Caroline fixed the leaking tap in the bathroom.",
    "Caroline watched a documentary about volcanoes.",
    "Caroline planted basil and mint on the balcony.",
    "Caroline started a new knitting project, a green scarf.",
    "Caroline ran five kilometres before breakfast.",
    "Caroline called the bank about a wrong charge.",
    "Caroline cleaned out the garage on Sunday.",
    "Caroline signed up for a pottery class.",
    "Caroline cooked a spicy curry for her neighbours.",
    "Caroline lost her umbrella on the bus.",
    "Caroline tried a new yoga routine.",
    "Caroline wrote a letter to her grandmother.",
    "Caroline repaired her old bicycle.",
    "Caroline visited a modern art museum.",
    "Caroline bought new running shoes.",
    "Caroline organised her bookshelf by colour.",
    "Caroline learned a song on the ukulele.",
    "Caroline made a photo album of her holidays.",
    "Caroline went camping by the lake.",
    "Caroline volunteered at the food bank.",
    "Caroline replaced the batteries of the smoke alarm.",
    "Caroline took a cooking class about dumplings.",
]


def _open(db_url, minilm) -> MemoryStore:
    return MemoryStore.open(
        db_url, embedder=minilm, auto_migrate=False, extract_entities=True, enqueue_evolution=True
    )


def _cosine(store, user, a, b) -> float:
    with store.engine.connect() as c:
        return float(
            c.execute(
                text(
                    "SELECT 1 - (x.embedding <=> y.embedding) FROM cortex.embeddings x, cortex.embeddings y"
                    " WHERE x.user_id = :u AND y.user_id = :u AND x.note_id = :a AND y.note_id = :b"
                    " AND x.kind = 'text' AND y.kind = 'text' AND x.window_no = 0 AND y.window_no = 0"
                ),
                {"u": user, "a": a, "b": b},
            ).scalar_one()
        )


def _link(store, user, a, b):
    with store.engine.connect() as c:
        return c.execute(
            text(
                "SELECT type, strength, reason FROM cortex.note_links"
                " WHERE user_id = :u AND source_id = :a AND target_id = :b"
            ),
            {"u": user, "a": a, "b": b},
        ).first()


def _fill_and_evolve(store, user, pair):
    for content in FILLER:
        store.add(content, user_id=user, session_id="s")
    a = store.add(pair[0], user_id=user, session_id="s")
    b = store.add(pair[1], user_id=user, session_id="s")
    Worker(store, listen=False).process_available()
    return a, b


def test_two_notes_about_a_dog_named_max_are_linked_offline(db_url, minilm):
    store = _open(db_url, minilm)
    try:
        a, b = _fill_and_evolve(
            store,
            "u1",
            (
                "Caroline adopted a golden retriever puppy named Max.",
                "Max the golden retriever loves swimming, says Caroline.",
            ),
        )
        cosine = _cosine(store, "u1", a, b)
        assert ENTITY_MIN_COSINE <= cosine < LINK_THRESHOLD  # the cosine rule alone would not link
        link = _link(store, "u1", b, a) or _link(store, "u1", a, b)
        assert link is not None
        assert "'Max'" in link.reason and "entity rule" in link.reason
        n = len(FILLER) + 2
        specificity = math.log((n + 1) / 2) / math.log(n + 1)
        assert link.strength == pytest.approx((cosine + specificity) / 2, abs=1e-4)
        # the reciprocal exists too, and the frequent name did not link the filler notes
        assert _link(store, "u1", a, b) is not None and _link(store, "u1", b, a) is not None
        with store.engine.connect() as c:
            by_rule = c.execute(
                text(
                    "SELECT count(*) FROM cortex.note_links WHERE user_id = 'u1' AND reason LIKE '%entity rule%'"
                )
            ).scalar_one()
        assert by_rule == 2
    finally:
        store.close()


def test_a_frequent_shared_name_does_not_link(db_url, minilm):
    store = _open(db_url, minilm)
    try:
        a, b = _fill_and_evolve(
            store,
            "u2",
            (
                "Caroline adopted a golden retriever puppy from the shelter.",
                "The golden retriever loves swimming, says Caroline.",
            ),
        )
        assert _cosine(store, "u2", a, b) < LINK_THRESHOLD
        assert _link(store, "u2", a, b) is None and _link(store, "u2", b, a) is None
        with store.engine.connect() as c:
            idf = c.execute(
                text(
                    "SELECT ln((SELECT count(*) + 1.0 FROM cortex.notes WHERE user_id = 'u2') / frequency)"
                    " FROM cortex.entities WHERE user_id = 'u2' AND name = 'Caroline'"
                )
            ).scalar_one()
        assert idf < ENTITY_MIN_IDF
    finally:
        store.close()


def _view(cosine, entity=None, idf=0.0, spec=0.0):
    return NoteView(uuid.uuid4(), "x", [], [], None, None, cosine, entity, idf, spec)


def test_heuristic_entity_rule_thresholds():
    note = _view(1.0)
    hood = [_view(0.6, "Max", 3.0, 0.8), _view(0.2, "Max", 3.0, 0.8), _view(0.6), _view(0.8, "Max", 3.0, 0.8)]
    d = heuristic_decision(note, hood)
    by_id = {c["id"]: c for c in d["suggested_connections"]}
    assert set(by_id) == {"0", "3"}  # below the entity cosine floor, or no entity: no link
    assert by_id["0"]["strength"] == pytest.approx(0.7) and "'Max'" in by_id["0"]["reason"]
    assert by_id["3"]["strength"] == pytest.approx(0.8) and "cosine similarity" in by_id["3"]["reason"]
    off = heuristic_decider(entity_min_cosine=LINK_THRESHOLD)(note, hood)
    assert [c["id"] for c in off["suggested_connections"]] == ["3"]
    with pytest.raises(ValidationError):
        heuristic_decider(entity_min_cosine=1.5)
