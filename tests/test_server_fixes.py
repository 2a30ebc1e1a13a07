"""Fixes of the HTTP service and its CLI: a repeated query parameter is refused, POST /notes
says whether the note is new (201) or already stored (200), entity names
with "/" are addressable, ``keys revoke`` names the key, ``keys list`` shows whole ids, and a
command run after a crash says the STM loss once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cortex_pg.cli import app as cli
from cortex_pg.db import embedded
from cortex_pg.entities.extract import Extraction, Mention, Relation
from cortex_pg.entities.repository import EntityStore
from cortex_pg.server.keys import create_key
from cortex_pg.store import MemoryStore
from tests.helpers.server_crash import kill_server
from tests.helpers.service import app, bearer, client, key_for, owner_engine, rls_store  # noqa: F401


@pytest.fixture
def alice(key_for):  # noqa: F811
    return bearer(key_for("alice"))


def test_a_repeated_query_parameter_is_refused(client, alice):  # noqa: F811
    r = client.get("/notes?limit=1&limit=2", headers=alice)
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["field"] == "limit" and "2 times" in error["message"]
    assert client.get("/notes?limit=1", headers=alice).status_code == 200


def test_a_notes_short_fields_past_their_limits_are_422_naming_them(client, alice):  # noqa: F811
    ok = client.post("/notes", json={"content": "Alice at the limits", "memory_type": "m" * 255,
                                     "context": "c" * 10_000, "tags": [f"t{i}" for i in range(1_000)]},
                     headers=alice)  # fmt: skip
    assert ok.status_code == 201, ok.text
    nid = ok.json()["id"]
    other = client.post("/notes", json={"content": "Bob"}, headers=alice).json()["id"]
    for body, field in [
        ({"memory_type": "m" * 256}, "memory_type"),
        ({"context": "c" * 10_001}, "context"),
        ({"tags": [f"t{i}" for i in range(1_001)]}, "tags"),
        ({"keywords": ["k" * 256]}, "keywords[0]"),
    ]:
        r = client.post("/notes", json={"content": "Alice past a limit", **body}, headers=alice)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
        r = client.patch(f"/notes/{nid}", json=body, headers=alice)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    r = client.patch(f"/notes/{nid}", json={"links": {other: {"reason": "r" * 10_001}}}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == f"links[{other!r}].reason", r.text


def test_text_no_field_can_hold_is_422_naming_it_never_500(client, alice):  # noqa: F811
    """A lone surrogate (JSON "\\ud800"), text with no visible character and an importance a real
    cannot hold are refused as the field's errors, on create and update."""
    sent = {**alice, "content-type": "application/json"}  # bodies as JSON text (ASCII escapes)
    nid = client.post("/notes", json={"content": "Alice's note"}, headers=alice).json()["id"]
    for body, field in [
        ({"memory_type": "\ud800"}, "memory_type"),
        ({"memory_type": "\u3164"}, "memory_type"),
        ({"importance": 1e-50}, "importance"),
    ]:
        r = client.post("/notes", content=json.dumps({"content": "Alice again", **body}), headers=sent)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
        r = client.patch(f"/notes/{nid}", content=json.dumps(body), headers=sent)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    r = client.post("/search", content=json.dumps({"query": "x", "ranking": {"\ud800": 1}}), headers=sent)
    assert r.status_code == 422 and r.json()["error"]["field"] == "ranking", r.text
    assert '"\\ud800"' in r.json()["error"]["message"]


def test_an_integer_parameter_is_decimal_digits(client, alice):  # noqa: F811
    nid = client.post("/notes", json={"content": "Alice likes tea"}, headers=alice).json()["id"]
    client.post("/notes", json={"content": "Alice met Bob"}, headers=alice)
    for path, name in [("/notes?limit=", "limit"), ("/notes?offset=", "offset"),
                       (f"/notes/{nid}/links?depth=", "depth"), ("/entities?limit=", "limit")]:  # fmt: skip
        for raw in ("5_0", "%2B5", "+5", "5.0", "%205", "5%20", "%D9%A5", "0x5", ""):
            r = client.get(path + raw, headers=alice)
            assert r.status_code == 422 and r.json()["error"]["field"] == name, (path, raw, r.text)
        assert client.get(path + "1", headers=alice).status_code == 200
        assert client.get(path + "01", headers=alice).status_code == 200  # decimal digits
    minus = client.get("/notes?offset=-1", headers=alice)  # read as -1: out of the route's range
    assert minus.status_code == 422 and minus.json()["error"]["field"] == "offset"
    assert "greater than or equal to 0" in minus.json()["error"]["message"]
    for raw in ("-0", "-00"):  # zero with a minus sign is not how zero is written: refused, not read as 0
        r = client.get(f"/notes?offset={raw}", headers=alice)
        assert r.status_code == 422 and r.json()["error"]["field"] == "offset", r.text
        assert "minus sign" in r.json()["error"]["reason"], r.text
    assert client.get("/notes?offset=0", headers=alice).status_code == 200
    assert client.get("/notes?limit=1&offset=1", headers=alice).json()["offset"] == 1
    for body in ({"limit": 5.0}, {"limit": "5"}, {"link_depth": 1.0}):  # JSON bodies are strict
        r = client.post("/search", json={"query": "tea", **body}, headers=alice)
        assert r.status_code == 422 and r.json()["error"]["field"] == next(iter(body)), r.text


