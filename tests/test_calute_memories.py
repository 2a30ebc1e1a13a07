"""calute API: MemoryItem, ShortTermMemory, LongTermMemory, ContextualMemory, UserMemory."""

from __future__ import annotations

import logging
import math
import threading
from datetime import UTC, datetime, timedelta

import pytest

import cortex_pg
from cortex_pg import ValidationError
from cortex_pg.compat.calute import (
    ContextualMemory,
    LongTermMemory,
    MemoryEntry,
    MemoryItem,
    ShortTermMemory,
    UserMemory,
)
from cortex_pg.entities import EntityMemory
from cortex_pg.entities import MemoryItem as EntityItem
from tests.helpers.calute_contract import check_context_embeddings

ITEM_KEYS = {
    "memory_id",
    "content",
    "memory_type",
    "timestamp",
    "metadata",
    "agent_id",
    "task_id",
    "conversation_id",
    "user_id",
    "relevance_score",
    "access_count",
    "last_accessed",
}


# ---------------------------------------------------------------------- MemoryItem
def test_memory_item_fields_and_round_trip():
    meta = {"k": [1, 2]}
    a = MemoryItem("hello", metadata=meta, agent_id="A", embedding=[0.1, 0.2])
    b = MemoryItem("other", metadata=meta)
    meta["k"].append(3)
    assert a.metadata == {"k": [1, 2]} and a.metadata is not b.metadata  # copied, never shared
    d = a.to_dict()
    assert set(d) == ITEM_KEYS and "embedding" not in d
    assert d["timestamp"] == a.timestamp.isoformat() and a.timestamp.tzinfo is not None
    d["metadata"]["k"].append(9)
    assert a.metadata == {"k": [1, 2]}
    back = MemoryItem.from_dict(a.to_dict())
    assert back.to_dict() == a.to_dict() and back.embedding is None
    with pytest.raises(TypeError):
        MemoryItem.from_dict({**a.to_dict(), "bogus": 1})
    assert MemoryItem("x").memory_type == "general" and MemoryItem("x").relevance_score == 1.0
    assert MemoryEntry is MemoryItem is EntityItem  # one class, shared with EntityMemory


def test_memory_item_from_dict_raises_validation_errors_naming_the_field():
    cases = [
        ({"content": "x", "timestamp": "garbage"}, "timestamp"),
        ({"content": "x", "timestamp": 12}, "timestamp"),
        ({"content": "x", "last_accessed": "yesterday-ish"}, "last_accessed"),
        ({}, "content"),
        ({"timestamp": "garbage"}, "content"),
        ({"content": 3}, "content"),
        ({"content": "x", "metadata": [1]}, "metadata"),
        ({"content": "x", "bogus": 1}, "bogus"),
    ]
    for data, field in cases:
        with pytest.raises(ValidationError) as info:
            MemoryItem.from_dict(data)
        assert info.value.field == field, data
    with pytest.raises(ValidationError) as info:
        MemoryItem.from_dict(["content"])  # type: ignore[arg-type]
    assert info.value.field == "data"
    with pytest.raises(TypeError):  # an unknown key is still a TypeError, as in calute
        MemoryItem.from_dict({"content": "x", "bogus": 1})
    item = MemoryItem.from_dict({"content": "x", "timestamp": "2024-01-01T00:00:00", "last_accessed": None})
    assert item.timestamp.tzinfo is not None and item.last_accessed is None


def test_public_names():
    for name in ("CortexMemory", "ContextualMemory", "ShortTermMemory", "LongTermMemory", "UserMemory"):
        assert name in cortex_pg.__all__
    assert cortex_pg.EntityMemory is EntityMemory and cortex_pg.MemoryItem is MemoryItem


# ---------------------------------------------------------------------- ShortTermMemory
@pytest.fixture
def stm(store):
    return ShortTermMemory(capacity=3, store=store, user_id="u", session_id="s")


def test_short_term_save_retrieve_update_delete_clear(stm):
    assert len(stm) == 0 and bool(stm)  # an empty memory still takes writes
    meta = {"topic": "x"}
    item = stm.save("first note about parsing", meta, agent_id="A", conversation_id="c1", extra=1)
    assert meta == {"topic": "x"}  # caller dict unchanged
    assert item.memory_type == "short_term" and item.agent_id == "A" and item.conversation_id == "c1"
    assert item.metadata["extra"] == 1
    got = stm.retrieve(item.memory_id)
    assert got.content == item.content and got.access_count == 1
    assert stm.retrieve("not-a-uuid") is None
    assert stm.update(item.memory_id, {"content": "first note about lexing", "metadata": {"b": 2}})
    got = stm.retrieve(item.memory_id)
    assert (
        got.content == "first note about lexing" and got.metadata["topic"] == "x" and got.metadata["b"] == 2
    )
    stm.save("second", agent_id="B")
    assert [i.content for i in stm.retrieve(filters={"agent_id": "B"})] == ["second"]
    assert stm.delete(filters={"agent_id": "B"}) == 1
    assert stm.delete(item.memory_id) == 1 and stm.delete(item.memory_id) == 0
    stm.save("third")
    stm.clear()
    assert len(stm) == 0


