"""Tenants never mix over HTTP: a key of user A cannot read, change or delete B's note by id, nor
see it in lists, searches, links, history or entities; the service's connections act as the
non-owner RLS role with the key's user as the tenant."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.helpers.service import app, bearer, client, key_for, owner_engine, rls_store  # noqa: F401


@pytest.fixture
def two_tenants(client, key_for):  # noqa: F811
    """Keys of alice and bob; bob holds a note (linked to another of his) naming an entity."""
    alice, bob = bearer(key_for("alice")), bearer(key_for("bob"))
    post = lambda h, c, **kw: client.post("/notes", json={"content": c, **kw}, headers=h).json()["id"]  # noqa: E731
    secret = post(bob, "Bob's bank PIN is 4721, Bob works at Zephyr Corp.", session_id="private")
    other = post(bob, "Bob's second secret: the safe code.", session_id="private")
    client.patch(f"/notes/{secret}", json={"links": {other: {"type": "related"}}}, headers=bob)
    mine = post(alice, "Alice's shopping list: milk and eggs.")
    return alice, bob, secret, other, mine


def test_a_key_cannot_reach_another_tenants_note_by_id(client, two_tenants, owner_engine):  # noqa: F811
    alice, bob, secret, other, mine = two_tenants
    before = client.get(f"/notes/{secret}/history", headers=bob).json()
    for method, path, body in (
        ("GET", f"/notes/{secret}", None),
        ("PATCH", f"/notes/{secret}", {"content": "pwned", "metadata": {"x": 1}}),
        ("PATCH", f"/notes/{secret}", {"links": {}}),
        ("DELETE", f"/notes/{secret}", None),
        ("GET", f"/notes/{secret}/links", None),
        ("GET", f"/notes/{secret}/history", None),
    ):
        r = client.request(method, path, json=body, headers=alice)
        # exactly what a note that does not exist gets: no oracle for another tenant's ids
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"] == {
            "type": "not_found",
            "field": "id",
            "reason": f"note '{secret}' not found",
            "message": f"id: note '{secret}' not found",
            "details": [{"field": "id", "reason": f"note '{secret}' not found"}],
        }
    # bob's note, its links and its history are untouched
    note = client.get(f"/notes/{secret}", headers=bob).json()
    assert note["content"].startswith("Bob's bank PIN") and note["metadata"] == {}
    assert client.get(f"/notes/{secret}/history", headers=bob).json() == before
    assert [x["note"]["id"] for x in client.get(f"/notes/{secret}/links", headers=bob).json()["links"]] == [
        other
    ]
    with owner_engine.connect() as conn:
        counts = dict(conn.execute(text("SELECT user_id, count(*) FROM cortex.notes GROUP BY 1")).all())
    assert counts == {"alice": 1, "bob": 2}


def test_a_key_sees_only_its_tenant_in_lists_searches_and_entities(client, two_tenants):  # noqa: F811
    alice, bob, secret, other, mine = two_tenants
    listed = client.get("/notes", headers=alice).json()
    assert [n["id"] for n in listed["items"]] == [mine] and listed["total"] == 1
    assert client.get("/notes", params={"session_id": "private"}, headers=alice).json()["total"] == 0
    assert client.get("/notes", params={"memory_source": "stm"}, headers=alice).json()["total"] == 1
    for body in (
        {"query": "Bob bank PIN 4721 Zephyr"},
        {"query": "safe code secret", "session_id": "private", "memory_source": "all"},
        {
            "query": "Zephyr Corp",
            "entities": True,
            "expand_entities": True,
            "include_links": True,
            "limit": 50,
        },
    ):
        found = client.post("/search", json=body, headers=alice).json()["results"]
        assert {r["note"]["user_id"] for r in found} <= {"alice"}
        assert secret not in {r["note"]["id"] for r in found} and other not in {
            r["note"]["id"] for r in found
        }
    # bob's own key finds it (the search does work)
    assert secret in {
        r["note"]["id"]
        for r in client.post("/search", json={"query": "bank PIN"}, headers=bob).json()["results"]
    }
    assert "Zephyr Corp" not in {e["name"] for e in client.get("/entities", headers=alice).json()}
    assert client.get("/entities/Zephyr Corp", headers=alice).status_code == 404
    assert client.get("/entities/Bob/related", headers=alice).status_code == 404
    assert client.get("/entities/Zephyr Corp", headers=bob).status_code == 200


def test_a_key_cannot_link_its_note_to_another_tenants_note(client, two_tenants, owner_engine):  # noqa: F811
    alice, bob, secret, other, mine = two_tenants
    r = client.patch(f"/notes/{mine}", json={"links": {secret: {"type": "supports"}}}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == f"links['{secret}']"
    with owner_engine.connect() as conn:
        rows = conn.execute(
            text("SELECT count(*) FROM cortex.note_links WHERE source_id = :a OR target_id = :a"), {"a": mine}
        ).scalar_one()
    assert rows == 0


def test_the_service_acts_as_the_rls_role_for_the_keys_user(app, client, two_tenants):  # noqa: F811
    store = app.state.service.store
    assert store.isolation == "rls"
    with store.engine.connect() as conn:  # no tenant set: the role sees no note at all
        assert conn.execute(text("SELECT current_user")).scalar_one() == "cortex_app"
        assert conn.execute(text("SELECT count(*) FROM cortex.notes")).scalar_one() == 0
