"""calute's documented ShortTermMemory contract on a store shared with a second process."""

from __future__ import annotations

from cortex_pg.compat.calute import MemoryItem, ShortTermMemory
from tests.helpers.calute_contract import (
    check_filter_errors,
    check_get_context,
    check_statistics,
    check_unknown_ids,
    run_child,
)

CHILD = """
from cortex_pg.compat.calute import ShortTermMemory
stm = ShortTermMemory(capacity=10, store=store, user_id="u")
stm.save("plan the sprint", agent_id="planner", conversation_id="c1")
stm.save("write the code", agent_id="coder", conversation_id="c1", year=2023)
stm.save("system note")
"""


def test_short_term_contract_with_a_second_process(db_url, store):
    stm = ShortTermMemory(capacity=10, store=store, user_id="u")
    # empty store: calute's return types
    assert len(stm) == 0 and stm.retrieve() == [] and stm.search("anything") == []
    assert stm.get_context() == "" and stm.get_context(format_type="json") == "[]"
    check_statistics(stm.get_statistics(), total=0, types={}, agents=0, users=0, convs=0)
    assert stm.get_statistics()["max_items"] == 10 and stm.max_items == stm.capacity == 10
    assert stm.get_recent() == [] and stm.summarize() == "No recent memories."

    run_child(db_url, CHILD)  # another process writes; this one reads
    assert len(stm) == 3
    check_get_context(
        stm, [("planner", "plan the sprint"), ("coder", "write the code"), (None, "system note")]
    )
    check_statistics(
        stm.get_statistics(), total=3, types={"short_term": 3}, agents=2, users=1, convs=1
    )  # the items' user is the tenant "u"

    # filters on item fields and metadata, one language
    assert [i.content for i in stm.retrieve(filters={"agent_id": "coder"})] == ["write the code"]
    assert [
        i.content for i in stm.retrieve(filters={"memory_type": "short_term", "conversation_id": "c1"})
    ] == [
        "write the code",
        "plan the sprint",
    ]  # newest first
    assert [i.content for i in stm.retrieve(filters={"year": {"$gte": 2022}})] == ["write the code"]
    assert stm.retrieve(filters={"memory_type": "entity"}) == []
    assert [i.content for i in stm.search("code", filters={"agent_id": "coder"})] == ["write the code"]
    check_filter_errors(lambda f: stm.retrieve(filters=f))
    check_filter_errors(lambda f: stm.search("code", filters=f))
    check_filter_errors(lambda f: stm.delete(filters=f))

    # unknown ids: None / False / 0, also an id of another tenant's item
    other = ShortTermMemory(store=store, user_id="someone else").save("not yours")
    check_unknown_ids(stm, other.memory_id)

    # save / retrieve / update / delete / clear return calute's types
    item = stm.save("new item", metadata={"k": 1}, agent_id="a")
    assert isinstance(item, MemoryItem) and item.memory_type == "short_term" and item.agent_id == "a"
    got = stm.retrieve(memory_id=item.memory_id)
    assert isinstance(got, MemoryItem) and got.content == "new item"
    assert stm.update(item.memory_id, {"content": "newer item"}) is True
    assert stm.retrieve(memory_id=item.memory_id).content == "newer item"
    assert stm.delete(memory_id=item.memory_id) == 1 and stm.delete(memory_id=item.memory_id) == 0
    assert stm.delete(filters={"agent_id": None}) == 0  # unset keys filter nothing, delete nothing
    assert stm.delete(filters={"agent_id": "planner"}) == 1
    assert stm.clear() is None and len(stm) == 0
    assert repr(stm) == "ShortTermMemory(items=0, max=10)"
