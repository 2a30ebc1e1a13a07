"""Switching embedding models without downtime: back-fill beside the old model, then activate."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from cortex_pg import EmbeddingModelError, ValidationError
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from cortex_pg.store import reembed as r


def test_reembed_while_searches_run_loses_nothing(db_url):
    old = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    ids = old.add_many(
        [{"content": f"note {i} about topic {i % 7}", "user_id": f"u{i % 3}"} for i in range(240)]
    )
    new_emb = HashingEmbedder(128, name="hashing-128")
    errors: list[BaseException] = []
    counts: list[int] = []
    stop = threading.Event()

    def searcher() -> None:
        while not stop.is_set():
            try:
                counts.append(len(old.search("topic 3", user_id="u1", limit=10, touch=False)))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    t = threading.Thread(target=searcher)
    t.start()
    try:
        index = r.prepare(old.engine, new_emb)
        assert r.backfill(old.engine, new_emb, batch_size=50) == 240
        old.add("written during the back-fill", user_id="u1")  # caught up by activate
        info = r.activate(old.engine, new_emb)
        assert info["caught_up"] == 1 and info["stm_reembedded"] > 0
    finally:
        stop.set()
        t.join()
    assert errors == []
    assert counts and min(counts) == 10  # every search during the switch returned full results
    with old.engine.connect() as conn:
        valid = conn.execute(
            text("SELECT indisvalid FROM pg_index WHERE indexrelid = CAST(:i AS regclass)"),
            {"i": f"cortex.{index}"},
        ).scalar_one()
        per_model = dict(
            conn.execute(
                text("SELECT model || '/' || kind, count(*) FROM cortex.embeddings GROUP BY model, kind")
            ).all()
        )
    assert valid is True
    # every note's text, and its context (all but the first of the session), in both models
    assert per_model == {
        "hashing-384/text": 241,
        "hashing-128/text": 241,
        "hashing-384/context": 238,
        "hashing-128/context": 238,
    }
    old.close()
    # a store with the new model opens and finds everything; the old model is refused now
    new = MemoryStore.open(db_url, embedder=new_emb, auto_migrate=False)
    try:
        assert new.count(user_id="u1") == 81
        assert new.search("note 4 about topic 4", user_id="u1", limit=1)[0].id == ids[4]
        assert (
            new.search("written during the back-fill", user_id="u1", memory_source="stm", limit=1)[0].content
            == "written during the back-fill"
        )
    finally:
        new.close()
    with pytest.raises(EmbeddingModelError):
        MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)


def test_backfill_resumes_and_drop(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    s.add_many([{"content": f"n{i}"} for i in range(30)])
    e2 = HashingEmbedder(384, name="hashing-other")
    r.prepare(s.engine, e2)
    seen: list[int] = []
    with pytest.raises(RuntimeError):

        def boom(n: int) -> None:
            seen.append(n)
            raise RuntimeError("killed after the first batch")

        r.backfill(s.engine, e2, batch_size=10, progress=boom)
    assert r.backfill(s.engine, e2, batch_size=10) == 20  # the first batch was committed
    with pytest.raises(ValidationError):
        r.drop_model(s.engine, "hashing-384")  # active
    assert r.drop_model(s.engine, "hashing-other") == 30 + 29  # texts, and contexts of all but the first note
    assert [m["model"] for m in r.models(s.engine)] == ["hashing-384"]
    s.close()


def test_notes_changed_during_the_backfill_are_embedded_again_by_the_new_model(db_url):
    """Writes of the running application (active model) between the back-fill and activate: a
    changed text, a note inserted before another, a deleted predecessor. Every new-model row is
    then the note as it is at activation, text and context."""
    import numpy as np

    old = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    u = "u"
    a = old.add("Alice: did you see the eclipse?", user_id=u, session_id="c", time="2024-04-08T10:00:00Z")
    b = old.add("Bob: yes, it was amazing", user_id=u, session_id="c", time="2024-04-08T10:02:00Z")
    c = old.add("Bob: the sky was clear", user_id=u, session_id="c", time="2024-04-08T10:03:00Z")
    d = old.add("Alice: and then lunch", user_id=u, session_id="c", time="2024-04-08T10:04:00Z")
    new = HashingEmbedder(128, name="hashing-128")
    r.prepare(old.engine, new)
    assert r.backfill(old.engine, new) == 4
    old.update(a, user_id=u, content="Alice: the submarine dove into the trench")
    old.add("Alice: hi Bob", user_id=u, session_id="c", time="2024-04-08T09:00:00Z")  # before a
    old.delete(c, user_id=u)  # d now follows b
    old.update(b, user_id=u, time="2024-04-08T10:05:00Z")  # a, d, b
    r.activate(old.engine, new)
    old.close()
    with old.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT n.id::text AS id, e.kind, e.embedding::text AS v FROM cortex.embeddings e "
                "JOIN cortex.notes n ON n.user_id = e.user_id AND n.id = e.note_id "
                "WHERE e.model = :m AND e.window_no = 0"
            ),
            {"m": new.name},
        ).all()
    stored = {(row.id, row.kind): np.array([float(x) for x in row.v.strip("[]").split(",")]) for row in rows}
    texts = {
        a: "Alice: the submarine dove into the trench",
        d: "Alice: and then lunch",
        b: "Bob: yes, it was amazing",
    }
    first = "Alice: hi Bob"
    expected_context = {a: f"{first}\n{texts[a]}", d: f"{texts[a]}\n{texts[d]}", b: f"{texts[d]}\n{texts[b]}"}
    for nid, content in texts.items():
        assert np.allclose(stored[(nid, "text")], new.embed([content])[0], atol=1e-6), content
        assert np.allclose(stored[(nid, "context")], new.embed([expected_context[nid]])[0], atol=1e-6), (
            content
        )
    assert len(stored) == 2 * 3 + 1  # the first note has a text row and no context row


def test_backfill_with_the_active_model_restores_missing_context_embeddings(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    ids = [
        s.add(f"turn {i} of the talk", session_id="talk", time=f"2024-01-01T00:0{i}:00Z") for i in range(4)
    ]
    other = s.add("alone in its session", session_id="solo")
    contexts = """SELECT note_id::text, embedding::text FROM cortex.embeddings
                  WHERE kind = 'context' ORDER BY note_id"""
    with s.engine.begin() as conn:
        before = conn.execute(text(contexts)).all()
        conn.execute(
            text("DELETE FROM cortex.embeddings WHERE kind = 'context'")
        )  # as a downgrade below 0011
    assert sorted(row[0] for row in before) == sorted(ids[1:])  # a session's first note has none
    assert r.backfill(s.engine, s.embedder) == 3  # the three notes with a predecessor, not the others
    with s.engine.begin() as conn:
        assert conn.execute(text(contexts)).all() == before
    assert r.backfill(s.engine, s.embedder) == 0  # nothing left: first notes need no context
    assert other not in [row[0] for row in before]
    s.close()
