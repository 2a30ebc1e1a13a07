"""calute's documented EntityMemory contract (methods and the ``entities``, ``relationships``,
``entity_mentions`` attributes) on a store filled by a second process."""

from __future__ import annotations

import copy
import json

import pytest

from cortex_pg.compat.calute import MemoryItem
from cortex_pg.entities import EntityMemory
from cortex_pg.errors import ReadOnlyError
from tests.helpers.calute_contract import (
    check_filter_errors,
    check_get_context,
    check_statistics,
    check_unknown_ids,
    run_child,
)

CHILD = """
from cortex_pg.entities import EntityMemory
em = EntityMemory(store, user_id="u")
em.save("Alice works at Acme Corp", metadata={"year": 2023}, agent_id="scribe", conversation_id="c1")
em.save("Alice knows Bob", metadata={"year": 2021})
em.save("Bob created Zeta")
"""


def test_entity_memory_contract_with_a_second_process(db_url, store):
    em = EntityMemory(store, user_id="u")
    # empty: calute's return types, and the three attributes are empty mappings
    assert len(em) == 0 and em.retrieve() == [] and em.search("Alice") == []
    assert em.get_context() == "" and em.get_entity_info("Alice") == {"mentions": [], "relationships": []}
    check_statistics(em.get_statistics(), total=0, types={}, agents=0, users=0, convs=0)
    assert em.get_statistics()["max_items"] == 5000
    assert dict(em.entities) == {} and dict(em.relationships) == {} and dict(em.entity_mentions) == {}
    assert len(em.entities) == 0 and "Alice" not in em.entities

    run_child(db_url, CHILD)
    items = em.retrieve(limit=10)
    by_text = {i.content: i for i in items}
    assert len(items) == 3
    check_get_context(
        em, [("scribe", "Alice works at Acme Corp"), (None, "Alice knows Bob"), (None, "Bob created Zeta")]
    )
    check_statistics(em.get_statistics(), total=3, types={"entity": 3}, agents=1, users=1, convs=1)

    # entities: calute's keys per entity, read from SQL, filled by the other process
    assert list(em.entities) == ["Acme Corp", "Alice", "Bob", "Zeta"]  # first seen, then name
    alice = em.entities["Alice"]
    assert {"first_seen", "last_seen", "frequency", "contexts"} <= set(alice)
    assert alice["frequency"] == 2 and alice["first_seen"] <= alice["last_seen"]
    assert em.entities["alice"]["name"] == "Alice"  # looked up by normalised name
    assert em.entities.get("Nobody") is None and "Nobody" not in em.entities and 5 not in em.entities
    with pytest.raises(KeyError):
        em.entities["Nobody"]
    assert json.loads(json.dumps(em.entities["Bob"], default=str))["frequency"] == 2
    # entity_mentions: name -> ids of the items, oldest first
    assert em.entity_mentions["Alice"] == [
        by_text["Alice works at Acme Corp"].memory_id,
        by_text["Alice knows Bob"].memory_id,
    ]
    assert set(em.entity_mentions) == set(em.entities)
    # relationships: relation -> (source, target) pairs of the facts valid now
    rels = dict(em.relationships)
    assert rels["works_at"] == [("Alice", "Acme Corp")] and rels["knows"] == [("Alice", "Bob")]
    assert rels["created"] == [("Bob", "Zeta")] and "created" in em.relationships
    assert len(em.relationships) == 3

    # read-only: every write raises, naming the methods to use, and changes nothing
    writes = [
        lambda: em.entities.__setitem__("X", {}),
        lambda: em.entities.pop("Alice"),
        lambda: em.entities.clear(),
        lambda: em.relationships.update({"x": []}),
        lambda: em.relationships["knows"].append(("A", "B")),
        lambda: em.entity_mentions.__delitem__("Alice"),
        lambda: em.entity_mentions["Alice"].append("x"),
        lambda: em.entities["Alice"].__setitem__("frequency", 99),
        lambda: em.entities["Alice"].update(frequency=99),
    ]
    for write in writes:
        with pytest.raises(ReadOnlyError) as err:
            write()
        assert "EntityMemory.save" in str(err.value) and isinstance(err.value, TypeError)
    assert em.entities["Alice"]["frequency"] == 2 and len(em.entities) == 4
    snapshot = copy.deepcopy(em.entities["Alice"])
    snapshot["frequency"] = 7  # a copy is a plain dict, detached from the database
    assert type(snapshot) is dict and em.entities["Alice"]["frequency"] == 2

    # filters: item fields and metadata in the one filter language
    assert [i.content for i in em.retrieve(filters={"memory_type": "entity", "agent_id": "scribe"})] == [
        "Alice works at Acme Corp"
    ]
    assert len(em.retrieve(filters={"memory_type": "entity"})) == 3
    assert [i.content for i in em.retrieve(filters={"year": {"$gte": 2022}})] == ["Alice works at Acme Corp"]
    assert [i.content for i in em.search("Alice", filters={"year": {"$lt": 2022}})] == ["Alice knows Bob"]
    check_filter_errors(lambda f: em.retrieve(filters=f))
    check_filter_errors(lambda f: em.search("Alice", filters=f))
    check_filter_errors(lambda f: em.delete(filters=f))
    assert len(em) == 3

    # unknown ids, also another user's item and an item of another memory type
    foreign = EntityMemory(store, user_id="v").save("Carol met Dave")
    note_id = store.add("a plain note", user_id="u")
    check_unknown_ids(em, foreign.memory_id, str(note_id))

    # writes through the methods show in the attributes
    assert em.update(by_text["Bob created Zeta"].memory_id, {"content": "Bob created Omega"}) is True
    assert "Omega" in em.entities and "Zeta" not in em.entities
    assert em.relationships["created"] == [("Bob", "Omega")]
    assert em.delete(filters={"year": 2021}) == 1
    assert "knows" not in em.relationships and em.entities["Alice"]["frequency"] == 1
    item = em.save("Erin joined Acme Corp")
    assert isinstance(item, MemoryItem) and item.memory_id in em.entity_mentions["Erin"]
    assert em.clear() is None and len(em) == 0 and dict(em.entities) == {}
    assert EntityMemory(store, user_id="v").entities["Carol"]["frequency"] == 1  # tenants never mix