def test_short_term_save_survives_a_clear_between_its_write_and_its_read(stm, monkeypatch):
    from cortex_pg.compat.calute.shelf import Shelf

    real_get = Shelf.get
    cleared = []

    def get_after_a_concurrent_clear(self, memory_id, *, touch=False):
        if not cleared:  # another caller's clear commits between the save's two transactions
            cleared.append(True)
            ShortTermMemory(capacity=3, store=self.store, user_id="u", session_id="s").clear()
        return real_get(self, memory_id, touch=touch)

    monkeypatch.setattr(Shelf, "get", get_after_a_concurrent_clear)
    item = stm.save("saved while another agent clears")
    assert cleared and item.content == "saved while another agent clears"
    assert [i.content for i in stm.get_recent(5)] == ["saved while another agent clears"]


def test_save_of_text_another_store_of_the_session_holds_is_a_conflict(store):
    from cortex_pg import ConflictError
    from cortex_pg.compat.calute.shelf import Shelf

    Shelf(store, "u", "s", "ltm", "episodic").add("shared wording", None)
    with pytest.raises(ConflictError) as err:
        Shelf(store, "u", "s", "ltm", "semantic").add("shared wording", None)
    assert err.value.field == "content" and "not a 'semantic' item" in str(err.value)


def test_short_term_capacity_is_lru_and_recent_is_chronological(stm):
    a = stm.save("alpha item")
    stm.save("beta item")
    stm.save("gamma item")
    stm.retrieve(a.memory_id)  # alpha is now the most recently used
    stm.save("delta item")
    assert len(stm) == 3
    assert {i.content for i in stm.get_recent(10)} == {"alpha item", "gamma item", "delta item"}
    assert [i.content for i in stm.get_recent(2)] == ["gamma item", "delta item"]


def test_short_term_search_min_relevance_excludes_and_blank_query_lists(store):
    stm = ShortTermMemory(capacity=20, store=store, user_id="u", session_id="q")
    stm.save("the database index was rebuilt", agent_id="A")
    stm.save("lunch was pasta", agent_id="B")
    hits = stm.search("database index", limit=5)
    assert hits[0].content == "the database index was rebuilt"
    assert all(0 <= h.relevance_score <= 1 for h in hits)
    strict = stm.search("database index", limit=5, min_relevance=0.6)
    assert [h.content for h in strict] == ["the database index was rebuilt"]  # no-word match: half at most
    assert [h.content for h in stm.search("", filters={"agent_id": "B"})] == ["lunch was pasta"]
    assert [h.content for h in stm.search("", limit=5)] == [
        "lunch was pasta",
        "the database index was rebuilt",
    ]
    with pytest.raises(ValidationError):
        stm.search("x", min_relevance=2)


BAD_QUERIES = [
    (123, "must be a string"),
    (None, "must be a string"),
    (["pottery"], "must be a string"),
    ("pot\x00tery", "NUL"),
    ("pot\ud800tery", "lone surrogate"),
    ("pottery " * 25_000, "longer than 10000 characters"),
]


