"""Edge cases found by trying to break the store: races on a new data directory, reconnecting
after ``db stop``, odd Unicode, limits, and CLI input errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cortex_pg import ValidationError
from cortex_pg.cli import app
from cortex_pg.db import embedded
from cortex_pg.store import MemoryStore


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": "bad \ud800 surrogate"}, "content"),
        ({"content": "\u200b\u200b"}, "content"),
        ({"content": "x" * 500_001}, "content"),
        ({"content": "ok", "time": "9999-12-31T23:00:00-05:00"}, "time"),
        ({"content": "ok", "user_id": "   "}, "user_id"),
        ({"content": "ok", "user_id": "\u200b"}, "user_id"),
        ({"content": "ok", "category": "a.\x7fb"}, "category"),
        ({"content": "ok", "category": "work.\ud800"}, "category"),
        ({"content": "ok", "category": "work." + "x" * 251}, "category"),  # 256 characters
        ({"content": "ok", "category": "work.\u200b"}, "category"),  # a segment that shows nothing
        ({"content": "ok", "category": "work.\u3164.python"}, "category"),
        ({"content": "ok", "category": "\u2800/work"}, "category"),
        ({"content": "ok", "category": "work.\u0301"}, "category"),
        ({"content": "\u3164\u2800\u0301"}, "content"),
        ({"content": "ok", "keywords": ["bell\x07"]}, "keywords[0]"),
        ({"content": "ok", "metadata": {"k": "\udfff"}}, "metadata"),
    ],
)
def test_more_bad_input(store, kwargs, field):
    with pytest.raises(ValidationError) as err:
        store.add(**kwargs)
    assert err.value.field == field
    assert store.count() == 0


def test_a_category_that_shows_nothing_is_no_category(store):
    for blank in ("", "  ", "\u200b", "\u3164", "\u115f\u1160", "\uffa0", "\u2800", "\u0301\u0302"):
        nid = store.add(f"a note filed under {blank!r}", category=blank)
        assert store.get(nid).category is None, repr(blank)
    nid = store.add("a note under an accented category", category="caf\u0065\u0301.b")
    assert store.get(nid).category == "caf\u0065\u0301.b"  # a mark on a letter is visible


def test_a_category_of_the_longest_length_is_kept(store):
    path = "work." + "é" * 250  # 255 characters
    nid = store.add("ok", category=path)
    assert store.get(nid).category == path
    with pytest.raises(ValidationError) as err:
        store.update(nid, category=path + "x")
    assert err.value.field == "category" and store.get(nid).category == path


def test_emoji_are_fine(store):
    nid = store.add("party 🎉", metadata={"mood": "😀"}, tags=["🎈"])
    note = store.get(nid)
    assert note.metadata == {"mood": "😀"} and note.tags == ["🎈"]


def test_query_length_is_limited(store):
    store.add("something")
    with pytest.raises(ValidationError) as err:
        store.search("word " * 3000)
    assert err.value.field == "query"


def test_stm_capacity_zero_is_refused(db_url):
    with pytest.raises(ValidationError) as err:
        MemoryStore.open(db_url, embedder="hashing", stm_capacity=0)
    assert err.value.field == "stm_capacity"


def test_bad_url_is_a_validation_error():
    with pytest.raises(ValidationError) as err:
        MemoryStore.open("not a url", embedder="hashing")
    assert err.value.field == "url"


BAD_URLS = [
    ("sqlite:///tmp/cortex-pg-not-postgres.db", "'sqlite' is not PostgreSQL"),
    ("mysql://a@b/c", "'mysql' is not PostgreSQL"),
    ("http://x", "'http' is not PostgreSQL"),
    ("postgresql+psycopg2://u@127.0.0.1/x", "'postgresql+psycopg2' is not PostgreSQL"),
    ("postgresql://u:secret@127.0.0.1:notaport/x", "port is not a number"),
    ("postgresql://u@127.0.0.1:70000/x", "port 70000 is not from 1 to 65535"),
    # not parsed as a URL: shown without what stands before its host
    (" postgresql://u:secret@127.0.0.1:5999/x", "' postgresql://…@127.0.0.1:5999/x' is not a database URL"),
    ("postgresql:/u:secret@127.0.0.1/x", "'…@127.0.0.1/x' is not a database URL"),
]


@pytest.mark.parametrize(("url", "reason"), BAD_URLS)
def test_a_url_not_for_postgresql_or_with_a_bad_port_is_a_validation_error(url, reason):
    with pytest.raises(ValidationError) as err:
        MemoryStore.open(url, embedder="hashing")
    assert err.value.field == "url" and reason in err.value.reason
    assert "secret" not in str(err.value)  # the URL's password is not repeated


@pytest.mark.parametrize(("url", "reason"), BAD_URLS)
def test_cli_a_bad_database_url_is_one_line_naming_the_flag(url, reason):
    r = CliRunner().invoke(app, ["--database-url", url, "--embedder", "hashing", "stats"])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: --database-url: ")
    assert reason in r.stderr and "Traceback" not in r.output


def test_postgres_urls_with_and_without_the_driver_still_open(db_url):
    from sqlalchemy.engine import make_url

    parsed = make_url(db_url)
    for scheme in ("postgres", "postgresql", "postgresql+psycopg"):
        url = parsed.set(drivername=scheme).render_as_string(hide_password=False)
        store = MemoryStore.open(url, embedder="hashing", auto_migrate=False)
        try:
            assert store.count() == 0
        finally:
            store.close()


def test_many_processes_open_a_new_data_directory_at_once():
    home = Path(tempfile.mkdtemp(prefix="cortex-pg-race-"))
    env = {**os.environ, "CORTEX_PG_HOME": str(home), "CORTEX_PG_EMBEDDER": "hashing"}
    env.pop("DATABASE_URL", None)
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "cortex_pg", "add", f"race {i}", "-u", "race"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        outs = [p.communicate(timeout=240) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], [o[1][-500:] for o in outs]
        out = subprocess.run(
            [sys.executable, "-m", "cortex_pg", "stats", "--json", "-u", "race"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout)["ltm_notes"] == 4
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def test_a_process_reconnects_after_db_stop():
    home = Path(tempfile.mkdtemp(prefix="cortex-pg-stop-"))
    try:
        store = MemoryStore.open(path=home, embedder="hashing")
        nid = store.add("survives a restart")
        store.close()
        env = {**os.environ, "CORTEX_PG_HOME": str(home)}
        subprocess.run(
            [sys.executable, "-m", "cortex_pg", "db", "stop"], env=env, check=True, capture_output=True
        )
        assert not embedded.is_running(home)
        store = MemoryStore.open(path=home, embedder="hashing")  # same process: starts the server again
        try:
            assert store.get(nid).content == "survives a restart"
        finally:
            store.close()
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def test_cli_input_errors_are_one_line(db_url, tmp_path):
    runner = CliRunner()
    env = {"DATABASE_URL": db_url}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"foo": 1}]))
    r = runner.invoke(app, ["--embedder", "hashing", "ingest", str(bad), "--format", "locomo"], env=env)
    assert r.exit_code == 2 and "conversation" in r.stderr
    nospk = tmp_path / "nospk.json"
    nospk.write_text(
        json.dumps(
            [
                {
                    "sample_id": "x",
                    "conversation": {
                        "session_1_date_time": "1:56 pm on 8 May, 2023",
                        "session_1": [{"text": "hi"}],
                    },
                }
            ]
        )
    )
    r = runner.invoke(app, ["--embedder", "hashing", "ingest", str(nospk), "--format", "locomo"], env=env)
    assert r.exit_code == 2 and "speaker" in r.stderr
    noid = tmp_path / "noid.json"
    noid.write_text(json.dumps([{"conversation": {}}]))
    r = runner.invoke(app, ["--embedder", "hashing", "ingest", str(noid), "--format", "locomo"], env=env)
    assert r.exit_code == 2 and "sample_id" in r.stderr
    binary = tmp_path / "latin1.txt"
    binary.write_bytes("caf\xe9 au lait".encode("latin-1"))
    r = runner.invoke(app, ["--embedder", "hashing", "ingest", str(binary)], env=env)
    assert r.exit_code == 2 and "UTF-8" in r.stderr
    r = runner.invoke(app, ["db", "upgrade", "nonsense"], env=env)
    assert r.exit_code == 2 and "revision" in r.stderr
    r = runner.invoke(app, ["db", "downgrade", "base"], env=env, input="n\n")
    assert r.exit_code == 1
    r = runner.invoke(app, ["db", "downgrade", "base"], env=env)  # no terminal, no answer: a usage error
    assert r.exit_code == 2 and "error: --yes: there is no terminal" in r.stderr and "Aborted" not in r.output
    r = runner.invoke(app, ["--embedder", "hashing", "stats", "--json"], env=env)
    assert r.exit_code == 0  # the refused downgrade left the schema in place
    r = runner.invoke(app, ["db", "downgrade", "--force"], env=env, input="y\n")  # a mistyped option
    assert r.exit_code == 2 and "--force" in r.stderr
    r = runner.invoke(app, ["db", "downgrade", "-1", "--yes"], env=env)  # a relative target, as its help says
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["db", "current"], env=env)
    before_head = r.stdout
    r = runner.invoke(app, ["db", "upgrade"], env=env)
    assert r.exit_code == 0 and runner.invoke(app, ["db", "current"], env=env).stdout != before_head


@pytest.mark.parametrize("command", [["stats"], ["ingest", __file__], ["db", "url"]])
def test_cli_a_bad_home_names_the_home_flag(tmp_path, command):
    afile = tmp_path / "notes.md"
    afile.write_text("not a data directory")
    env = {"DATABASE_URL": None, "CORTEX_PG_DATABASE_URL": None, "CORTEX_PG_HOME": None}
    for home, reason in ((afile, "is a file"), (afile / "below", "cannot create the data directory")):
        r = CliRunner().invoke(app, ["--home", str(home), "--embedder", "hashing", *command], env=env)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith("error: --home: ") and reason in r.stderr, r.stderr  # (not path:, PATH:)
    r = CliRunner().invoke(
        app, ["--embedder", "hashing", *command], env={**env, "CORTEX_PG_HOME": str(afile)}
    )
    assert r.exit_code == 2 and r.stderr.startswith("error: --home: "), r.output  # (its environment variable)


def test_a_bad_data_directory_names_path_or_home(tmp_path, monkeypatch):
    afile = tmp_path / "notes.md"
    afile.write_text("not a data directory")
    for name in ("DATABASE_URL", "CORTEX_PG_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValidationError) as err:
        MemoryStore.open(path=afile, embedder="hashing")
    assert err.value.field == "path"
    monkeypatch.setenv("CORTEX_PG_HOME", str(afile))
    with pytest.raises(ValidationError) as err:
        MemoryStore.open(embedder="hashing")
    assert err.value.field == "home" and "is a file" in err.value.reason


def test_cli_downgrade_with_standard_input_closed_is_the_usage_error_of_no_answer(db_url):
    """``<&-`` (no standard input at all: ``input()`` raises RuntimeError, not EOFError) is
    answered like ``</dev/null``: the error naming --yes, exit status 2, the schema kept."""
    env = {**os.environ, "DATABASE_URL": db_url}
    for redirect in ("</dev/null", "<&-"):
        r = subprocess.run(
            ["bash", "-c", f'"$0" -m cortex_pg db downgrade base {redirect}', sys.executable],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2, (redirect, r.stderr)
        assert r.stderr.startswith("error: --yes: there is no terminal"), (redirect, r.stderr)
        assert "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "cortex_pg", "db", "current"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and "head" in r.stdout, r.stdout
