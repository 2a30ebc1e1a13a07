"""Facts are per user: a single-valued fact said in one session closes it in another.

The rule under test (documented in cortex_pg.entities.repository): relationships are not
scoped like the notes that state them. A session-scoped read shows the facts its own notes
said, valid at the instant asked, so a fact closed by another session's note is history
there too; deleting that note gives the time back.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.entities.repository import EntityStore
from cortex_pg.store import MemoryStore

T1, T2 = "2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z"
MID = "2024-03-01T00:00:00Z"


@pytest.fixture
def facts(db_url):
    store = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False, extract_entities=True)
    yield store, EntityStore(store.engine)
    store.close()


def _facts(rows):
    return {(r.source, r.relation, r.target) for r in rows}


def test_one_scope_a_newer_fact_closes_the_older(facts):
    store, graph = facts
    store.add("Bob lives in Paris.", user_id="u", session_id="C", time=T1)
    store.add("Bob lives in Rome.", user_id="u", session_id="C", time=T2)
    assert _facts(graph.relationships("u", "Bob", session_id="C")) == {("Bob", "lives_in", "Rome")}
    closed = [r for r in graph.relationships("u", "Bob", history=True) if r.target == "Paris"]
    assert closed[0].valid_to == datetime(2024, 6, 1, tzinfo=UTC)
    assert _facts(graph.relationships("u", "Bob", session_id="C", as_of=MID)) == {
        ("Bob", "lives_in", "Paris")
    }


def test_two_scopes_of_one_user_share_their_facts(facts):
    store, graph = facts
    store.add("Alice works at Acme Corp.", user_id="u", session_id="A", time=T1)
    later = store.add("Alice works at Globex Inc.", user_id="u", session_id="B", time=T2)
    store.add("Alice works at Acme Corp.", user_id="other", session_id="A", time=T1)
    # the user's facts: one employer now, the session-B statement closed session A's
    assert _facts(graph.relationships("u", "Alice")) == {("Alice", "works_at", "Globex Inc")}
    # session A reads what its own notes said, valid now: nothing (closed by B) ...
    assert graph.relationships("u", "Alice", session_id="A") == []
    assert graph.related_entities("u", "Alice", 1, session_id="A") == []
    # ... but its history and an earlier instant show it
    [acme] = graph.relationships("u", "Alice", session_id="A", history=True)
    assert (acme.target, acme.valid_to) == ("Acme Corp", datetime(2024, 6, 1, tzinfo=UTC))
    assert _facts(graph.relationships("u", "Alice", session_id="A", as_of=MID)) == {
        ("Alice", "works_at", "Acme Corp")
    }
    assert [e.name for e in graph.related_entities("u", "Alice", 1, session_id="B")] == ["Globex Inc"]
    # another user is another world
    assert _facts(graph.relationships("other", "Alice")) == {("Alice", "works_at", "Acme Corp")}
    # deleting session B's note gives session A its fact back
    assert store.delete(later, user_id="u")
    assert _facts(graph.relationships("u", "Alice", session_id="A")) == {("Alice", "works_at", "Acme Corp")}


def test_bfs_depth_semantics_unchanged_with_coordinated_facts(facts):
    store, graph = facts
    store.add("Alice works at Acme Corp and knows Carol.", user_id="u", session_id="A", time=T1)
    store.add('Carol created "Project X".', user_id="u", session_id="A", time=T1)
    one = {(e.name, e.depth) for e in graph.related_entities("u", "Alice", 1)}
    assert one == {("Acme Corp", 1), ("Carol", 1)}  # depth 1: direct neighbours, Alice excluded
    two = {(e.name, e.depth) for e in graph.related_entities("u", "Alice", 2)}
    assert two == {("Acme Corp", 1), ("Carol", 1), ("Project X", 2)}
    assert graph.related_entities("u", "Alice", 0) == []
