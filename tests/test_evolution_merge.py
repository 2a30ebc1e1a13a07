"""Merges: content, metadata, links repointed, merged_into, evolution_history, note_history."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from cortex_pg import NotFoundError, ValidationError
from cortex_pg.evolution import get_links, merge_notes
from cortex_pg.store import validation


def _link(store, s, t, w, kind="related"):
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO cortex.note_links (user_id, source_id, target_id, type, strength) "
                "VALUES ('m', :s, :t, :k, :w)"
            ),
            {"s": s, "t": t, "w": w, "k": kind},
        )


def test_merge_augment(store):
    target = store.add(
        "Alice adopted a cat named Miso",
        user_id="m",
        time="2024-01-01T00:00:00Z",
        keywords=["cat", "Miso"],
        tags=["pets"],
        context="General",
        category="life.pets",
        metadata={"a": 1, "shared": "target"},
        importance=0.4,
    )
    source = store.add(
        "Miso the cat is two years old",
        user_id="m",
        time="2024-02-01T00:00:00Z",
        keywords=["Miso", "age"],
        tags=["pets", "age"],
        context="Alice's pets",
        category="facts",
        metadata={"b": 2, "shared": "source"},
        importance=0.7,
    )
    x = store.add("Alice lives in Lisbon", user_id="m")
    y = store.add("Alice works as a nurse", user_id="m")
    _link(store, x, source, 0.6, "supports")  # incoming: repointed
    _link(store, x, target, 0.9, "related")  # clash with the repointed one: higher strength wins
    _link(store, source, y, 0.7, "extends")  # outgoing: moves to the target
    _link(store, source, target, 0.8)  # between the two: vanishes
    out = merge_notes(store, source, target, user_id="m", strategy="augment", reasoning="same cat")
    assert out["target"] == target

    t = store.get(target, user_id="m")
    assert t.content == "Alice adopted a cat named Miso\n\n\nMiso the cat is two years old"
    assert t.keywords == ["cat", "Miso", "age"] and t.tags == ["pets", "age"]
    assert t.created_at == datetime(2024, 2, 1, tzinfo=UTC)  # the later time wins
    assert t.context == "Alice's pets"  # the target's was vague
    assert t.category == "life.pets"  # still a dot path
    assert t.metadata == {"a": 1, "b": 2, "shared": "target"}
    assert t.importance == pytest.approx(0.7)
    assert t.evolution_history[-1]["type"] == "merge_augment"
    assert t.evolution_history[-1]["augmented_with"] == source
    assert t.evolution_history[-1]["previous_content"] == "Alice adopted a cat named Miso"

    s = store.get(source, user_id="m")
    assert s.merged_into == target
    assert s.evolution_history[-1] == {
        "type": "merged_into",
        "timestamp": s.evolution_history[-1]["timestamp"],
        "target": target,
        "reasoning": "same cat",
    }
    # links: nothing touches the source any more
    with store.engine.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM cortex.note_links WHERE source_id = :s OR target_id = :s"),
            {"s": source},
        ).scalar_one()
    assert n == 0
    assert get_links(store, x, user_id="m")[target]["strength"] == pytest.approx(0.9)
    assert get_links(store, x, user_id="m")[target]["type"] == "related"
    assert get_links(store, target, user_id="m")[y]["type"] == "extends"

    # the source stops appearing in search and counts; the target is found by the new text
    hits = store.search("Miso two years old", user_id="m", touch=False)
    assert source not in [h.id for h in hits]
    assert hits[0].id == target
    assert store.count(user_id="m") == 3
    # note_history rows labelled merge for both
    for nid in (source, target):
        assert "merge" in [h["op"] for h in store.history(nid, user_id="m")]


def test_merge_replace_takes_source_text(store):
    target = store.add("meeting at 3pm", user_id="m")
    source = store.add("meeting moved to 4pm", user_id="m")
    merge_notes(store, source, target, user_id="m", strategy="replace")
    t = store.get(target, user_id="m")
    assert t.content == "meeting moved to 4pm"
    assert t.evolution_history[-1]["type"] == "merge_replace"
    assert t.evolution_history[-1]["merged_from"] == source
    # the same text again is a new note (the merged source no longer blocks it)... and dedups to target
    assert store.add("meeting moved to 4pm", user_id="m") == target


def test_a_text_the_target_holds_is_not_appended_again(store):
    """A merged note deleted, its text added again and merged again: the target's text stays as
    it was (the text used to be appended a second time)."""
    target = store.add("The weekly meeting is at 10am", user_id="m", session_id="s")
    first = store.add("It is in room 5", user_id="m", session_id="s")
    merge_notes(store, first, target, user_id="m")
    held = store.get(target, user_id="m").content
    assert held == "The weekly meeting is at 10am\n\n\nIt is in room 5"
    assert store.delete(first, user_id="m")
    again = store.add("It is in room 5", user_id="m", session_id="s")
    assert again != first
    merge_notes(store, again, target, user_id="m")
    assert store.get(target, user_id="m").content == held
    assert store.get(again, user_id="m").merged_into == target
    assert [r.id for r in store.search("room 5", user_id="m", touch=False)] == [target]


def test_merge_refusals(store):
    a = store.add("note a", user_id="m", session_id="s1")
    b = store.add("note b", user_id="m", session_id="s2")
    c = store.add("note c", user_id="m", session_id="s1")
    other = store.add("note of another user", user_id="z", session_id="s1")
    with pytest.raises(ValidationError):
        merge_notes(store, a, a, user_id="m")
    with pytest.raises(ValidationError):
        merge_notes(store, a, b, user_id="m")  # other session
    with pytest.raises(NotFoundError):
        merge_notes(store, a, other, user_id="m")  # other user
    with pytest.raises(ValidationError):
        merge_notes(store, a, c, user_id="m", strategy="shred")
    merge_notes(store, a, c, user_id="m")
    with pytest.raises(ValidationError):
        merge_notes(store, a, c, user_id="m")  # already merged
    with pytest.raises(ValidationError):
        merge_notes(store, c, a, user_id="m")  # into a merged note
    assert store.get(other, user_id="z").content == "note of another user"


def test_a_merge_keeps_the_sessions_context_embeddings_current(store):
    """The source leaves the session's order and the target takes the later time: the target,
    and the notes that followed either, get the contexts of their new places."""
    from tests.test_conversation_context import _context_vector, _session_contexts_are_current

    ids = [
        store.add(
            f"note {i} about gardening topic {i}",
            user_id="m",
            session_id="s",
            time=f"2024-01-0{i + 1}T12:00:00Z",
        )
        for i in range(6)
    ]
    merge_notes(store, ids[1], ids[4], user_id="m")  # 0 2 3 4(+1) 5
    _session_contexts_are_current(store, "m")
    assert _context_vector(store, ids[1]) is None  # the source has left the order
    merge_notes(store, ids[5], ids[0], user_id="m")  # 2 3 4 0(+5): 0 moves to the end
    _session_contexts_are_current(store, "m")


def test_the_text_of_a_merged_note_added_again_is_the_note_it_was_merged_into(store):
    a = store.add("Caroline adopted a cat named Luna", user_id="d", session_id="s", time="2024-01-01")
    b = store.add("Caroline has a cat called Luna", user_id="d", session_id="s", time="2024-01-02")
    c = store.add("Caroline's pets: a cat", user_id="d", session_id="s", time="2024-01-03")
    merge_notes(store, b, a, user_id="d")
    merged = store.get(a, user_id="d").content
    assert store.add("Caroline has a cat called Luna", user_id="d", session_id="s") == a
    assert store.add_many([{"content": "Caroline has a cat called Luna"}], user_id="d", session_id="s") == [a]
    assert store.get(a, user_id="d").content == merged and store.count(user_id="d") == 2
    merge_notes(store, a, c, user_id="d")  # b -> a -> c: the chain is followed
    assert store.add("Caroline has a cat called Luna", user_id="d", session_id="s") == c
    assert store.add("Caroline has a cat called Luna", user_id="d", session_id="other") not in (a, b, c)


def test_a_merge_unions_tags_and_keywords_up_to_the_stores_limit(store):
    """700 + 700 tags: the target's, then the source's in order, up to 1,000; the ones left
    out stay on the source (kept for history) and are named in the target's history entry."""
    most = validation.MAX_LIST_ITEMS
    target = store.add(
        "the target note",
        user_id="m",
        tags=[f"t{i}" for i in range(700)],
        keywords=[f"k{i}" for i in range(700)],
    )
    source = store.add(
        "the source note",
        user_id="m",
        tags=["t0", *(f"s{i}" for i in range(700))],
        keywords=[f"j{i}" for i in range(700)],
    )
    merge_notes(store, source, target, user_id="m")
    t = store.get(target, user_id="m")
    assert t.tags == [f"t{i}" for i in range(700)] + [f"s{i}" for i in range(most - 700)]
    assert t.keywords == [f"k{i}" for i in range(700)] + [f"j{i}" for i in range(most - 700)]
    entry = t.evolution_history[-1]
    assert entry["tags_left_out"] == [f"s{i}" for i in range(most - 700, 700)]
    assert entry["keywords_left_out"] == [f"j{i}" for i in range(most - 700, 700)]
    s = store.get(source, user_id="m")
    assert s.merged_into == target and len(s.tags) == 701 and len(s.keywords) == 700
    store.update(target, user_id="m", tags=t.tags, keywords=t.keywords)  # still within the limits