@pytest.mark.parametrize(
    ("query", "reason"), BAD_QUERIES, ids=["int", "none", "list", "nul", "surrogate", "long"]
)
def test_calute_searches_refuse_a_bad_query_naming_it_and_touch_nothing(store, query, reason):
    """A query that is not a string was taken as blank (every item listed and counted as
    accessed); NUL gave a DatabaseError naming no field, a lone surrogate a bare TypeError, and
    LongTermMemory took 200,000 characters: each is ValidationError(field="query") now, as
    MemoryStore.search raises, before any item is read or touched."""
    stm = ShortTermMemory(store=store, user_id="u", session_id="bad")
    ltm = LongTermMemory(store=store, user_id="u", session_id="bad")
    ctx = ContextualMemory(store=store, user_id="u", session_id="badctx")
    entities = EntityMemory(store, user_id="u", session_id="badent")
    users = UserMemory(store=store)
    stm.save("Alice's short note about the pottery class")
    ltm.save("Alice's note about the pottery class")
    ctx.save("Alice's contextual note about the pottery class", importance=0.2)
    ctx.save("Alice's lasting note about the pottery class", importance=0.9)
    entities.save("Alice joined the pottery class")
    searches = {
        "ShortTermMemory": lambda: stm.search(query),
        "LongTermMemory": lambda: ltm.search(query),
        "ContextualMemory": lambda: ctx.search(query),
        "EntityMemory": lambda: entities.search(query),
        "EntityMemory(entity_filter)": lambda: entities.search(query, entity_filter=["Alice"]),
        "UserMemory": lambda: users.search_user_memory("newcomer", query),
    }
    for name, search in searches.items():
        with pytest.raises(ValidationError) as err:
            search()
        assert err.value.field == "query", name
        assert reason in err.value.reason, name
    for memory in (stm, ltm, ctx.short_term, ctx.long_term):  # nothing listed, nothing touched
        assert all(n.access_count == 0 for n in memory.shelf.list())
    assert "newcomer" not in users.user_preferences  # refused before the user became known


def test_calute_blank_queries_still_list_the_newest_items(store):
    stm = ShortTermMemory(store=store, user_id="u", session_id="blank")
    ltm = LongTermMemory(store=store, user_id="u", session_id="blank")
    stm.save("older short note")
    stm.save("newer short note")
    ltm.save("a long-term note")
    for blank in ("", "   ", "\t\n", "\u200b", "\u3164", "\u2800", "\u0301"):
        assert [i.content for i in stm.search(blank)] == ["newer short note", "older short note"]
        assert [i.content for i in ltm.search(blank)] == ["a long-term note"]
        assert [i.relevance_score for i in stm.search(blank)] == [1.0, 1.0]


def test_short_term_summarize(store):
    stm = ShortTermMemory(store=store, user_id="u", session_id="sum")
    assert stm.summarize() == "No recent memories."
    stm.save("plain one", agent_id="A")
    for i in range(4):
        stm.save(f"conv line {i} " + "x" * 120, conversation_id="c9")
    text = stm.summarize().split("\n")
    assert text[0] == "Recent activity:" and text[1] == "  [A]: plain one"
    assert text[2] == "" and text[3] == "Conversation c9:"
    assert [t[:17] for t in text[4:]] == ["  [System]: conv ", "  [System]: conv ", "  [System]: conv "]
    assert text[4].startswith("  [System]: conv line 1") and len(text[4]) == len("  [System]: ") + 100


# ---------------------------------------------------------------------- LongTermMemory
@pytest.fixture
def ltm(store):
    return LongTermMemory(store=store, user_id="u", session_id="l", max_items=100)


def test_long_term_at_capacity_saving_a_text_it_holds_removes_nothing(store):
    ltm = LongTermMemory(store=store, user_id="u", session_id="cap", max_items=3)
    items = [ltm.save(f"item number {i}", importance=0.1 * (i + 1)) for i in range(3)]
    ltm.retrieve(items[0].memory_id)  # counted as accessed
    again = ltm.save("item number 0")  # the weakest item, saved again: the same item
    assert again.memory_id == items[0].memory_id and again.access_count == 1
    assert len(ltm) == 3 and {i.memory_id for i in ltm.retrieve()} == {i.memory_id for i in items}
    ltm.save("item number 3")  # a new text makes room as before
    assert len(ltm) == 3


def test_long_term_capacity_holds_under_concurrent_saves(store):
    """Savers in threads on a full scope: never more than max_items once they are done, and
    each saver's item is kept (the count, the cleanup and the insert were three transactions, and
    six threads left 8 to 10 items in a scope of 5)."""
    ltm = LongTermMemory(store=store, user_id="u", session_id="race", max_items=5)
    for i in range(5):
        ltm.save(f"first fill number {i}", importance=0.1)
    saved, errors = [], []

    def saver(k: int) -> None:
        mine = LongTermMemory(store=store, user_id="u", session_id="race", max_items=5)
        try:
            for j in range(3):
                saved.append(mine.save(f"thread {k} item {j}", importance=0.9).memory_id)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(saved) == 18
    assert len(ltm) == 5
    kept = {i.memory_id for i in ltm.retrieve(limit=20)}
    assert kept <= set(saved)  # the first fill (importance 0.1) went first


