"""The same behaviour through MemoryStore and AsyncMemoryStore (parametrised over both APIs),
100 concurrent searches on one event loop, the embedder off the loop, and RLS per task."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cortex_pg import AsyncMemoryStore, ImmutableFieldError, NotFoundError, ValidationError
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore
from cortex_pg.store.links import get_links, set_links
from cortex_pg.store.traversal import linked_notes

MODULE_FUNCTIONS = {"get_links": get_links, "set_links": set_links, "linked_notes": linked_notes}


class Api:
    """One call surface over either store: ``api.add(...)`` runs ``store.add`` directly (sync)
    or awaits it on the test's event loop (async)."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.store = store
        self.loop = loop

    def __getattr__(self, name: str) -> Any:
        if self.loop is None:
            if name in MODULE_FUNCTIONS:  # the sync API's link functions take the store first
                return lambda *a, **kw: MODULE_FUNCTIONS[name](self.store, *a, **kw)
            return getattr(self.store, name)
        method = getattr(self.store, name)
        return lambda *a, **kw: self.loop.run_until_complete(method(*a, **kw))


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, db_url: str) -> Iterator[Api]:
    if request.param == "sync":
        store = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
        yield Api(store, None)
        store.close()
        return
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(AsyncMemoryStore.open(db_url, embedder="hashing", auto_migrate=False))
    yield Api(store, loop)
    loop.run_until_complete(store.close())
    loop.close()


def test_add_get_roundtrip(api: Api) -> None:
    when = datetime(2024, 3, 20, 14, 0, tzinfo=UTC)
    nid = api.add(
        "Alice moved to Berlin",
        user_id="u1",
        session_id="s1",
        time=when,
        tags=["move"],
        metadata={"source": "chat"},
    )
    note = api.get(nid)
    assert (note.content, note.user_id, note.session_id) == ("Alice moved to Berlin", "u1", "s1")
    assert note.tags == ["move"] and note.metadata == {"source": "chat"} and note.created_at == when
    assert api.add("Alice moved to Berlin", user_id="u1", session_id="s1") == nid  # same content: same id


def test_add_many_in_order_and_field_named(api: Api) -> None:
    ids = api.add_many([{"content": "one"}, {"content": "two"}, {"content": "one"}], user_id="u1")
    assert ids[0] == ids[2] != ids[1]
    assert [api.get(i).content for i in ids[:2]] == ["one", "two"]
    with pytest.raises(ValidationError) as err:
        api.add_many([{"content": "fine"}, {"content": "  "}], user_id="u1")
    assert err.value.field == "items[1].content"


def test_bad_input_is_a_typed_error_naming_the_field(api: Api) -> None:
    cases = [
        (lambda: api.add("", user_id="u1"), "content"),
        (lambda: api.add("x", importance=3), "importance"),
        (lambda: api.search("q", limit=0), "limit"),
        (lambda: api.search("q", temporal_weight=2), "temporal_weight"),
        (lambda: api.search("q", where_filter={"tags": {"$regex": "x"}}), "where_filter"),
        (lambda: api.search("q", date_from="2024-02-01", date_to="2024-01-01"), "date_to"),
        (lambda: api.get("not-a-uuid"), "id"),
    ]
    for call, field in cases:
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field
    with pytest.raises(NotFoundError):
        api.get(uuid.uuid4())


def test_update_and_delete(api: Api) -> None:
    nid = api.add("Bob likes tea", user_id="u1", session_id="s1", metadata={"a": 1, "b": 2})
    note = api.update(nid, user_id="u1", content="Bob likes coffee", metadata={"b": None, "c": 3})
    assert note.content == "Bob likes coffee" and note.metadata == {"a": 1, "c": 3}
    assert api.search("coffee", user_id="u1", limit=1)[0].id == nid  # re-embedded, re-indexed
    with pytest.raises(ImmutableFieldError) as err:
        api.update(nid, user_id="u1", session_id="other")
    assert err.value.field == "session_id"
    with pytest.raises(ValidationError) as err:
        api.update(nid, colour="red")
    assert err.value.field == "colour"
    assert api.delete(nid, user_id="u1") is True
    assert api.delete(nid, user_id="u1") is False
    with pytest.raises(NotFoundError):
        api.get(nid)


