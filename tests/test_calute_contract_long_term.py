"""calute's documented LongTermMemory contract on a store shared with a second process."""

from __future__ import annotations

from cortex_pg.compat.calute import LongTermMemory, MemoryItem
from tests.helpers.calute_contract import (
    check_filter_errors,
    check_get_context,
    check_statistics,
    check_unknown_ids,
    run_child,
)

CHILD = """
from cortex_pg.compat.calute import LongTermMemory
ltm = LongTermMemory(max_items=50, store=store, user_id="u", session_id="s")
ltm.save("quarterly revenue grew", agent_id="analyst", user_id="alice", conversation_id="c1", importance=0.9)
ltm.save("hire two engineers", agent_id="manager", user_id="bob", conversation_id="c2", importance=0.4)
ltm.save("office moves in May", user_id="alice", time="2024-05-01T00:00:00Z")
"""


def test_long_term_contract_with_a_second_process(db_url, store):
    ltm = LongTermMemory(max_items=50, store=store, user_id="u", session_id="s")
    assert len(ltm) == 0 and ltm.retrieve() == [] and ltm.search("revenue") == []
    assert ltm.get_context() == "" and ltm.get_context(format_type="markdown") == ""
    check_statistics(ltm.get_statistics(), total=0, types={}, agents=0, users=0, convs=0)
    assert ltm.get_statistics()["max_items"] == 50
    assert ltm.consolidate() == "No long-term memories available."

    run_child(db_url, CHILD)
    assert len(ltm) == 3
    # newest by the items' own time: the May 2024 item is the oldest
    check_get_context(
        ltm,
        [
            (None, "office moves in May"),
            ("analyst", "quarterly revenue grew"),
            ("manager", "hire two engineers"),
        ],
    )
    check_statistics(ltm.get_statistics(), total=3, types={"long_term": 3}, agents=2, users=2, convs=2)

    assert [i.content for i in ltm.retrieve(filters={"user_id": "alice"})] == [
        "office moves in May",
        "quarterly revenue grew",
    ]  # oldest first, as calute
    assert [i.content for i in ltm.retrieve(filters={"importance": {"$gte": 0.8}})] == [
        "quarterly revenue grew"
    ]
    assert [i.content for i in ltm.retrieve(filters={"timestamp": {"$lt": "2025-01-01T00:00:00Z"}})] == [
        "office moves in May"
    ]
    assert [i.content for i in ltm.search("revenue", filters={"conversation_id": "c1"})] == [
        "quarterly revenue grew"
    ]
    assert {i.conversation_id for i in ltm.search("revenue", filters={"conversation_id": "c2"})} <= {"c2"}
    check_filter_errors(lambda f: ltm.retrieve(filters=f))
    check_filter_errors(lambda f: ltm.search("revenue", filters=f))
    check_filter_errors(lambda f: ltm.delete(filters=f))

    elsewhere = LongTermMemory(store=store, user_id="u", session_id="other").save("another session's item")
    check_unknown_ids(ltm, elsewhere.memory_id)

    item = ltm.save("a new plan", importance=0.7, agent_id="a")
    assert isinstance(item, MemoryItem) and item.memory_type == "long_term"
    assert ltm.update(item.memory_id, {"importance": 0.2}) is True
    assert ltm.retrieve(memory_id=item.memory_id).metadata["importance"] == 0.2
    assert ltm.delete(filters={"agent_id": "a"}) == 1
    assert ltm.clear() is None and len(ltm) == 0
    assert repr(ltm) == "LongTermMemory(items=0, max=50)"


def test_a_temporal_keyword_is_not_a_full_text_term(store):
    # as MemoryStore.search: "yesterday" asks for a time, so the note that only says the word
    # (twice; the nearest to the query by the hashing embedder) does not pass the garden note
    # by it, as it did when "yesterday" was a term
    ltm = LongTermMemory(max_items=50, store=store, user_id="u", session_id="s")
    for content in ("yesterday yesterday", "garden plants soil", "zebra"):
        ltm.save(content)
    found = [m.content for m in ltm.search("garden yesterday", limit=3)]
    assert found == ["garden plants soil", "yesterday yesterday", "zebra"]
    stored = [r.content for r in store.search("garden yesterday", user_id="u", limit=3, touch=False)]
    assert stored == found
