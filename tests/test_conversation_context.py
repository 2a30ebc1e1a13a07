"""Conversation-aware retrieval: context embeddings (a note read after its predecessor in the
session), neighbour expansion and smoothing in ``cortex.search_notes``."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore

DAY = "2024-05-04T20:00:00Z"


def _context_vector(store: MemoryStore, nid: str) -> np.ndarray | None:
    with store.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT embedding::text FROM cortex.embeddings "
                "WHERE note_id = :i AND kind = 'context' AND model = :m"
            ),
            {"i": nid, "m": store.embedder.name},
        ).scalar_one_or_none()
    return None if row is None else np.array([float(x) for x in row.strip("[]").split(",")])


def test_each_note_gets_a_context_embedding_of_its_predecessor_and_itself(store):
    ids = store.add_many(
        [
            {"content": "Caroline: I went to the pride parade on Saturday.", "time": DAY},
            {"content": "Melanie: How was it?", "time": DAY},
            {"content": "Caroline: Loud and joyful.", "time": DAY},
        ],
        user_id="u",
        session_id="s1",
    )
    assert _context_vector(store, ids[0]) is None  # the first turn has no predecessor
    expected = store.embedder.embed(
        ["Caroline: I went to the pride parade on Saturday.\nMelanie: How was it?"]
    )[0]
    assert np.allclose(_context_vector(store, ids[1]), expected, atol=1e-6)
    expected = store.embedder.embed(["Melanie: How was it?\nCaroline: Loud and joyful."])[0]
    assert np.allclose(_context_vector(store, ids[2]), expected, atol=1e-6)


def test_an_earlier_note_inserted_later_updates_its_successors_context(store):
    first = store.add("we planned the trip", user_id="u", session_id="s", time="2024-01-01T10:00:00Z")
    third = store.add("then we booked the hotel", user_id="u", session_id="s", time="2024-01-01T12:00:00Z")
    second = store.add("we chose Lisbon", user_id="u", session_id="s", time="2024-01-01T11:00:00Z")
    emb = store.embedder.embed
    assert np.allclose(
        _context_vector(store, second), emb(["we planned the trip\nwe chose Lisbon"])[0], atol=1e-6
    )
    assert np.allclose(
        _context_vector(store, third), emb(["we chose Lisbon\nthen we booked the hotel"])[0], atol=1e-6
    )
    assert store.delete(second, user_id="u")  # the deleted text leaves its successor's context
    assert np.allclose(
        _context_vector(store, third), emb(["we planned the trip\nthen we booked the hotel"])[0], atol=1e-6
    )
    store.update(first, user_id="u", content="we planned the holiday")
    assert np.allclose(
        _context_vector(store, third), emb(["we planned the holiday\nthen we booked the hotel"])[0], atol=1e-6
    )


def test_a_new_time_moves_a_note_and_the_contexts_follow(store):
    a = store.add("we planned the trip", user_id="u", session_id="s", time="2024-01-01T10:00:00Z")
    b = store.add("we chose Lisbon", user_id="u", session_id="s", time="2024-01-01T11:00:00Z")
    c = store.add("then we booked the hotel", user_id="u", session_id="s", time="2024-01-01T12:00:00Z")
    emb = store.embedder.embed
    store.update(c, user_id="u", time="2024-01-01T09:00:00Z")  # c, a, b
    assert _context_vector(store, c) is None  # now the first note of its session
    assert np.allclose(
        _context_vector(store, a), emb(["then we booked the hotel\nwe planned the trip"])[0], atol=1e-6
    )
    assert np.allclose(_context_vector(store, b), emb(["we planned the trip\nwe chose Lisbon"])[0], atol=1e-6)
    store.update(a, user_id="u", time="2024-01-01T13:00:00Z", content="we planned the holiday")  # c, b, a
    assert np.allclose(
        _context_vector(store, b), emb(["then we booked the hotel\nwe chose Lisbon"])[0], atol=1e-6
    )
    assert np.allclose(
        _context_vector(store, a), emb(["we chose Lisbon\nwe planned the holiday"])[0], atol=1e-6
    )
    assert _context_vector(store, c) is None


def test_context_embeddings_can_be_turned_off(db_url):
    with MemoryStore.open(
        db_url, embedder=HashingEmbedder(), auto_migrate=False, context_embeddings=False
    ) as s:
        ids = s.add_many([{"content": "one"}, {"content": "two"}], user_id="u")
        assert _context_vector(s, ids[1]) is None


@pytest.mark.model
def test_a_reply_is_found_by_what_it_answers(db_url, minilm):
    turns = [
        "Jon: I finally saw the Coldplay concert at the stadium last night.",
        "Gina: Did you like the show?",
        "Jon: Yes! It was amazing.",
        "Gina: I started a pottery class this week.",
        "Jon: What are you making?",
        "Gina: A set of blue bowls for my kitchen.",
        "Jon: My car broke down on the highway yesterday.",
        "Gina: Oh no, is it fixed now?",
        "Jon: The mechanic replaced the battery.",
    ]
    with MemoryStore.open(db_url, embedder=minilm, auto_migrate=False) as store:
        ids = store.add_many([{"content": t, "time": DAY} for t in turns], user_id="u", session_id="s")
        results = store.search("Did Jon enjoy the Coldplay concert?", user_id="u", limit=3, touch=False)
        assert ids[2] in [r.id for r in results]  # "Yes! It was amazing." names nothing it answers
        results = store.search("What was wrong with the car?", user_id="u", limit=3, touch=False)
        assert ids[8] in [r.id for r in results]  # the answer sits next to the best lexical match


def _session_contexts_are_current(store: MemoryStore, user: str) -> None:
    """Every note's context row is embed(previous note's content + newline + content), in
    (created_at, seq) order; the first note has none."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id::text, content FROM cortex.notes WHERE user_id = :u AND merged_into IS NULL "
                "ORDER BY session_id, created_at, seq"
            ),
            {"u": user},
        ).all()
    assert _context_vector(store, rows[0].id) is None
    for prev, note in zip(rows, rows[1:], strict=False):
        expected = store.embedder.embed([f"{prev.content}\n{note.content}"])[0]
        assert np.allclose(_context_vector(store, note.id), expected, atol=1e-6), note.content