def test_search_filters(api: Api) -> None:
    now = datetime(2024, 6, 15, tzinfo=UTC)
    old = api.add(
        "project kickoff meeting notes",
        user_id="u1",
        session_id="a",
        time=now - timedelta(days=60),
        tags=["work"],
        to_stm=False,
    )
    new = api.add(
        "project retro meeting notes",
        user_id="u1",
        session_id="b",
        time=now - timedelta(days=1),
        tags=["work", "retro"],
    )
    api.add("project meeting of someone else", user_id="u2")
    ids = lambda hits: [h.id for h in hits]  # noqa: E731
    assert set(ids(api.search("project meeting", user_id="u1", now=now))) == {old, new}
    assert ids(api.search("project meeting", user_id="u1", session_id="a", now=now)) == [old]
    assert ids(api.search("project meeting", user_id="u1", memory_source="stm", now=now)) == [new]
    assert ids(api.search("project meeting", user_id="u1", date_from=now - timedelta(days=7), now=now)) == [
        new
    ]
    assert ids(api.search("project meeting", user_id="u1", date_to="2024-05-01", now=now)) == [old]
    assert ids(
        api.search("project meeting", user_id="u1", where_filter={"tags": {"$contains": "retro"}})
    ) == [new]
    recent = api.search("project kickoff meeting notes", user_id="u1", temporal_weight=1.0, now=now)
    assert recent[0].id == new and recent[0].recency_score > recent[1].recency_score
    ctx = api.search("project meeting", user_id="u1", context="retrospective", now=now)
    assert all(h.context_score is not None for h in ctx)
    # the ranking argument, both APIs: BM25 alone puts the note with more query terms first
    bm25 = api.search("project kickoff", user_id="u1", now=now, ranking={"vector_weight": 0, "expansion": 0})
    assert bm25[0].id == old and bm25[0].text_score > bm25[1].text_score
    with pytest.raises(ValidationError) as err:
        api.search("project", user_id="u1", ranking={"fusion": "max"})
    assert err.value.field == "ranking.fusion"


def test_links_and_linked_notes(api: Api) -> None:
    a = api.add("Alice leads the database team", user_id="u1")
    b = api.add("The database team ships pgvector upgrades", user_id="u1")
    c = api.add("pgvector 0.8 adds iterative scans", user_id="u1")
    assert api.set_links(a, {b: {"type": "supports", "strength": 0.9, "reason": "team"}}) == 2
    api.set_links(b, {c: {"type": "extends", "strength": 0.5}})
    assert api.get_links(a)[b]["type"] == "supports"
    assert api.get_links(b)[a]["type"] == "supported_by"
    reached = api.linked_notes(a, depth=2)
    assert [(r.note.id, r.hops) for r in reached][:2] == [(b, 1), (c, 2)]
    hits = api.search("Alice leads", user_id="u1", limit=1, include_links=True)
    assert hits[0].id == a and any(h.is_linked and h.id == b for h in hits[1:])
    with pytest.raises(ValidationError) as err:
        api.set_links(a, {a: {"type": "related"}})
    assert err.value.field.startswith("links[")


def test_100_concurrent_searches_on_one_loop(db_url: str) -> None:
    topics = [f"topic{i:03d} zebra{i} quokka{i}" for i in range(100)]

    async def main() -> list[tuple[str, list[str]]]:
        async with await AsyncMemoryStore.open(db_url, embedder="hashing", auto_migrate=False) as store:
            ids = await store.add_many([{"content": t} for t in topics], user_id="crowd", to_stm=False)
            results = await asyncio.gather(
                *(store.search(f"zebra{i} quokka{i}", user_id="crowd", limit=3) for i in range(100))
            )
            return list(zip(ids, [[h.id for h in r] for r in results], strict=True))

    pairs = asyncio.run(main())
    assert len(pairs) == 100
    assert all(found and found[0] == nid for nid, found in pairs)


class GateEmbedder(HashingEmbedder):
    """Embeds only after the event loop has run another task (``gate`` set by it): would hang
    (and time out) if the embedding ran on the loop's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.threads: set[str] = set()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.threads.add(threading.current_thread().name)
        assert self.gate.wait(10), "the event loop did not run while embedding"
        return super().embed(texts)


def test_embedding_runs_off_the_event_loop(db_url: str) -> None:
    embedder = GateEmbedder()

    async def main() -> str:
        store = await AsyncMemoryStore.open(db_url, embedder=embedder, auto_migrate=False)
        try:
            embedder.gate.clear()
            adding = asyncio.ensure_future(store.add("the loop keeps running", user_id="u1"))
            await asyncio.sleep(0.05)  # another task runs while the note is embedded
            embedder.gate.set()
            return await adding
        finally:
            await store.close()

    nid = asyncio.run(main())
    assert uuid.UUID(nid)
    assert threading.main_thread().name not in embedder.threads


def test_rls_each_task_acts_for_its_user(db_url: str) -> None:
    async def main() -> None:
        store = await AsyncMemoryStore.open(db_url, embedder="hashing", auto_migrate=False, isolation="rls")
        try:
            a, b = await asyncio.gather(
                store.add("alpha secret plans", user_id="alice"),
                store.add("beta secret plans", user_id="bob"),
            )
            found = await asyncio.gather(
                *(store.search("secret plans", user_id=u, limit=5) for u in ["alice", "bob"] * 10)
            )
            assert all([h.id for h in hits] == [a if i % 2 == 0 else b] for i, hits in enumerate(found))
            with pytest.raises(NotFoundError):
                await store.get(b, user_id="alice")
            assert (await store.get(b, user_id="bob")).content == "beta secret plans"
        finally:
            await store.close()

    asyncio.run(main())
