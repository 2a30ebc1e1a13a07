"""API keys of the HTTP service: stored as SHA-256 only, bound to one user, revocable, unreadable
from the service's non-owner role; ``cortex-pg keys`` prints a key once and never again."""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from cortex_pg import ValidationError
from cortex_pg.cli import app as cli
from cortex_pg.db import tenancy
from cortex_pg.server import keys
from tests.helpers.service import owner_engine, rls_store  # noqa: F401


def test_a_key_is_stored_as_its_hash_and_resolves_to_its_user(owner_engine):  # noqa: F811
    new = keys.create_key(owner_engine, "alice", name="laptop")
    assert keys.looks_like_key(new.key) and new.key.startswith("cpk_") and len(new.key) == 47
    assert new.key not in repr(new)
    with owner_engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM cortex.api_keys")).mappings().one()
    assert row["key_hash"] == hashlib.sha256(new.key.encode()).hexdigest()
    assert new.key not in json.dumps({k: str(v) for k, v in row.items()})  # only a 10-char prefix
    assert row["prefix"] == new.key[:10] and row["user_id"] == "alice" and row["name"] == "laptop"
    assert keys.user_for_key(owner_engine, new.key) == "alice"
    other = keys.create_key(owner_engine, "bob")
    assert keys.user_for_key(owner_engine, other.key) == "bob"
    assert [k.user_id for k in keys.list_keys(owner_engine)] == ["alice", "bob"]
    assert [k.id for k in keys.list_keys(owner_engine, user_id="bob")] == [other.info.id]


def test_unknown_malformed_and_revoked_keys_resolve_to_nobody(owner_engine):  # noqa: F811
    new = keys.create_key(owner_engine, "alice")
    assert keys.user_for_key(owner_engine, keys.generate_key()) is None
    for bad in ("", "Bearer x", new.key + "x", new.key[:-1], "cpk_" + "!" * 43):
        assert keys.user_for_key(owner_engine, bad) is None, bad
    assert keys.revoke_key(owner_engine, new.info.id) is True
    assert keys.revoke_key(owner_engine, new.info.id) is False  # already revoked
    assert keys.user_for_key(owner_engine, new.key) is None
    assert keys.list_keys(owner_engine)[0].revoked_at is not None


def test_bad_arguments_name_their_field(owner_engine):  # noqa: F811
    for user, name, field in (
        ("", None, "user_id"),
        ("a\x00b", None, "user_id"),
        ("alice", " ", "name"),
        ("alice", "\u3164", "name"),  # a Hangul filler: nothing visible
        ("alice", "\u200b ", "name"),
        ("alice", "ci\ud800", "name"),  # a lone surrogate
    ):
        with pytest.raises(ValidationError) as err:
            keys.create_key(owner_engine, user, name=name)
        assert err.value.field == field
    with pytest.raises(ValidationError) as err:
        keys.revoke_key(owner_engine, "not-a-uuid")
    assert err.value.field == "key_id"
    assert keys.list_keys(owner_engine) == []


def test_the_service_role_reads_no_key_but_can_resolve_one(rls_store, owner_engine):  # noqa: F811
    new = keys.create_key(owner_engine, "alice")
    with tenancy.tenant_scope("alice"), rls_store.engine.begin() as conn:
        assert conn.execute(text("SELECT current_user")).scalar_one() == "cortex_app"
        assert conn.execute(text("SELECT count(*) FROM cortex.api_keys")).scalar_one() == 0
    insert = text("INSERT INTO cortex.api_keys (user_id, prefix, key_hash) VALUES ('alice', 'x', :h)")
    with (
        tenancy.tenant_scope("alice"),
        pytest.raises(Exception, match="row-level security"),
        rls_store.engine.begin() as conn,
    ):
        conn.execute(insert, {"h": "0" * 64})
    assert keys.user_for_key(rls_store.engine, new.key) == "alice"


@pytest.fixture
def run(db_url):
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), env={"DATABASE_URL": db_url}, catch_exceptions=False)


def test_cli_prints_a_key_once_lists_and_revokes(run, owner_engine):  # noqa: F811
    made = run("keys", "create", "--user", "alice", "--name", "ci")
    assert made.exit_code == 0, made.output
    key = made.stdout.strip()
    assert keys.looks_like_key(key) and made.stdout == key + "\n"  # the key alone on stdout
    assert "shown only now" in made.stderr and key not in made.stderr
    assert keys.user_for_key(owner_engine, key) == "alice"
    listed = run("keys", "list", "--json")
    assert key not in listed.stdout
    (info,) = json.loads(listed.stdout)
    assert info["user_id"] == "alice" and info["name"] == "ci" and key.startswith(info["prefix"])
    assert info["revoked_at"] is None
    table = run("keys", "list", "--user", "alice")
    assert info["prefix"] in table.stdout and key not in table.stdout
    assert run("keys", "revoke", info["id"]).exit_code == 0
    assert keys.user_for_key(owner_engine, key) is None
    again = run("keys", "revoke", info["id"])
    assert again.exit_code == 2 and "no working key" in again.stderr


def test_cli_errors_name_the_flag(run, owner_engine):  # noqa: F811
    bad = run("keys", "create", "--user", " ")
    assert bad.exit_code == 2 and "--user" in bad.stderr
    bad_id = run("keys", "revoke", "nope")
    assert bad_id.exit_code == 2 and "KEY_ID" in bad_id.stderr
    assert keys.list_keys(owner_engine) == []