def test_a_bad_link_is_named_by_its_target_id(client, alice):  # noqa: F811
    a = client.post("/notes", json={"content": "Alice likes tea"}, headers=alice).json()["id"]
    b = client.post("/notes", json={"content": "Alice brews oolong"}, headers=alice).json()["id"]
    r = client.patch(f"/notes/{a}", json={"links": {b: {"strength": 1.5}}}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == f"links[{b!r}].strength"
    missing = str(uuid.uuid4())
    r = client.patch(f"/notes/{a}", json={"links": {missing: {"strength": 0.5}}}, headers=alice)
    assert r.status_code == 422 and r.json()["error"]["field"] == f"links[{missing!r}]"
    assert client.get(f"/notes/{a}/links", headers=alice).json()["links"] == []  # nothing written


def test_post_notes_new_existing_and_taken_id(client, alice):  # noqa: F811
    first = client.post("/notes", json={"content": "Alice likes tea", "session_id": "s"}, headers=alice)
    assert first.status_code == 201
    again = client.post("/notes", json={"content": "Alice likes tea", "session_id": "s"}, headers=alice)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert (
        "already stored" in client.app.openapi()["paths"]["/notes"]["post"]["responses"]["200"]["description"]
    )
    other = client.post("/notes", json={"content": "Alice likes tea", "session_id": "t"}, headers=alice)
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]  # another session
    assert (
        client.post("/notes", json={"content": "x", "id": str(uuid.uuid4())}, headers=alice).status_code
        == 422
    )


def test_entity_names_with_a_slash(client, alice, owner_engine):  # noqa: F811
    note = client.post("/notes", json={"content": "Alice maintains the TCP/IP stack at Acme"}, headers=alice)
    slashed = "TCP/IP"
    EntityStore(owner_engine).index_note(
        "alice",
        note.json()["id"],
        "Alice maintains the TCP/IP stack at Acme",
        Extraction(
            [Mention("Alice", "person", 0), Mention(slashed, "concept", 20)],
            [Relation("Alice", "maintains", slashed)],
        ),
    )
    got = client.get(f"/entities/{slashed}", headers=alice)
    assert got.status_code == 200 and got.json()["name"] == slashed
    encoded = client.get("/entities/" + slashed.replace("/", "%2F"), headers=alice)
    assert encoded.status_code == 200 and encoded.json()["name"] == slashed
    hood = client.get(f"/entities/{slashed}/related", headers=alice)
    assert hood.status_code == 200 and hood.json()["entity"]["name"] == slashed
    assert "Alice" in [r["name"] for r in hood.json()["related"]]
    assert client.get("/entities/No/Such", headers=alice).status_code == 404


def test_keys_revoke_names_the_key_and_list_shows_whole_ids(db_url, owner_engine):  # noqa: F811
    made = create_key(owner_engine, "alice")
    runner = CliRunner()
    env = {"DATABASE_URL": db_url, "COLUMNS": "60"}
    bad = runner.invoke(cli, ["keys", "revoke", "nope"], env=env)
    assert bad.exit_code == 2 and "not an API key id" in bad.output and "note" not in bad.output
    listed = runner.invoke(cli, ["keys", "list"], env=env)
    assert listed.exit_code == 0 and made.info.id in listed.output
    done = runner.invoke(cli, ["keys", "revoke", made.info.id], env=env)
    assert done.exit_code == 0 and made.info.id in done.output


@pytest.mark.crash
def test_the_cli_says_an_stm_loss_once():
    data = Path(tempfile.mkdtemp(prefix="cortex-cli-crash-"))
    try:
        url = embedded.start(data)
        store = MemoryStore.open(url, embedder="hashing", auto_migrate=True)
        store.add("a short-term thought", user_id="u", session_id="s")
        store.close()
        kill_server(data)
        embedded.start(data)
        done = subprocess.run(
            [sys.executable, "-m", "cortex_pg", "--embedder", "hashing", "stats"],
            env={**os.environ, "DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        said = re.findall(r"emptied by the database server's crash recovery", done.stdout + done.stderr)
        assert len(said) == 1, done.stderr
    finally:
        embedded.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_writes_that_outlast_the_retries_are_503_busy_with_retry_after():
    """A deadlock or serialization failure that outlasted the store's retries (nothing written)
    is 503 ``busy`` with ``Retry-After``, so a client knows to send the request again; other
    database errors stay 500."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from cortex_pg.errors import DatabaseError
    from cortex_pg.server import errors

    tiny = FastAPI()
    errors.install(tiny)

    @tiny.get("/fail/{state}")
    def fail(state: str) -> None:
        raise DatabaseError("the database failed", state)

    with TestClient(tiny, raise_server_exceptions=False) as c:
        for state in ("40P01", "40001"):
            r = c.get(f"/fail/{state}")
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert (
                r.json()["error"]["type"] == "busy"
                and "send the request again" in r.json()["error"]["message"]
            )
        r = c.get("/fail/XX000")
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