def test_a_merge_whose_text_or_metadata_would_pass_the_limit_is_refused(store):
    """Appending would make a note longer than the store takes (or its metadata larger): the
    merge is refused before anything is written, and both notes stay as they were."""
    half = validation.MAX_CONTENT_LENGTH // 2 + 10
    a = store.add("alpha " * (half // 6), user_id="m")
    b = store.add("bravo " * (half // 6), user_id="m")
    before = {n: store.get(n, user_id="m") for n in (a, b)}
    with pytest.raises(ValidationError) as err:
        merge_notes(store, a, b, user_id="m")
    assert err.value.field == "merge" and "500,000" in str(err.value)
    for n, note in before.items():
        now = store.get(n, user_id="m")
        assert (now.content, now.merged_into, now.evolution_history) == (note.content, None, [])
    merge_notes(store, a, b, user_id="m", strategy="replace")  # no longer: the source's text
    assert store.get(b, user_id="m").content == before[a].content

    big = {f"k{i}": "x" * 1000 for i in range(60)}
    c = store.add("charlie", user_id="m", metadata=big)
    d = store.add("delta", user_id="m", metadata={f"o{i}": "y" * 1000 for i in range(60)})
    with pytest.raises(ValidationError) as err:
        merge_notes(store, c, d, user_id="m")
    assert err.value.field == "merge" and "metadata" in str(err.value)
    assert store.get(c, user_id="m").merged_into is None
    assert store.get(d, user_id="m").metadata == {f"o{i}": "y" * 1000 for i in range(60)}


def test_an_evolution_merge_refused_for_length_completes_its_job(store, caplog):
    """The offline heuristic merges a near duplicate; when the merged text would be too long
    the job still ends done, the refusal in its result and the log, both notes kept whole."""
    from cortex_pg.evolution import Worker, heuristic_decider

    text_ = "Caroline went to the support group meeting on Tuesday evening. " * 4200  # 264,600
    old = store.add(text_, user_id="h")
    new = store.add(text_ + " Again.", user_id="h", enqueue_evolution=True)
    with caplog.at_level("INFO", logger="cortex_pg.evolution"):
        Worker(store, decider=heuristic_decider(), listen=False).process_available()
    with store.engine.connect() as conn:
        status, result = conn.execute(text("SELECT status, result FROM cortex.evolution_jobs")).one()
    assert status == "done" and result["merged_into"] is None
    assert "500,000" in result["merge_refused"] and "500,000" in caplog.text
    assert store.get(new, user_id="h").merged_into is None
    assert store.get(old, user_id="h").content == text_