def test_long_term_save_search_weights_and_retrieve(ltm):
    meta = {"src": "t"}
    lo = ltm.save("quarterly revenue report numbers", meta, agent_id="A", importance=0.1)
    hi = ltm.save("quarterly revenue report figures", agent_id="B", importance=0.9)
    assert meta == {"src": "t"} and lo.metadata["importance"] == 0.1
    hits = ltm.search("quarterly revenue report", limit=5)
    assert {h.memory_id for h in hits} == {lo.memory_id, hi.memory_id}
    assert hits[0].memory_id == hi.memory_id  # importance breaks the near-tie (weight 0.2)
    assert all(0 <= h.relevance_score <= 1 for h in hits)
    assert [h.memory_id for h in ltm.search("quarterly revenue", filters={"agent_id": "A"})] == [lo.memory_id]
    assert [i.memory_id for i in ltm.retrieve(filters={})] == [lo.memory_id, hi.memory_id]  # oldest first
    assert ltm.retrieve(hi.memory_id).access_count >= 2
    assert (
        ltm.update(lo.memory_id, {"importance": 0.5})
        and ltm.retrieve(lo.memory_id).metadata["importance"] == 0.5
    )
    assert ltm.delete(lo.memory_id) == 1 and len(ltm) == 1


def test_long_term_cleanup_is_sql_and_reported(store, caplog):
    ltm = LongTermMemory(store=store, user_id="u", session_id="c", max_items=3, retention_days=30)
    old = ltm.save("an old memory", importance=0.9, time=datetime.now(UTC) - timedelta(days=40))
    keep = ltm.save("important fresh memory", importance=0.9)
    weak = ltm.save("weak fresh memory", importance=0.0)
    with caplog.at_level(logging.WARNING, logger="cortex_pg.compat.calute.long_term"):
        ltm.save("newest memory", importance=0.5)
    assert old.memory_id in ltm.last_cleanup.expired
    assert len(ltm) == 3 and "past retention" in caplog.text
    ltm.save("another memory", importance=0.5)  # full again: the lowest score goes
    assert ltm.last_cleanup.over_capacity == [weak.memory_id]
    assert ltm.retrieve(keep.memory_id) is not None and len(ltm) == 3


@pytest.mark.parametrize("days", [float("nan"), 1e300, 1_000_001, -math.inf, 0, "30", True])
def test_long_term_retention_out_of_range_is_refused(store, days):
    with pytest.raises(ValidationError) as err:
        LongTermMemory(store=store, user_id="u", session_id="r", retention_days=days)
    assert err.value.field == "retention_days"


@pytest.mark.parametrize("days", [1_000_000, math.inf])
def test_long_term_retention_at_its_bounds_keeps_a_full_memory_working(store, days):
    ltm = LongTermMemory(store=store, user_id="u", session_id="r", max_items=1, retention_days=days)
    first = ltm.save("the first memory", time=datetime(1900, 1, 1, tzinfo=UTC))
    second = ltm.save("the second memory")  # full: a cleanup runs, bounded by the retention
    assert [i.memory_id for i in ltm.retrieve(filters={})] == [second.memory_id]
    assert ltm.last_cleanup.over_capacity == [first.memory_id] and ltm.last_cleanup.expired == []
    assert ltm.search("second memory")[0].memory_id == second.memory_id


def test_long_term_consolidate_merges_and_formats(ltm):
    assert ltm.consolidate() == "No long-term memories available."
    ltm.save("the cache layer uses redis for sessions", agent_id="data analyst", importance=0.4)
    ltm.save("the cache layer uses redis for sessions today", agent_id="data analyst", importance=0.8)
    ltm.save("deploys happen on fridays", conversation_id="ops", importance=0.3)
    text = ltm.consolidate()
    lines = text.split("\n")
    assert lines[0] == "Long-term memory summary:"
    assert (
        "\nData Analyst:\n  - the cache layer uses redis for sessions today (importance: 0.8, accessed: 0x)"
        in text
    )
    assert "\nOps:\n  - deploys happen on fridays (importance: 0.3, accessed: 0x)" in text
    assert len(ltm) == 2  # the shorter similar item was merged into the longer one
    assert ltm.consolidate(merge_similar=False) == text


# ---------------------------------------------------------------------- ContextualMemory
@pytest.fixture
def ctx(store):
    return ContextualMemory(store=store, user_id="u", session_id="ctx")


def test_contextual_routes_by_importance(ctx):
    low = ctx.save("a passing remark", importance=0.2)
    high = ctx.save("a key decision", importance=0.7)
    forced = ctx.save("pinned fact", to_long_term=True)
    assert low.memory_type == "short_term" and low.metadata["importance"] == 0.2
    assert high.memory_type == "long_term" and forced.memory_type == "long_term"
    assert len(ctx.short_term) == 1 and len(ctx.long_term) == 2
    assert ctx.update(high.memory_id, {"content": "a key decision, revised"})
    assert ctx.delete(low.memory_id) == 1


