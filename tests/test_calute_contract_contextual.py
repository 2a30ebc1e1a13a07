"""calute's documented ContextualMemory contract on a store shared with a second process."""

from __future__ import annotations

from cortex_pg.compat.calute import ContextualMemory, MemoryItem
from tests.helpers.calute_contract import (
    check_filter_errors,
    check_get_context,
    check_statistics,
    check_unknown_ids,
    run_child,
)

CHILD = """
from cortex_pg.compat.calute import ContextualMemory
ctx = ContextualMemory(store=store, user_id="u", session_id="s")
ctx.push_context("task", {"name": "report"})
ctx.save("draft the outline", agent_id="writer", conversation_id="c1")
ctx.save("the board approved the budget", importance=0.9, agent_id="cfo", conversation_id="c2")
"""


def test_contextual_contract_with_a_second_process(db_url, store):
    ctx = ContextualMemory(short_term_capacity=5, store=store, user_id="u", session_id="s")
    assert len(ctx) == 0 and ctx.retrieve() == [] and ctx.search("budget") == []
    assert ctx.get_context() == "" and ctx.get_current_context() is None and ctx.pop_context() is None
    stats = ctx.get_statistics()
    check_statistics(stats, total=0, types={}, agents=0, users=0, convs=0)
    assert stats["max_items"] == 5 + 10000 and stats["context_depth"] == 0
    assert ctx.get_context_summary() == "No context available."

    run_child(db_url, CHILD)
    assert ctx.get_current_context()["type"] == "task" and len(ctx.context_stack) == 1
    check_get_context(ctx, [("writer", "draft the outline"), ("cfo", "the board approved the budget")])
    stats = ctx.get_statistics()
    check_statistics(stats, total=2, types={"short_term": 1, "long_term": 1}, agents=2, users=1, convs=2)
    assert (stats["short_term_items"], stats["long_term_items"], stats["context_depth"]) == (1, 1, 1)

    assert [i.content for i in ctx.retrieve(filters={"agent_id": "cfo"})] == ["the board approved the budget"]
    assert [i.content for i in ctx.retrieve(filters={"memory_type": "long_term"})] == [
        "the board approved the budget"
    ]
    assert [i.content for i in ctx.search("budget", filters={"conversation_id": "c2"})] == [
        "the board approved the budget"
    ]
    check_filter_errors(lambda f: ctx.retrieve(filters=f))
    check_filter_errors(lambda f: ctx.search("budget", filters=f))
    check_filter_errors(lambda f: ctx.delete(filters=f))

    other = ContextualMemory(store=store, user_id="v", session_id="s").save("another user's item")
    check_unknown_ids(ctx, other.memory_id)

    item = ctx.save("a quick note", agent_id="a")
    assert isinstance(item, MemoryItem) and ctx.retrieve(memory_id=item.memory_id).content == "a quick note"
    assert ctx.update(item.memory_id, {"content": "a quicker note"}) is True
    assert ctx.delete(memory_id=item.memory_id) == 1
    assert ctx.pop_context()["type"] == "task"
    assert ctx.clear() is None and len(ctx) == 0 and ctx.get_context() == ""