def test_a_move_and_a_concurrent_insert_in_its_session_take_turns(db_url):
    import threading

    class Gated(HashingEmbedder):
        """Holds the first context embedding until released (the move's, inside its transaction)."""

        def __init__(self) -> None:
            super().__init__(384)
            self.armed, self.reached, self.go = True, threading.Event(), threading.Event()

        def embed(self, texts):  # noqa: ANN001, ANN201
            if self.armed and any("\n" in t for t in texts):
                self.armed = False
                self.reached.set()
                self.go.wait(20)
            return super().embed(texts)

    gated = Gated()
    with (
        MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False) as plain,
        MemoryStore.open(db_url, embedder=gated, auto_migrate=False) as mover,
    ):
        gated.armed = False
        ids = [
            plain.add(f"note {c}", user_id="u", session_id="c", time=f"2024-01-0{i + 1}T00:00:00Z")
            for i, c in enumerate("ABCD")
        ]
        gated.armed = True
        errors: list[BaseException] = []

        def run(fn) -> None:  # noqa: ANN001
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        move = threading.Thread(
            target=run, args=(lambda: mover.update(ids[1], user_id="u", time="2024-01-03T12:00:00Z"),)
        )
        move.start()
        assert gated.reached.wait(20)
        insert = threading.Thread(
            target=run,
            args=(
                lambda: plain.add(
                    "inserted after A", user_id="u", session_id="c", time="2024-01-01T18:00:00Z"
                ),
            ),
        )
        insert.start()
        insert.join(1.0)
        assert insert.is_alive()  # it waits for the move's scope lock
        gated.go.set()
        move.join()
        insert.join()
        assert errors == []
        _session_contexts_are_current(plain, "u")