def test_promotion_happens_once(ctx):
    item = ctx.save("draft numbers", importance=0.4)
    for _ in range(2):
        ctx.retrieve(item.memory_id)
    assert len(ctx.long_term) == 0
    third = ctx.retrieve(item.memory_id)
    assert third.access_count == 3 and third.metadata["promoted"] is True
    assert len(ctx.long_term) == 1
    for _ in range(5):
        ctx.retrieve(item.memory_id)
    assert len(ctx.long_term) == 1  # calute copied again on every later read
    copy = ctx.long_term.retrieve(item.memory_id)
    assert copy.content == "draft numbers" and copy.metadata["importance"] == 0.4
    # one item on both shelves: listed once, deleted once
    other = ctx.save("other numbers", importance=0.4)
    assert [i.memory_id for i in ctx.retrieve()].count(item.memory_id) == 1
    assert {i.memory_id for i in ctx.retrieve()} == {item.memory_id, other.memory_id}
    assert ctx.delete(item.memory_id) == 1 and ctx.retrieve(item.memory_id) is None
    assert ctx.delete(filters={"importance": 0.4}) == 1  # the other one


def test_context_stack_push_pop_peek_and_survives_reopening(ctx, db_url):
    from cortex_pg.embeddings import HashingEmbedder
    from cortex_pg.store import MemoryStore

    assert ctx.get_current_context() is None and ctx.pop_context() is None
    ctx.push_context("project", {"name": "apollo"})
    ctx.push_context("task", {"name": "write report"})
    assert ctx.get_current_context()["type"] == "task"
    other = MemoryStore.open(db_url, embedder=HashingEmbedder())
    try:
        again = ContextualMemory(store=other, user_id="u", session_id="ctx")
        assert [f["type"] for f in again.context_stack] == ["project", "task"]
        top = again.pop_context()
        assert top["type"] == "task" and top["data"] == {"name": "write report"}
        assert top["timestamp"].tzinfo is not None
    finally:
        other.close()
    assert ctx.get_current_context()["type"] == "project"
    assert (
        ContextualMemory(store=ctx.store, user_id="u", session_id="elsewhere").get_current_context() is None
    )


@pytest.mark.parametrize(
    ("context_type", "context_data", "field"),
    [
        ("ta\x00sk", None, "context_type"),
        ("ta\ud800sk", None, "context_type"),
        ("t" * 256, None, "context_type"),
        ("\u200b", None, "context_type"),
        ("\u3164", None, "context_type"),
        ("\u115f\u1160 \uffa0", None, "context_type"),
        ("\u2800", None, "context_type"),
        ("\u0301\u0302", None, "context_type"),
        ("task", {"notes": "x" * 50_000}, "context_data"),
    ],
)
def test_a_frame_that_would_block_saves_is_refused(ctx, context_type, context_data, field):
    ctx.push_context("task", {"name": "ok"})
    with pytest.raises(ValidationError) as err:
        ctx.push_context(context_type, context_data)
    assert err.value.field == field
    assert [f["type"] for f in ctx.context_stack] == ["task"]
    # the largest frame allowed leaves room for the item's own metadata
    ctx.push_context("t" * 255, {"notes": "x" * 49_900})
    item = ctx.save("saved under the largest frame", metadata={"extra": "y" * 40_000})
    assert item.metadata["context"]["type"] == "t" * 255


def test_concurrent_pops_return_distinct_frames(ctx):
    for i in range(20):
        ctx.push_context("step", {"i": i})
    popped: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        while (frame := ctx.pop_context()) is not None:
            with lock:
                popped.append(frame["data"]["i"])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(popped) == list(range(20))


def test_contextual_search_sources_and_context_boost(ctx):
    ctx.save("notes on the alpha launch plan", importance=0.3)
    ctx.push_context("project", {"name": "beta launch"})
    boosted = ctx.save("notes on the beta launch plan", importance=0.9)
    results = ctx.search("launch plan notes", limit=5)
    assert {r.metadata["source"] for r in results} == {"short_term", "long_term"}
    assert results[0].memory_id == boosted.memory_id
    assert boosted.metadata["context"]["type"] == "project"
    only_short = ctx.search("launch plan notes", search_long_term=False)
    assert {r.metadata["source"] for r in only_short} == {"short_term"}


