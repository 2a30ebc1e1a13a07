"""The HTTP service's JSON API, in process (FastAPI's TestClient) on a real database under RLS:
notes round trip and paging, search with the store's fields and score parts, links, history,
entities, the error body naming the field, and the one error boundary's status codes."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.db.engine import create_engine_for
from cortex_pg.server import create_app
from cortex_pg.server.keys import create_key, revoke_key
from cortex_pg.store import MemoryStore
from tests.helpers.service import app, bearer, client, key_for, owner_engine, rls_store  # noqa: F401


@pytest.fixture
def alice(key_for):  # noqa: F811
    return bearer(key_for("alice"))


def _post(http, headers, content, **fields):  # noqa: ANN001, ANN202
    r = http.post("/notes", json={"content": content, **fields}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def test_a_note_round_trip_with_history(client, alice):  # noqa: F811
    note = _post(
        client, alice, "Caroline went to the support group.", session_id="s1", time="2023-05-07T14:00:00Z",
        tags=["community"], metadata={"source": "chat", "n": 1}, importance=0.7, context="life",
    )  # fmt: skip
    assert note["user_id"] == "alice" and note["session_id"] == "s1"
    assert note["created_at"] == "2023-05-07T14:00:00Z" and note["importance"] == pytest.approx(0.7)
    nid = note["id"]
    assert client.get(f"/notes/{nid}", headers=alice).json()["content"] == note["content"]
    patched = client.patch(
        f"/notes/{nid}",
        json={"metadata": {"n": None, "ok": True}, "tags": ["x"], "context": None},
        headers=alice,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["metadata"] == {"source": "chat", "ok": True}
    assert patched.json()["tags"] == ["x"] and patched.json()["context"] is None
    history = client.get(f"/notes/{nid}/history", headers=alice).json()
    assert [h["op"] for h in history] == ["insert", "update"]
    assert history[1]["old"]["tags"] == ["community"] and history[1]["new"]["tags"] == ["x"]
    # the same content in the same session is stored once: the existing note comes back
    again = client.post("/notes", json={"content": note["content"], "session_id": "s1"}, headers=alice)
    assert again.status_code == 200 and again.json()["id"] == nid  # already stored: that note
    assert client.delete(f"/notes/{nid}", headers=alice).status_code == 204
    gone = client.get(f"/notes/{nid}", headers=alice)
    assert gone.status_code == 404 and gone.json()["error"]["field"] == "id"
    assert client.delete(f"/notes/{nid}", headers=alice).status_code == 404
    # history outlives the note
    assert [h["op"] for h in client.get(f"/notes/{nid}/history", headers=alice).json()][-1] == "delete"


def test_notes_are_listed_a_page_at_a_time(client, alice):  # noqa: F811
    ids = [_post(client, alice, f"note {i}", time=f"2024-01-0{i + 1}T00:00:00Z")["id"] for i in range(5)]
    _post(client, alice, "other session", session_id="s2", to_stm=False)
    page = client.get("/notes", params={"limit": 2}, headers=alice).json()
    assert [n["id"] for n in page["items"]] == ids[:2]
    assert (page["total"], page["limit"], page["offset"], page["next_offset"]) == (6, 2, 0, 2)
    last = client.get(
        "/notes", params={"limit": 2, "offset": 4, "session_id": "default"}, headers=alice
    ).json()
    assert [n["id"] for n in last["items"]] == [ids[4]] and last["next_offset"] is None
    stm = client.get("/notes", params={"memory_source": "stm"}, headers=alice).json()
    assert stm["total"] == 5 and {n["memory_tier"] for n in stm["items"]} == {"stm"}


def test_search_takes_the_store_fields_and_returns_every_score_part(client, alice, rls_store):  # noqa: F811
    a = _post(client, alice, "Maya adopted a golden retriever named Max.", time="2024-03-01T10:00:00Z",
              tags=["pets"])["id"]  # fmt: skip
    b = _post(client, alice, "Max the dog loves swimming in the lake.", time="2024-03-05T10:00:00Z")["id"]
    _post(client, alice, "The quarterly report is due on Friday.", time="2024-03-06T10:00:00Z", tags=["work"])
    client.patch(f"/notes/{a}", json={"links": {b: {"type": "extends", "strength": 0.9}}}, headers=alice)
    body = {
        "query": "golden retriever dog",
        "limit": 2,
        "temporal_weight": 0.3,
        "now": "2024-03-10T00:00:00Z",
        "date_from": "2024-02-01T00:00:00Z",
        "date_to": "2024-04-01T00:00:00Z",
        "memory_source": "ltm",
        "where_filter": {"tags": {"$contains": "pets"}},
        "context": "talking about animals",
        "touch": False,
        "include_links": True,
        "ranking": {"smoothing_prev": 0.5, "expansion": 3},
    }
    r = client.post("/search", json=body, headers=alice)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    # the same call through the Python API ranks identically, with the same score parts
    expected = rls_store.search(user_id="alice", **body)
    assert [x["note"]["id"] for x in results] == [e.id for e in expected] == [a, b]
    first = results[0]
    for part in (
        "score",
        "relevance_score",
        "semantic_score",
        "text_score",
        "recency_score",
        "context_score",
    ):
        assert first[part] == pytest.approx(getattr(expected[0], part)), part
    assert first["text_score"] > 0 and first["context_score"] is not None
    assert results[1]["is_linked"] and results[1]["linked_from"] == a
    assert results[1]["relationship_type"] == "extends"
    # touch=False: nothing counted as accessed
    assert client.get(f"/notes/{a}", headers=alice).json()["access_count"] == 0
    client.post("/search", json={"query": "golden retriever"}, headers=alice)
    assert client.get(f"/notes/{a}", headers=alice).json()["access_count"] == 1


def test_links_of_a_note_nearest_first(client, alice):  # noqa: F811
    a, b, c = (_post(client, alice, t)["id"] for t in ("first idea", "second idea", "third idea"))
    assert (
        client.patch(f"/notes/{a}", json={"links": {b: {"type": "supports"}}}, headers=alice).status_code
        == 200
    )
    # the reciprocal link is written with it
    back = client.get(f"/notes/{b}/links", headers=alice).json()["links"]
    assert [(x["note"]["id"], x["link_type"]) for x in back] == [(a, "supported_by")]
    # b's outgoing links become exactly {c}: b -> a goes, and a -> b with it (a pair is one relation)
    client.patch(f"/notes/{b}", json={"links": {c: {"type": "extends", "strength": 0.8}}}, headers=alice)
    assert client.get(f"/notes/{a}/links", headers=alice).json()["links"] == []
    client.patch(f"/notes/{a}", json={"links": {b: {"type": "supports"}}}, headers=alice)
    near = client.get(f"/notes/{a}/links", headers=alice).json()
    assert near["note"]["id"] == a and [x["note"]["id"] for x in near["links"]] == [b]
    assert near["links"][0]["link_type"] == "supports" and near["links"][0]["via"] == a
    far = client.get(f"/notes/{a}/links", params={"depth": 2}, headers=alice).json()["links"]
    assert [(x["note"]["id"], x["hops"], x["via"]) for x in far] == [(b, 1, a), (c, 2, b)]
    assert far[1]["path"] == [a, b, c]
    assert far[1]["path_strength"] == pytest.approx(0.5 * 0.8)
    # a link to a note the user does not have names the link
    ghost = "00000000-0000-4000-8000-000000000000"
    bad = client.patch(f"/notes/{a}", json={"links": {ghost: {}}}, headers=alice)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == f"links['{ghost}']"
    assert [x["note"]["id"] for x in client.get(f"/notes/{a}/links", headers=alice).json()["links"]] == [b]


def test_entities_their_facts_and_neighbourhood(client, alice):  # noqa: F811
    _post(client, alice, "Alice works at Acme and knows Bob.")
    _post(client, alice, "Bob likes Jazz.")
    names = [e["name"] for e in client.get("/entities", headers=alice).json()]
    assert {"Alice", "Acme", "Bob", "Jazz"} <= set(names) and names[0] == "Bob"  # most frequent first
    alice_entity = client.get("/entities/ALICE", headers=alice).json()  # any case
    assert alice_entity["name"] == "Alice" and alice_entity["frequency"] == 1
    assert {(f["relation"], f["target"]) for f in alice_entity["facts"]} == {
        ("works_at", "Acme"),
        ("knows", "Bob"),
    }
    hood = client.get("/entities/Alice/related", params={"depth": 2}, headers=alice).json()
    assert [(r["name"], r["depth"]) for r in hood["related"]] == [("Acme", 1), ("Bob", 1), ("Jazz", 2)]
    assert {(f["source"], f["target"]) for f in hood["facts"]} == {
        ("Alice", "Acme"),
        ("Alice", "Bob"),
        ("Bob", "Jazz"),
    }
    near = client.get("/entities/Alice/related", params={"depth": 1}, headers=alice).json()
    assert {f["target"] for f in near["facts"]} == {"Acme", "Bob"}  # Bob -> Jazz is outside depth 1
    missing = client.get("/entities/Nobody", headers=alice)
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "name"


BAD_REQUESTS = [
    ("post", "/notes", {}, "content", "is required"),
    ("post", "/notes", {"content": "x", "user_id": "bob"}, "user_id", "API key"),
    ("post", "/notes", {"content": "   "}, "content", ""),
    ("post", "/notes", {"content": "a\u0000b"}, "content", "NUL"),
    ("post", "/notes", {"content": "x", "importance": 2}, "importance", ""),
    ("post", "/notes", {"content": "x", "time": "next tuesday"}, "time", "ISO 8601"),
    ("post", "/notes", {"content": "x", "tags": ["a", 3]}, "tags[1]", ""),
    ("post", "/notes", {"content": "x", "metadata": {"k": "\ud800"}}, "metadata", ""),
    ("post", "/search", {"query": "x", "limit": "5"}, "limit", ""),
    ("post", "/search", {"query": "x", "where_filter": {"tags": {"$regex": "x"}}}, "where_filter", ""),
    ("post", "/search", {"query": "x", "date_from": "2024-02-01", "date_to": "2024-01-01"}, "date_to", ""),
    ("post", "/search", {"query": "x", "memory_source": "both"}, "memory_source", ""),
    ("post", "/search", {"query": "x", "ranking": {"smoothing": 0.3}}, "ranking.smoothing", "unknown"),
    ("post", "/search", {"query": "x", "ranking": {"vector_weight": 2}}, "ranking.vector_weight", ""),
    ("get", "/notes?limit=0", None, "limit", ""),
    ("get", "/notes?limt=5", None, "limt", "not a query parameter"),
    ("get", "/notes/not-a-uuid", None, "id", ""),
    ("get", "/entities/Alice/related?depth=11", None, "depth", ""),
    ("get", "/entities/a%00b", None, "name", "NUL"),
]


@pytest.mark.parametrize(("method", "path", "body", "field", "says"), BAD_REQUESTS)
def test_a_bad_request_gets_422_naming_its_field(client, alice, rls_store, method, path, body, field, says):  # noqa: F811
    # json.dumps escapes a lone surrogate as \ud800, as a client in another language may send it
    raw = None if body is None else json.dumps(body)
    r = client.request(
        method.upper(), path, content=raw, headers={**alice, "Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["type"] == "validation_error" and error["field"] == field
    assert says in error["reason"] and error["message"].startswith(f"{field}: ")
    assert rls_store.count(user_id="alice", memory_source="all") == 0  # nothing stored


def test_bad_bodies_and_patches_name_the_field(client, alice):  # noqa: F811
    nid = _post(client, alice, "a note")["id"]
    other = _post(client, alice, "another note")["id"]
    not_json = client.post(
        "/search", content=b"{not json", headers={**alice, "Content-Type": "application/json"}
    )
    assert not_json.status_code == 422 and not_json.json()["error"]["field"] == "body"
    several = client.post("/search", json={"query": "", "limit": 0}, headers=alice).json()["error"]
    assert [d["field"] for d in several["details"]] == ["query", "limit"]
    for patch, field in (
        ({"content": None}, "content"),
        ({"session_id": "s9"}, "session_id"),
        ({"links": []}, "links"),
    ):
        r = client.patch(f"/notes/{nid}", json=patch, headers=alice)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    conflict = client.patch(f"/notes/{other}", json={"content": "a note"}, headers=alice)
    assert conflict.status_code == 409 and conflict.json()["error"]["type"] == "conflict"
    assert conflict.json()["error"]["field"] == "content"  # the field the conflict is about
    assert conflict.json()["error"]["message"].startswith("content: another note of this user")
    assert not conflict.json()["error"]["reason"].startswith("content:")  # (the field is said once)
    assert client.get(f"/notes/{other}", headers=alice).json()["content"] == "another note"
    assert client.put("/notes", headers=alice).status_code == 405


def test_keys_are_required_and_checked_on_every_request(client, key_for, owner_engine):  # noqa: F811
    for headers in ({}, {"Authorization": "Basic YWxpY2U6eA=="}, {"Authorization": "Bearer nope"}):
        r = client.get("/notes", headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        assert r.json()["error"]["field"] == "Authorization"
    new = create_key(owner_engine, "alice")
    assert client.get("/notes", headers=bearer(new.key)).status_code == 200
    revoke_key(owner_engine, new.info.id)
    assert client.get("/notes", headers=bearer(new.key)).status_code == 401  # at once
    # open routes: health, the spec and the inspector page hold no tenant data
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/openapi.json").status_code == 200
    page = client.get("/ui")
    assert page.status_code == 200 and "cortex-pg inspector" in page.text
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert client.get("/ui/static/vendor/cytoscape/LICENSE").text.startswith("Copyright (c) 2016")


def test_a_key_is_never_logged_nor_echoed(client, key_for, caplog):  # noqa: F811
    key = key_for("alice")
    wrong = key[:-4] + "AAAA"
    with caplog.at_level(logging.DEBUG):
        ok = client.post("/notes", json={"content": "secret-free note"}, headers=bearer(key))
        refused = client.post("/notes", json={"content": "x"}, headers=bearer(wrong))
        bad = client.post("/search", json={"query": "x", "limit": key}, headers=bearer(key))
    assert ok.status_code == 201 and refused.status_code == 401 and bad.status_code == 422
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (key, wrong, key[4:20]):
        assert secret not in logged
        assert secret not in refused.text
    assert key not in bad.text and bad.json()["error"]["field"] == "limit"


def test_the_app_needs_an_rls_store_and_a_user_without_keys(db_url, rls_store):  # noqa: F811
    plain = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
    try:
        with pytest.raises(ValidationError) as err:
            create_app(plain)
        assert err.value.field == "store"
    finally:
        plain.close()
    for kwargs in ({"auth": False}, {"auth": True, "user_id": "solo"}):
        with pytest.raises(ValidationError) as err:
            create_app(rls_store, **kwargs)
        assert err.value.field == "user_id"


def test_without_keys_every_request_acts_for_the_one_user(rls_store):  # noqa: F811
    from fastapi.testclient import TestClient

    with TestClient(create_app(rls_store, auth=False, user_id="solo")) as c:
        assert c.post("/notes", json={"content": "mine"}).json()["user_id"] == "solo"
    assert [n.content for n in rls_store.list_notes(user_id="solo")] == ["mine"]


def test_an_unreachable_database_is_503_and_health_says_so(server_url, template_db):
    from fastapi.testclient import TestClient

    from tests.conftest import create_database, drop_database

    name = "cortex_t_server_gone"
    url = create_database(server_url, name, template=template_db)
    store = MemoryStore.open(url, embedder="hashing", auto_migrate=False, isolation="rls")
    try:
        engine = create_engine_for(url)
        key = create_key(engine, "alice").key
        engine.dispose()
        with TestClient(create_app(store), raise_server_exceptions=False) as c:
            assert c.get("/health").status_code == 200
            drop_database(server_url, name)
            down = c.get("/health")
            assert down.status_code == 503 and down.json()["error"]["type"] == "unavailable"
            assert name not in down.text and "try again later" in down.json()["error"]["reason"]
            assert c.get("/notes", headers=bearer(key)).status_code == 503
    finally:
        store.close()
        drop_database(server_url, name)


def test_entities_are_read_under_the_tenant_setting(rls_store, client, alice):  # noqa: F811
    # the entity routes read with the RLS role: the tenant must be set for them to see anything
    _post(client, alice, "Alice works at Acme.")
    with rls_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM cortex.entities")).scalar_one() == 0  # no tenant
    assert client.get("/entities/Acme", headers=alice).status_code == 200


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/notes?session_id=%FF", "session_id"),
        ("/notes?session_id=%ED%A0%80", "session_id"),  # an encoded lone surrogate
        ("/notes?limit=5&session_id=caf%E9", "session_id"),  # Latin-1, not UTF-8
        ("/notes?%FF=1", "query string"),
        ("/entities/%FF", "name"),
        ("/entities/a%C3/related", "name"),
    ],
)
def test_query_strings_and_paths_that_are_not_utf8_are_refused_naming_them(client, alice, url, field):  # noqa: F811
    _post(
        client, alice, "caf\u00e9 notes", session_id="caf\ufffd"
    )  # a stored value a U+FFFD read would match
    r = client.get(url, headers=alice)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field and "UTF-8" in error["reason"], error


def test_utf8_query_strings_and_paths_are_read_as_text(client, alice):  # noqa: F811
    _post(client, alice, "Alice and Zoë met in caf\u00e9 Br\u00fcck", session_id="caf\u00e9")
    page = client.get("/notes?session_id=caf%C3%A9", headers=alice)
    assert page.status_code == 200 and page.json()["total"] == 1
    assert client.get("/notes?session_id=caf%EF%BF%BD", headers=alice).json()["total"] == 0  # a real U+FFFD
    entity = client.get("/entities/Zo%C3%AB", headers=alice)
    assert entity.status_code == 200 and entity.json()["name"] == "Zo\u00eb", entity.text
