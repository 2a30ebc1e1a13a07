"""EntityMemory and EntityStore on a real database: counters, contradictions, traversal, deletes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.entities import EntityMemory
from cortex_pg.store import MemoryStore

CALUTE_KEYS = {"first_seen", "last_seen", "frequency", "contexts", "mentions", "relationships"}


@pytest.fixture
def em(store):
    return EntityMemory(store, user_id="u")


def test_save_extracts_and_get_entity_info_keys(em):
    item = em.save("Alice works at Acme Corp", metadata={"source": "chat"})
    assert item.memory_type == "entity"
    assert item.metadata == {"source": "chat", "entities": ["Alice", "Acme Corp"]}
    info = em.get_entity_info("alice")  # lookup by normalised name
    assert set(info) >= CALUTE_KEYS
    assert info["name"] == "Alice" and info["kind"] == "person"
    assert info["frequency"] == 1 and info["mentions"] == [item.memory_id]
    assert info["contexts"] == ["Alice works at Acme Corp"]
    assert info["relationships"] == [{"relation": "works_at", "target": "Acme Corp"}]
    assert em.get_entity_info("ACME   corp")["relationships"] == [
        {"relation": "inverse_works_at", "target": "Alice"}
    ]
    assert em.get_entity_info("Nobody") == {"mentions": [], "relationships": []}
    # saving the same text again is the same note and counts nothing twice
    assert em.save("Alice works at Acme Corp").memory_id == item.memory_id
    assert em.get_entity_info("Alice")["frequency"] == 1


def test_contexts_keep_the_last_ten_short_snippets(em):
    for i in range(12):
        em.save(f"Alice note {i} " + "x" * 150)
    info = em.get_entity_info("Alice")
    assert info["frequency"] == 12 and len(info["contexts"]) == 10
    assert all(len(c) <= 100 for c in info["contexts"])
    assert info["contexts"][0].startswith("Alice note 2 ") and info["contexts"][-1].startswith(
        "Alice note 11 "
    )


def test_contradiction_closes_valid_to_and_as_of(em):
    em.save("Alice works at Acme Corp", time="2024-01-01T00:00:00Z")
    em.save("Alice works at Beta Inc", time="2024-06-01T00:00:00Z")
    rows = em.graph.relationships("u", "Alice", history=True)
    by_target = {r.target: r for r in rows}
    assert by_target["Acme Corp"].valid_to == datetime(2024, 6, 1, tzinfo=UTC)  # kept, closed
    assert by_target["Beta Inc"].valid_to is None
    assert em.get_entity_info("Alice")["relationships"] == [{"relation": "works_at", "target": "Beta Inc"}]
    assert em.get_entity_info("Alice", as_of="2024-03-01")["relationships"] == [
        {"relation": "works_at", "target": "Acme Corp"}
    ]
    assert em.graph.relationships("u", "Alice", as_of="2023-01-01") == []
    # an older fact arriving late is history: it does not close the newer one
    em.save("Alice works at Gamma Labs", time="2023-01-01T00:00:00Z")
    assert em.get_entity_info("Alice")["relationships"] == [{"relation": "works_at", "target": "Beta Inc"}]
    gamma = [r for r in em.graph.relationships("u", "Alice", history=True) if r.target == "Gamma Labs"][0]
    assert gamma.valid_to == datetime(2024, 6, 1, tzinfo=UTC)
    # multi-valued relations are not closed
    em.save("Alice knows Bob", time="2024-01-01T00:00:00Z")
    em.save("Alice knows Carol", time="2024-02-01T00:00:00Z")
    assert {r.target for r in em.graph.relationships("u", "Alice") if r.relation == "knows"} == {
        "Bob",
        "Carol",
    }


@pytest.mark.parametrize(
    ("depth", "expected"),
    [(0, set()), (1, {"Bert"}), (2, {"Bert", "Cleo"}), (3, {"Bert", "Cleo", "Dora"})],
)
def test_related_entities_on_a_chain(em, depth, expected):
    em.save("Anna knows Bert.")
    em.save("Bert knows Cleo.")
    em.save("Dora knows Cleo.")  # followed backwards too
    assert em.get_related_entities("Anna", max_depth=depth) == expected


@pytest.mark.parametrize(
    ("depth", "expected"),
    [(0, set()), (1, {"Bert", "Cleo"}), (2, {"Bert", "Cleo", "Dora"}), (3, {"Bert", "Cleo", "Dora"})],
)
def test_related_entities_on_a_cycle(em, depth, expected):
    em.save("Anna knows Bert.")
    em.save("Bert knows Cleo.")
    em.save("Cleo knows Anna.")
    em.save("Cleo knows Dora.")
    em.save("Dora knows Cleo.")  # a 2-cycle as well
    assert em.get_related_entities("anna", max_depth=depth) == expected


def test_related_entities_follow_valid_time_and_validate(em):
    em.save("Alice works at Acme Corp", time="2024-01-01T00:00:00Z")
    em.save("Alice works at Beta Inc", time="2024-06-01T00:00:00Z")
    assert em.get_related_entities("Alice", 1) == {"Beta Inc"}
    assert {r.name for r in em.graph.related_entities("u", "Alice", 1, as_of="2024-02-01")} == {"Acme Corp"}
    assert em.get_related_entities("Nobody", 3) == set()
    with pytest.raises(ValidationError):
        em.get_related_entities("Alice", 11)
    with pytest.raises(ValidationError):
        em.get_related_entities("Alice", -1)


def test_related_entities_of_a_dense_group_by_hops_not_paths(em):
    """12 people who all know each other, and one more behind them: v1 followed every simple
    path (40 s for 11 at depth 8); depth is the shortest walk."""
    people = [f"Person{chr(65 + i)}" for i in range(12)]
    for i, a in enumerate(people):
        em.save(" ".join(f"{a} knows {b}." for b in people[i + 1 :]) or f"{a} knows Zed.")
    related = em.graph.related_entities("u", people[0], 10)
    assert {r.name: r.depth for r in related} == {**dict.fromkeys(people[1:], 1), "Zed": 2}


def test_related_entities_is_one_sql_function(store, em):
    em.save("Anna knows Bert. Bert knows Cleo.")
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT name, depth FROM cortex.related_entities('u', ' ANNA ', 2)")).all()
    assert [tuple(r) for r in rows] == [("Bert", 1), ("Cleo", 2)]


def test_counters_under_eight_concurrent_writers(db_url, store):
    writers, per_writer = 8, 5
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            own = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
            try:
                mem = EntityMemory(own, user_id="c", session_id=f"s{w}")
                barrier.wait()
                for i in range(per_writer):
                    mem.save(f"Alice works at Acme Corp, report {w}-{i}. Alice knows Bob.")
            finally:
                own.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = writers * per_writer
    mem = EntityMemory(store, user_id="c")
    for name in ("Alice", "Acme Corp", "Bob"):
        info = mem.get_entity_info(name)
        assert info["frequency"] == total and len(info["mentions"]) == total
    rels = mem.graph.relationships("c", "Alice", history=True)
    assert sorted((r.relation, r.target, r.weight) for r in rels) == [
        ("knows", "Bob", float(total)),
        ("works_at", "Acme Corp", float(total)),
    ]


def test_delete_adjusts_counts_mentions_and_relationships(store, em):
    a = em.save("Alice works at Acme Corp", metadata={"topic": "work"}, time="2024-01-01T00:00:00Z")
    b = em.save("Alice knows Bob", metadata={"topic": "people"}, time="2024-02-01T00:00:00Z")
    c = em.save("Alice met Bob again", metadata={"topic": "people"}, time="2024-03-01T00:00:00Z")
    assert em.get_entity_info("Alice")["frequency"] == 3
    assert em.delete(a.memory_id) == 1
    info = em.get_entity_info("Alice")
    assert info["frequency"] == 2 and info["mentions"] == [b.memory_id, c.memory_id]
    assert info["first_seen"] == datetime(2024, 2, 1, tzinfo=UTC)
    assert all("Acme" not in ctx for ctx in info["contexts"])
    assert info["relationships"] == [{"relation": "knows", "target": "Bob"}]
    assert em.get_entity_info("Acme Corp") == {"mentions": [], "relationships": []}  # no mention left
    assert em.delete(a.memory_id) == 0
    assert em.delete(filters={"topic": "none"}) == 0
    assert em.delete() == 0  # no id, no filters: nothing
    # the plain store delete (or SQL) adjusts too: trigger on cortex.notes
    assert store.delete(c.memory_id, user_id="u") is True
    assert em.get_entity_info("Bob")["frequency"] == 1
    assert em.delete(filters={"topic": "people"}) == 1
    assert em.get_entity_info("Alice") == {"mentions": [], "relationships": []}
    with store.engine.connect() as conn:
        left = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM cortex.entities)"
                " + (SELECT count(*) FROM cortex.entity_mentions)"
                " + (SELECT count(*) FROM cortex.relationships)"
            )
        ).scalar_one()
    assert left == 0


def test_search_scores_in_sql_and_never_returns_everything(em):
    both = em.save("Alice and Bob went to Paris.")
    alice = em.save("Alice stayed home.")
    em.save("The weather was grey.")
    hits = em.search("What did Alice and Bob do?")
    assert [(h.memory_id, h.relevance_score) for h in hits] == [(both.memory_id, 1.0), (alice.memory_id, 0.5)]
    assert [h.memory_id for h in em.search("anything", entity_filter=["bob"])] == [both.memory_id]
    text_hits = em.search("grey weather")  # no entity in the query: full text
    assert len(text_hits) == 1 and "grey" in text_hits[0].content
    assert em.search("unrelated words entirely") == []
    assert em.search("   ") == []
    # one filter language: "has Bob" is $contains; a bare list is equality with that list
    assert [h.memory_id for h in em.search("Alice", filters={"entities": {"$contains": "Bob"}})] == [
        both.memory_id
    ]
    assert em.search("Alice", filters={"entities": ["Bob"]}) == []


def test_update_reextracts_and_merges_metadata(em):
    item = em.save("Alice works at Acme Corp", metadata={"keep": 1})
    assert em.update(item.memory_id, {"content": "Alice works at Beta Inc", "metadata": {"new": 2}}) is True
    got = em.retrieve(item.memory_id)
    assert got.content == "Alice works at Beta Inc"
    assert got.metadata == {"keep": 1, "new": 2, "entities": ["Alice", "Beta Inc"]}
    assert em.get_entity_info("Alice")["frequency"] == 1
    assert em.get_entity_info("Alice")["relationships"] == [{"relation": "works_at", "target": "Beta Inc"}]
    assert em.get_entity_info("Acme Corp") == {"mentions": [], "relationships": []}
    assert em.update("00000000-0000-0000-0000-000000000000", {"content": "x"}) is False
    assert [i.memory_id for i in em.retrieve(filters={"keep": 1})] == [item.memory_id]


def test_an_update_whose_indexing_fails_changes_nothing(em, monkeypatch):
    """The new text and its entities are one transaction: indexing that fails (or a process
    killed there) leaves the old text with its own entities (the text used to commit first,
    and the graph kept describing the old one)."""
    from cortex_pg.entities.repository import EntityStore

    item = em.save("Alice Walker moved to Berlin in 2019.")

    def broken(*args, **kwargs):
        raise RuntimeError("indexing died")

    monkeypatch.setattr(EntityStore, "index_note", broken)
    with pytest.raises(RuntimeError):
        em.update(item.memory_id, {"content": "Bob Stone moved to Lisbon in 2021."})
    monkeypatch.undo()
    assert em.retrieve(item.memory_id).content == "Alice Walker moved to Berlin in 2019."
    assert em.get_entity_info("Alice Walker")["frequency"] == 1
    assert em.get_entity_info("Bob Stone") == {"mentions": [], "relationships": []}
    assert em.update(item.memory_id, {"content": "Bob Stone moved to Lisbon in 2021."})
    assert em.get_entity_info("Alice Walker") == {"mentions": [], "relationships": []}
    assert em.get_entity_info("Bob Stone")["frequency"] == 1


def test_clear_and_tenant_isolation(store, em):
    em.save("Alice works at Acme Corp")
    other = EntityMemory(store, user_id="v")
    other.save("Alice knows Bob")
    assert em.get_related_entities("Alice", 1) == {"Acme Corp"}
    assert other.get_related_entities("Alice", 1) == {"Bob"}
    em.clear()
    assert len(em) == 0 and em.get_entity_info("Alice") == {"mentions": [], "relationships": []}
    assert other.get_entity_info("Alice")["frequency"] == 1


def test_entity_graph_is_a_multidigraph(em):
    em.save("Alice works at Acme Corp. Alice knows Bob.")
    g = em.entity_graph()
    assert g.is_multigraph() and g.is_directed()
    assert set(g.nodes) == {"Alice", "Acme Corp", "Bob"}
    assert g.nodes["Acme Corp"]["kind"] == "organization"
    assert set(g.edges(keys=True)) == {("Alice", "Acme Corp", "works_at"), ("Alice", "Bob", "knows")}


def test_persistence_across_processes(db_url, store):
    script = textwrap.dedent(
        f"""
        from cortex_pg.embeddings import HashingEmbedder
        from cortex_pg.entities import EntityMemory
        from cortex_pg.store import MemoryStore
        store = MemoryStore.open({db_url!r}, embedder=HashingEmbedder(), auto_migrate=False)
        EntityMemory(store, user_id="p").save("Alice works at Acme Corp")
        store.close()
        """
    )
    root = str(Path(__file__).resolve().parents[1])
    subprocess.run(
        [sys.executable, "-c", script], check=True, env={**os.environ, "PYTHONPATH": root}, timeout=120
    )
    mem = EntityMemory(store, user_id="p")
    assert mem.get_entity_info("Alice")["relationships"] == [{"relation": "works_at", "target": "Acme Corp"}]
    assert mem.get_related_entities("Alice", 1) == {"Acme Corp"}


def test_a_session_memory_sees_counts_and_deletes_only_its_session(store):
    a = EntityMemory(store, user_id="cal2", session_id="A/entities")
    b = EntityMemory(store, user_id="cal2", session_id="B/entities")
    whole = EntityMemory(store, user_id="cal2")  # no session: every session of the user
    a1 = a.save("Alice works at Acme Corp", metadata={"topic": "work"})
    b1 = b.save("Meet Bob. Bob works at Globex Inc", metadata={"topic": "work"})
    b.save("Alice knows Bob", metadata={"topic": "people"})
    assert len(a) == 1 and len(b) == 2 and len(whole) == 3
    assert [i.memory_id for i in a.retrieve(filters={"topic": "work"})] == [a1.memory_id]
    assert a.retrieve(b1.memory_id) is None and b.retrieve(b1.memory_id).memory_id == b1.memory_id
    assert [h.memory_id for h in a.search("Bob")] == [] and len(b.search("Bob")) == 2
    assert [h.memory_id for h in a.search("Globex meeting")] == []  # full-text path too
    assert a.get_entity_info("Bob") == {"mentions": [], "relationships": []}
    alice_a = a.get_entity_info("Alice")
    assert alice_a["frequency"] == 1 and alice_a["mentions"] == [a1.memory_id]
    assert alice_a["relationships"] == [{"relation": "works_at", "target": "Acme Corp"}]
    assert whole.get_entity_info("Alice")["frequency"] == 2
    assert a.get_related_entities("Alice", 2) == {"Acme Corp"}
    assert b.get_related_entities("Alice", 2) == {"Bob", "Globex Inc"}
    assert set(a.entity_graph().nodes) == {"Alice", "Acme Corp"}
    # updates and deletes by id or by filters never reach another session
    assert a.update(b1.memory_id, {"metadata": {"x": 1}}) is False
    assert a.delete(b1.memory_id) == 0
    assert a.delete(filters={"topic": "work"}) == 1
    assert len(b) == 2
    a.save("Carol works at Acme Corp")
    a.clear()
    assert len(a) == 0 and len(b) == 2
    assert b.get_entity_info("Bob")["frequency"] == 2
    assert whole.get_entity_info("Alice")["frequency"] == 1  # B's mention of Alice is kept


def test_explicit_entities_one_string_is_one_entity(em):
    item = em.save("Xavier called about the offer", entities="Xavier")
    assert item.metadata["entities"] == ["Xavier"]
    assert em.get_entity_info("X") == {"mentions": [], "relationships": []}
    assert em.get_entity_info("Xavier")["frequency"] == 1
    assert em.save("Yann and Zoe met", entities=("Yann", "Zoe")).metadata["entities"] == ["Yann", "Zoe"]
    assert [h.memory_id for h in em.search("who?", entity_filter="Xavier")] == [item.memory_id]
    for bad in (42, {"Xavier": 1}, b"Xavier", ["Xavier", 3], ["  "]):
        with pytest.raises(ValidationError) as info:
            em.save("Xavier again", entities=bad)
        assert info.value.field == "entities"
    with pytest.raises(ValidationError):
        em.update(item.memory_id, {"entities": 7})
    assert em.update(item.memory_id, {"entities": "Xavier Dupont"}) is True
    assert em.retrieve(item.memory_id).metadata["entities"] == ["Xavier Dupont"]


def _employers(em, **kw):
    return [
        r["target"] for r in em.get_entity_info("Alice", **kw)["relationships"] if r["relation"] == "works_at"
    ]


def test_deleting_the_closing_fact_reopens_the_fact_it_closed(store, em):
    em.save("Alice works at Acme Corp", time="2024-01-01T00:00:00Z")
    beta = em.save("Alice works at Beta Labs", time="2024-06-01T00:00:00Z")
    assert _employers(em) == ["Beta Labs"]
    assert em.delete(beta.memory_id) == 1
    assert _employers(em) == ["Acme Corp"]
    acme = [r for r in em.graph.relationships("u", "Alice", history=True) if r.target == "Acme Corp"]
    assert len(acme) == 1 and acme[0].valid_to is None
    # the same through SQL: the trigger path
    beta = em.save("Alice works at Beta Labs", time="2024-06-01T00:00:00Z")
    assert _employers(em) == ["Beta Labs"]
    with store.engine.begin() as conn:
        conn.execute(
            text("DELETE FROM cortex.notes WHERE user_id = 'u' AND id = :id"), {"id": beta.memory_id}
        )
    assert _employers(em) == ["Acme Corp"]


def test_a_content_change_reopens_and_a_chain_gives_time_back(em):
    em.save("Alice works at Acme Corp", time="2024-01-01T00:00:00Z", metadata={"n": 1})
    beta = em.save("Alice works at Beta Labs", time="2024-06-01T00:00:00Z", metadata={"n": 2})
    assert em.update(beta.memory_id, {"content": "Alice visited Beta Labs"}) is True
    assert _employers(em) == ["Acme Corp"]
    assert em.update(beta.memory_id, {"content": "Alice works at Beta Labs"}) is True
    assert _employers(em) == ["Beta Labs"]  # said again: closes Acme again
    carol = em.save("Alice works at Gamma Inc", time="2024-09-01T00:00:00Z", metadata={"n": 3})
    # removing the middle fact: Acme gets Beta's time, up to Gamma
    assert em.delete(beta.memory_id) == 1
    assert _employers(em) == ["Gamma Inc"]
    assert _employers(em, as_of="2024-07-01") == ["Acme Corp"]
    # removing the last one: Acme is open again
    assert em.delete(carol.memory_id) == 1
    assert _employers(em) == ["Acme Corp"]


def test_removing_a_chain_at_once_reopens_the_first_fact_left(em):
    em.save("Alice works at Acme Corp", time="2024-01-01T00:00:00Z", metadata={"n": 1})
    em.save("Alice works at Beta Labs", time="2024-06-01T00:00:00Z", metadata={"n": 2, "later": True})
    em.save("Alice works at Gamma Inc", time="2024-09-01T00:00:00Z", metadata={"n": 3, "later": True})
    assert em.delete(filters={"later": True}) == 2
    assert _employers(em) == ["Acme Corp"]
    # a fact still supported by another note is not removed and reopens nothing
    em.save("Alice works at Beta Labs", time="2024-06-01T00:00:00Z", metadata={"n": 4})
    other = em.save("Alice works at Beta Labs, said twice", time="2024-07-01T00:00:00Z", metadata={"n": 5})
    em.delete(other.memory_id)
    assert _employers(em) == ["Beta Labs"]


def test_saving_a_text_the_session_holds_as_a_plain_note_is_a_conflict(store, em):
    from cortex_pg import ConflictError

    store.add("Alice works at Acme Corp", user_id=em.user_id, session_id=em.session_id)
    with pytest.raises(ConflictError) as err:
        em.save("Alice works at Acme Corp")
    assert err.value.field == "content"
    info = em.get_entity_info("Alice")
    assert info["mentions"] == [] and info["relationships"] == []  # nothing recorded