def test_context_summary_sections(ctx):
    assert ctx.get_context_summary() == "No context available."
    ctx.push_context("task", {"goal": "ship"})
    ctx.save("recent thing", importance=0.1)
    ctx.save("vital thing", importance=0.85)
    ctx.save("medium thing", importance=0.75)
    text = ctx.get_context_summary()
    assert text == (
        "Current context:\n  - task: {'goal': 'ship'}\n\nRecent activity:\n  - recent thing\n\n"
        "Important memories:\n  - vital thing"
    )
    ctx.clear()
    assert ctx.get_context_summary() == "No context available."


# ---------------------------------------------------------------------- UserMemory
def test_user_memory_preferences_persist_and_merge(store):
    um = UserMemory(store=store)
    assert um.get_user_preferences("alice")["response_style"] == "balanced"
    um.update_user_preferences("alice", {"verbosity": "high"})
    um.get_or_create_user_memory("alice")  # calute reset the preferences here
    um.update_user_preferences("alice", {"language": "de"})
    fresh = UserMemory(store=store)
    prefs = fresh.get_user_preferences("alice")
    assert prefs["verbosity"] == "high" and prefs["language"] == "de" and prefs["max_context_items"] == 10
    assert fresh.get_user_preferences("bob")["verbosity"] == "normal"
    with pytest.raises(ValidationError):
        um.update_user_preferences("alice", "nope")  # type: ignore[arg-type]


def test_user_memory_context_statistics_and_clear(store):
    um = UserMemory(store=store)
    meta = {"channel": "chat"}
    item = um.save_memory("alice", "Alice works at Acme Corp", meta)
    assert meta == {"channel": "chat"} and item.metadata["user_id"] == "alice"
    um.save_memory("alice", "Alice shipped the release", importance=0.9)
    text = um.get_user_context("alice")
    assert text.startswith("User preferences: {'response_style': 'balanced'")
    assert "Recent activity:\n  - Alice works at Acme Corp" in text
    assert "Important memories:\n  - Alice shipped the release" in text
    assert "Known entities: Alice" in text and "Acme Corp" in text
    stats = um.get_user_statistics("alice")
    assert (
        stats["total_memories"] == 2
        and stats["short_term_memories"] == 1
        and stats["long_term_memories"] == 1
    )
    assert (
        stats["entities_known"] >= 2
        and stats["relationships"] >= 1
        and stats["preferences"]["language"] == "en"
    )
    assert um.search_user_memory("alice", "release")[0].user_id == "alice"
    assert um.get_user_statistics("bob")["total_memories"] == 0
    um.clear_user_memory("alice")
    assert um.get_user_statistics("alice")["total_memories"] == 0


def test_long_term_similar_pairs_equal_the_pairwise_definition(store):
    """merge_similar finds candidate pairs by prefix filtering; the pairs must be exactly those of
    the pairwise definition (overlap / max size >= threshold), on near-duplicates and on noise."""
    import random

    from sqlalchemy import text

    from cortex_pg.compat.calute import sql as calute_sql

    rng = random.Random(7)
    vocab = ["the", "a", "cache", "redis", "deploy", "friday", "user", "report", "sales", "q3"] + [
        f"w{i}" for i in range(60)
    ]
    texts = []
    for _ in range(40):
        base = rng.sample(vocab, rng.randint(3, 9))
        texts.append(" ".join(base))
        for _ in range(rng.randint(0, 2)):  # near-duplicates: one word changed, added or dropped
            v = list(base)
            op = rng.choice(["swap", "add", "drop"])
            if op == "swap":
                v[rng.randrange(len(v))] = rng.choice(vocab)
            elif op == "add":
                v.append(rng.choice(vocab))
            elif len(v) > 1:
                v.pop(rng.randrange(len(v)))
            texts.append(" ".join(v))
    ltm = LongTermMemory(store=store, user_id="u", session_id="pairs", max_items=10_000)
    for t in dict.fromkeys(texts):
        ltm.save(t)
    for threshold in (0.5, 0.8, 1.0):
        with store.engine.connect() as conn:
            params = {**ltm.shelf.params, "threshold": threshold}
            got = {
                (str(a), str(b))
                for a, b in conn.execute(
                    text(calute_sql.SIMILAR_PAIRS.format(scope=calute_sql.SCOPE)), params
                ).all()
            }
            notes = conn.execute(
                text(
                    f"SELECT n.id, n.content FROM cortex.notes n WHERE {calute_sql.SCOPE} AND n.merged_into IS NULL"
                ),
                params,
            ).all()
        words = {str(i): set(c.lower().split()) for i, c in notes}
        length = {str(i): len(c) for i, c in notes}
        want = {
            (a, b)
            for a in words
            for b in words
            if a != b
            and words[a] & words[b]
            and (length[a] > length[b] or (length[a] == length[b] and a < b))
            and len(words[a] & words[b]) / max(len(words[a]), len(words[b])) >= threshold
        }
        assert got == want and (threshold == 1.0 or want), threshold


