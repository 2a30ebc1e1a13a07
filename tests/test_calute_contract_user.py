"""calute's documented UserMemory contract (methods and ``user_preferences``) on a store
shared with a second process."""

from __future__ import annotations

import json

import pytest

from cortex_pg import ValidationError
from cortex_pg.compat.calute import DEFAULT_PREFERENCES, ContextualMemory, MemoryItem, UserMemory
from cortex_pg.errors import ReadOnlyError
from tests.helpers.calute_contract import (
    check_filter_errors,
    check_get_context,
    check_statistics,
    check_unknown_ids,
    run_child,
)

CHILD = """
from cortex_pg.compat.calute import UserMemory
um = UserMemory(store=store)
um.save_memory("alice", "Alice prefers short answers", agent_id="assistant", conversation_id="c1")
um.update_user_preferences("alice", {"verbosity": "terse"})
um.get_or_create_user_memory("bob")
"""


def test_user_memory_contract_with_a_second_process(db_url, store):
    um = UserMemory(store=store)
    assert dict(um.user_preferences) == {} and len(um.user_preferences) == 0
    assert um.get_user_preferences("alice") == DEFAULT_PREFERENCES  # defaults for an unknown user
    assert um.search_user_memory("alice", "answers") == []

    run_child(db_url, CHILD)
    # user_preferences: user id -> preferences, what the other process stored
    assert list(um.user_preferences) == ["alice", "bob"]
    assert um.user_preferences["alice"] == {**DEFAULT_PREFERENCES, "verbosity": "terse"}
    assert um.user_preferences["bob"] == DEFAULT_PREFERENCES  # known through get_or_create_user_memory
    assert "carol" not in um.user_preferences and um.user_preferences.get("carol") is None
    assert json.loads(json.dumps(um.user_preferences["alice"]))["verbosity"] == "terse"
    for write in (
        lambda: um.user_preferences.__setitem__("alice", {}),
        lambda: um.user_preferences["alice"].__setitem__("language", "fr"),
        lambda: um.user_preferences["alice"].update(language="fr"),
        lambda: um.user_preferences.pop("bob"),
    ):
        with pytest.raises(ReadOnlyError) as err:
            write()
        assert "update_user_preferences" in str(err.value)
    um.update_user_preferences("alice", {"language": "fr"})  # the method that writes: seen at once
    assert um.user_preferences["alice"]["language"] == "fr"

    memory = um.get_or_create_user_memory("alice")
    assert isinstance(memory, ContextualMemory)
    check_get_context(memory, [("assistant", "Alice prefers short answers")])
    assert um.get_context(user_id="alice") == memory.get_context()
    check_statistics(um.get_statistics("alice"), total=1, types={"short_term": 1}, agents=1, users=1, convs=1)
    for call in (lambda: um.get_context(), lambda: um.get_statistics()):
        with pytest.raises(ValidationError) as err:  # one user at a time: tenants never mix
            call()
        assert err.value.field == "user_id"
    stats = um.get_user_statistics("alice")
    assert (
        stats["total_memories"] == 1
        and stats["entities_known"] >= 1
        and stats["preferences"]["language"] == "fr"
    )
    assert "Known entities: Alice" in um.get_user_context("alice")

    hits = um.search_user_memory("alice", "short answers", filters={"agent_id": "assistant"})
    assert [h.content for h in hits] == ["Alice prefers short answers"] and isinstance(hits[0], MemoryItem)
    check_filter_errors(lambda f: um.search_user_memory("alice", "answers", filters=f))
    check_unknown_ids(memory, um.save_memory("bob", "Bob likes tea").memory_id)

    um.clear_user_memory("alice")
    assert "alice" not in um.user_preferences and um.get_user_statistics("alice")["total_memories"] == 0
    assert um.user_preferences["bob"] == DEFAULT_PREFERENCES