def test_a_text_merged_away_and_saved_again_is_a_new_item(store):
    """merge_similar keeps the longer text and deletes the other (as calute); saving that text
    again stores it (it used to find the keeper, which does not hold it, and store nothing)."""
    ltm = LongTermMemory(store=store, user_id="u", session_id="merge-resave")
    cats = ltm.save("I love cats very much", importance=0.9)
    ltm.save("I love dogs very much indeed", importance=0.4)
    assert ltm.merge_similar(similarity_threshold=0.6) == 1
    kept = ltm.retrieve(limit=10)
    assert [i.content for i in kept] == ["I love dogs very much indeed"]
    assert kept[0].metadata["importance"] == 0.9  # the larger, where the item shows it
    assert "(importance: 0.9," in ltm.consolidate(merge_similar=False)
    again = ltm.save("I love cats very much")
    assert again.content == "I love cats very much" and again.memory_id != cats.memory_id
    assert sorted(i.content for i in ltm.retrieve(limit=10)) == [
        "I love cats very much",
        "I love dogs very much indeed",
    ]
    assert ltm.search("cats")[0].content == "I love cats very much"


_KILLED_PROMOTION = """
import os, signal, sys
from cortex_pg.compat.calute import ContextualMemory, LongTermMemory
from cortex_pg.store import MemoryStore

url, item, when = sys.argv[1:4]
save = LongTermMemory.save

def dying_save(self, *args, **kwargs):
    if when == "after":
        save(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

LongTermMemory.save = dying_save
cm = ContextualMemory(store=MemoryStore.open(url, embedder="hashing"), user_id="u", session_id="kill",
                      promotion_threshold=2)
cm.retrieve(item)
cm.retrieve(item)  # reaches the threshold: the promotion, killed
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_promotion_killed_midway_is_finished_by_the_next_read(store, db_url, when):
    """A process killed (SIGKILL) as it copies a short-term item to long-term memory, or right
    after the copy: the next read past the threshold promotes it, once (the claim used to commit
    first, and a process killed before its copy left the item claimed and never copied)."""
    import subprocess
    import sys

    cm = ContextualMemory(store=store, user_id="u", session_id="kill", promotion_threshold=2)
    item = cm.save("the deployment key rotates every 30 days", importance=0.3)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_PROMOTION, db_url, item.memory_id, when], timeout=120
    )
    assert child.returncode == -9
    assert len(cm.long_term) == (1 if when == "after" else 0)
    got = cm.retrieve(item.memory_id)
    assert got.metadata["promoted"] is True
    copies = cm.long_term.retrieve(limit=10)
    assert [(i.memory_id, i.content) for i in copies] == [(item.memory_id, item.content)]
    cm.retrieve(item.memory_id)
    assert len(cm.long_term) == 1


def test_an_item_dated_in_the_future_scores_as_one_written_now(store):
    """The long-term recency is at most 1 (an item dated 2100 scored 22 and outranked the match);
    so is the score of a blank query's list."""
    ltm = LongTermMemory(store=store, user_id="u", session_id="future")
    ltm.save("the database migration runbook lives in the wiki")
    ltm.save("lunch order for friday", time="2100-01-01T00:00:00Z", importance=1.0)
    found = ltm.search("database migration runbook")
    assert found[0].content == "the database migration runbook lives in the wiki"
    assert all(0 <= i.relevance_score <= 1 for i in found)
    assert all(0 <= i.relevance_score <= 1 for i in ltm.search(""))
    future = next(i for i in ltm.search("") if i.content == "lunch order for friday")
    assert future.relevance_score == pytest.approx(0.5 + 0.3 + 0.2)


# ---------------------------------------------------------------------- context embeddings after deletes
# Each note has a context embedding (it read after its session predecessor); MemoryStore.delete
# writes its successor's anew. calute's deletes (merge_similar, cleanup, delete, clear, and
# EntityMemory's) deleted with SQL of their own and left the successor's context built from the
# deleted note, or a context row on a note that had become the first of its session.
def _at(hour: int) -> str:
    return f"2024-03-01T{hour:02d}:00:00Z"


def test_merge_similar_rewrites_the_contexts_its_deletes_change(store):
    ltm = LongTermMemory(store=store, user_id="ctx-merge", session_id="s")
    ltm.save("the quick brown fox jumps over the lazy dog today", time=_at(1))
    ltm.save("the quick brown fox jumps over the lazy dog", time=_at(2))  # merged away (shorter)
    ltm.save("a completely different sentence about violins", time=_at(3))  # its predecessor goes
    first = LongTermMemory(store=store, user_id="ctx-merge", session_id="t")
    first.save("green tea with lemon and honey", time=_at(1))  # merged away: the keeper is first
    first.save("green tea with lemon and honey please", time=_at(2))
    assert check_context_embeddings(store, "ctx-merge") == 3
    assert ltm.merge_similar(0.8) == 1 and first.merge_similar(0.8) == 1
    assert check_context_embeddings(store, "ctx-merge") == 1  # the violins note, after the fox


def test_long_term_cleanup_rewrites_the_contexts_its_deletes_change(store):
    now = datetime.now(UTC)
    ltm = LongTermMemory(store=store, user_id="ctx-cleanup", session_id="s", max_items=3, retention_days=30)
    ltm.save("an expired first memory about owls", time=now - timedelta(days=40), importance=0.9)
    ltm.save("a fresh memory about bees", time=now - timedelta(hours=4), importance=0.9)
    ltm.save("a weak memory about cats", time=now - timedelta(hours=3), importance=0.0)
    ltm.save("a memory about eels", time=now - timedelta(hours=2), importance=0.9)  # over capacity
    assert len(ltm.last_cleanup.expired) == 1 and ltm.last_cleanup.over_capacity == []
    assert check_context_embeddings(store, "ctx-cleanup") == 2  # bees is first now: no context
    ltm.save("a memory about frogs", time=now - timedelta(hours=1), importance=0.9)
    assert len(ltm.last_cleanup.over_capacity) == 1  # the weak cats, between bees and eels
    assert check_context_embeddings(store, "ctx-cleanup") == 2  # eels after bees, frogs after eels
    assert ltm.cleanup(room=2).removed == 2  # bees and eels, the oldest: frogs is left, first
    assert len(ltm) == 1 and check_context_embeddings(store, "ctx-cleanup") == 0


def test_shelf_deletes_and_clears_rewrite_the_contexts_they_change(store):
    u = "ctx-shelf"
    ltm = LongTermMemory(store=store, user_id=u, session_id="s")
    a = ltm.save("alpha planning notes", time=_at(1))
    ltm.save("bravo budget review", time=_at(2))
    ltm.save("charlie hiring plan", time=_at(3), agent_id="x")
    ltm.save("delta launch date", time=_at(4))
    store.add("a plain note of the same session", user_id=u, session_id="s", time=_at(5))
    ltm.save("echo retrospective", time=_at(6))
    assert check_context_embeddings(store, u) == 5
    assert ltm.delete(a.memory_id) == 1  # bravo is first now
    assert check_context_embeddings(store, u) == 4
    assert ltm.delete(filters={"agent_id": "x"}) == 1  # delta reads bravo now
    assert check_context_embeddings(store, u) == 3
    ctx = ContextualMemory(store=store, user_id=u, session_id="s")  # (its LTM shelf is this one)
    assert ctx.delete(filters={"content": "delta launch date"}) == 1  # the plain note reads bravo
    assert check_context_embeddings(store, u) == 2
    ltm.clear()  # the plain note is left, first of its session
    assert len(ltm) == 0 and check_context_embeddings(store, u) == 0
    assert [n.content for n in store.list_notes(user_id=u)] == ["a plain note of the same session"]


def test_entity_deletes_and_clear_rewrite_the_contexts_they_change(store):
    u = "ctx-entity"
    em = EntityMemory(store, user_id=u, session_id="s")
    store.add("plain opening note", user_id=u, session_id="s", time=_at(1))
    em.save("Alice met Bob in Paris", time=_at(2), agent_id="x")
    store.add("plain middle note", user_id=u, session_id="s", time=_at(3))
    em.save("Carol visited Berlin", time=_at(4))
    store.add("plain closing note", user_id=u, session_id="s", time=_at(5))
    assert check_context_embeddings(store, u) == 4
    assert em.delete(filters={"agent_id": "x"}) == 1  # the middle note reads the opening one
    assert check_context_embeddings(store, u) == 3
    em.clear()  # the closing note reads the middle one
    assert len(em) == 0 and check_context_embeddings(store, u) == 2
