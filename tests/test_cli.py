"""The cortex-pg command against a real database (and the embedded server across processes)."""

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

from cortex_pg.cli import app
from cortex_pg.db import embedded

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"

SAMPLE = [
    {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat called Miso."},
                {
                    "speaker": "Ben",
                    "dia_id": "D1:2",
                    "text": "Lovely! Here is my garden.",
                    "blip_caption": "a photo of tomato plants",
                },
            ],
            "session_2_date_time": "9:00 am on 20 June, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Miso learned to open doors."}],
            "session_3_date_time": "10:00 am on 1 July, 2023",
        },
        "qa": [],
    }
]


@pytest.fixture
def run(db_url):
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(
            app, ["--embedder", "hashing", *args], env={"DATABASE_URL": db_url}, catch_exceptions=False
        )
        return result

    return invoke


def test_add_search_json_and_stats(run):
    r = run("add", "The spare key is under the blue flowerpot", "--user", "cli", "--tags", "home,keys")
    assert r.exit_code == 0
    nid = r.stdout.strip()
    r = run("search", "where is the spare key", "--user", "cli", "--json")
    data = json.loads(r.stdout)
    assert data[0]["id"] == nid and data[0]["tags"] == ["home", "keys"]
    assert "embedding" not in data[0]
    r = run("stats", "--json")
    assert json.loads(r.stdout)["ltm_notes"] == 1


def test_get_and_delete_one_note(run):
    nid = run("add", "The boiler is serviced on Thursdays", "--user", "g").stdout.strip()
    r = run("get", nid, "--json")
    assert r.exit_code == 0
    assert {k: json.loads(r.stdout)[k] for k in ("id", "user_id", "content")} == {
        "id": nid,
        "user_id": "g",
        "content": "The boiler is serviced on Thursdays",
    }
    r = run("get", nid, "--user", "someone-else")  # another tenant's id: not found
    assert r.exit_code == 2 and "not found" in r.stderr
    r = run("delete", nid, "--user", "g")
    assert r.exit_code == 0 and f"deleted {nid}" in r.stdout
    r = run("delete", nid)
    assert r.exit_code == 2 and "not found" in r.stderr
    assert json.loads(run("stats", "--json").stdout)["ltm_notes"] == 0
    r = run("get", "not-a-uuid")
    assert r.exit_code == 2 and r.stderr.startswith("error: ID:")


def test_ingest_counts_the_file_s_notes_new_and_already_stored(run, tmp_path):
    # counted per content (not as the change of the user's note count, which concurrent
    # writers move; the standing program runs ingest beside them)
    one, two = "The first paragraph, thirty.", "The second paragraph, thirty."
    f = tmp_path / "notes.txt"
    f.write_text(f"{one}\n\n{two}\n\n{one}\n")  # a paragraph per chunk of 50 characters
    run("add", two, "--user", "n")  # already there
    run("add", one, "--user", "n", "--session", "other")  # another session: not the same note
    r = run("ingest", str(f), "--user", "n", "--chunk-size", "50")
    assert r.exit_code == 0 and "3 read, 1 new, 2 already stored" in r.stdout


def test_ingest_into_an_empty_store_is_a_bulk_load_with_the_index_built_after(run, db_url, tmp_path):
    from sqlalchemy import create_engine, text

    f = tmp_path / "many.txt"
    f.write_text("\n\n".join(f"Paragraph {i} about topic {i % 7} and nothing else." for i in range(300)))
    engine = create_engine(db_url)
    try:
        r = run("ingest", str(f), "--user", "bulk", "--chunk-size", "60", "--batch-size", "50")
        assert r.exit_code == 0 and "300 read, 300 new" in r.stdout
        with engine.connect() as conn:
            # the model's HNSW index exists on every partition again after the load
            missing = conn.execute(
                text(
                    "SELECT count(*) FROM pg_inherits i "
                    "WHERE i.inhparent = 'cortex.embeddings'::regclass AND NOT EXISTS ("
                    "  SELECT 1 FROM pg_index x JOIN pg_am a ON a.oid = (SELECT relam FROM pg_class WHERE oid = x.indexrelid)"
                    "  WHERE x.indrelid = i.inhrelid AND a.amname = 'hnsw')"
                )
            ).scalar_one()
            assert missing == 0
            assert (
                conn.execute(text("SELECT count(*) FROM cortex.notes WHERE user_id = 'bulk'")).scalar_one()
                == 300
            )
    finally:
        engine.dispose()
    found = run("search", "Paragraph 42 about topic 0", "--user", "bulk", "--limit", "3")
    assert found.exit_code == 0 and "Paragraph 42 about" in found.stdout


def test_ingest_text_chunks_keep_headings_with_their_text_and_store_nothing_twice(run, tmp_path):
    f = tmp_path / "guide.md"
    body = "The installer copies the files and checks the checksums of each package. " * 12
    f.write_text(f"# Guide\n\n## Install\n\n{body}\n\n## Usage\n\n" + "Run the tool on a folder. " * 30)
    r = run("ingest", str(f), "--user", "t", "--chunk-size", "600")
    assert r.exit_code == 0 and "0 already stored" in r.stdout
    read = int(r.stdout.split(" read")[0].split()[-1])
    r = run("ingest", str(f), "--user", "t", "--chunk-size", "600")  # again: nothing new
    assert r.exit_code == 0 and f"{read} read, 0 new, {read} already stored" in r.stdout
    r = run("search", "checksums of each package", "--user", "t", "--json", "--limit", "20")
    notes = json.loads(r.stdout)
    assert len(notes) == read >= 2
    for note in notes:  # no heading is a note of its own, and every note has a text line
        lines = [x for x in note["content"].splitlines() if x.strip()]
        assert any(not x.startswith("#") for x in lines)
    contexts = {n["context"] for n in notes}
    assert "Guide > Install" in contexts and "Guide > Usage" in contexts
    r = run("ingest", str(f), "--user", "t", "--chunk-size", "10")
    assert r.exit_code == 2 and "--chunk-size" in r.stderr


def test_ingest_locomo_shape(run, tmp_path):
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps(SAMPLE))
    r = run("ingest", str(f), "--format", "locomo")
    assert r.exit_code == 0, r.stdout
    r = run("search", "garden tomato", "--user", "conv-t", "--json", "--limit", "1")
    top = json.loads(r.stdout)[0]
    assert top["content"] == "Ben: Lovely! Here is my garden. [shares a photo: a photo of tomato plants]"
    assert top["metadata"] == {"speaker": "Ben", "dia_id": "D1:2", "session": 1}
    assert top["session_id"] == "session_1"
    assert top["created_at"].startswith("2023-05-08T13:56:01")
    # date window from the CLI
    r = run("search", "Miso", "--user", "conv-t", "--json", "--from", "2023-06-01", "--to", "2023-07-01")
    assert [d["metadata"]["dia_id"] for d in json.loads(r.stdout)] == ["D2:1"]


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo data not present")
def test_ingest_real_locomo_and_find_the_evidence(run):
    r = run("ingest", str(LOCOMO), "--format", "locomo", "--no-stm")
    assert r.exit_code == 0 and "2760 read, 2760 new, 0 already stored (5 user(s)" in r.stdout
    r = run("search", "When did Caroline go to the LGBTQ support group?", "--user", "conv-26", "--json")
    dia = [d["metadata"]["dia_id"] for d in json.loads(r.stdout)]
    assert "D1:3" in dia  # the annotated evidence turn
    r = run("search", "LGBTQ support group", "--user", "conv-30", "--json")
    assert all(d["user_id"] == "conv-30" for d in json.loads(r.stdout))


def test_errors_are_one_line_and_exit_2(run):
    r = run("search", "x", "--limit", "0")
    assert r.exit_code == 2 and "limit" in r.stderr
    r = run("add", "   ")
    assert r.exit_code == 2 and "CONTENT:" in r.stderr


def test_embedded_server_is_shared_by_processes_and_stopped_by_cli():
    home = Path(tempfile.mkdtemp(prefix="cortex-pg-cli-"))
    env = {**os.environ, "CORTEX_PG_HOME": str(home), "CORTEX_PG_EMBEDDER": "hashing"}
    env.pop("DATABASE_URL", None)
    cli = [sys.executable, "-m", "cortex_pg"]
    try:
        out = subprocess.run(
            [*cli, "add", "written by process one", "-u", "p"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        nid = out.stdout.strip()
        assert embedded.is_running(home)  # left running for other processes
        out = subprocess.run(
            [*cli, "search", "process one", "-u", "p", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout)[0]["id"] == nid
        out = subprocess.run([*cli, "db", "stop"], env=env, capture_output=True, text=True, check=True)
        assert "stopped" in out.stdout
        assert not embedded.is_running(home)
        # started again on demand, data intact
        out = subprocess.run(
            [*cli, "search", "process one", "-u", "p", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout)[0]["id"] == nid
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def test_cli_errors_name_the_flag_not_the_parameter(run):
    r = run("search", "x", "--from", "the day after never")
    assert r.exit_code == 2 and "--from" in r.stderr and "date_from" not in r.stderr
    r = run("search", "x", "--from", "2024-05-01", "--to", "2024-04-01")
    assert r.exit_code == 2 and "--to: must be later than --from" in r.stderr and "date_" not in r.stderr
    r = run("search", "x", "--source", "both")
    assert r.exit_code == 2 and "--source" in r.stderr and "memory_source" not in r.stderr
    r = run("ingest", __file__, "--format", "csv")
    assert r.exit_code == 2 and "--format" in r.stderr


def test_cli_item_errors_name_the_flag_and_the_item_typed(run):
    """An item of --tags / --keywords is named by the flag and its place among the commas
    (counted from 0, blanks too), as a count error names the flag."""
    long = "k" * 256
    r = run("add", "x", "--tags", f"a,{long}")
    assert r.exit_code == 2 and r.stderr.startswith("error: --tags[1]: longer than 255"), r.stderr
    r = run("add", "x", "--keywords", f"{long},b")
    assert r.exit_code == 2 and r.stderr.startswith("error: --keywords[0]: longer than 255"), r.stderr
    r = run("add", "x", "--tags", f"a,,{long}")  # the third item typed, after a blank one
    assert r.exit_code == 2 and r.stderr.startswith("error: --tags[2]: "), r.stderr
    r = run("add", "x", "--tags", ",".join(f"t{i}" for i in range(1001)))
    assert r.exit_code == 2 and r.stderr.startswith("error: --tags: more than 1,000"), r.stderr
    r = run("add", "x", "--tags", "a,,b, ,a", "--user", "items")  # blanks and repeats dropped
    nid = r.stdout.strip()
    assert r.exit_code == 0 and json.loads(run("get", nid, "--json").stdout)["tags"] == ["a", "b"]


def test_search_table_labels_notes_in_both_tiers(run):
    run("add", "The boiler is serviced every October", "--user", "tiers")
    run("add", "Only in long-term memory: the attic key", "--user", "tiers", "--no-stm")
    r = run("search", "boiler serviced", "--user", "tiers", "--limit", "1")
    assert r.exit_code == 0 and "ltm+stm" in r.stdout
    r = run("search", "attic key", "--user", "tiers", "--limit", "1")
    assert "ltm+stm" not in r.stdout.split("tier:")[0] and "│ ltm " in r.stdout


def test_stats_and_db_url_say_where_the_data_is(run, db_url):
    r = run("stats", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["data"].startswith("external database")
    r = run("stats")
    assert "data" in r.stdout and "external database" in r.stdout


def test_cli_ingest_extracts_entities_by_default(run, tmp_path):
    f = tmp_path / "people.txt"
    f.write_text("Alice works at Acme Corp.\n\nBob met Alice in Paris.\n")
    assert run("ingest", str(f), "--user", "ents").exit_code == 0
    r = run("entities", "--user", "ents")
    assert r.exit_code == 0 and "Alice" in r.stdout and "Acme" in r.stdout
    assert run("ingest", str(f), "--user", "plain", "--no-entities").exit_code == 0
    r = run("entities", "--user", "plain")
    assert r.exit_code == 0 and "no entities for user 'plain'" in r.stdout and "--no-entities" in r.stdout


def test_db_stop_all_stops_the_servers_in_the_registry(tmp_path):
    homes = [Path(tempfile.mkdtemp(prefix="cortex-pg-stop-all-")) for _ in range(2)]
    env = {**os.environ, "CORTEX_PG_EMBEDDER": "hashing", "CORTEX_PG_STATE_DIR": str(tmp_path / "state")}
    env.pop("DATABASE_URL", None)
    cli = [sys.executable, "-m", "cortex_pg"]
    try:
        for home in homes:
            out = subprocess.run(
                [*cli, "--home", str(home), "db", "url"], env=env, capture_output=True, text=True, check=True
            )
            assert out.stdout.startswith("postgresql+psycopg://") and f"data: {home}" in out.stderr
            assert embedded.is_running(home)
        registry = (tmp_path / "state" / "servers").read_text().splitlines()
        assert registry == [str(h) for h in homes]
        out = subprocess.run(
            [*cli, "db", "stop", "--all"], env=env, capture_output=True, text=True, check=True
        )
        assert all(f"stopped: {h}" in out.stdout for h in homes)
        assert not any(embedded.is_running(h) for h in homes)
    finally:
        for home in homes:
            embedded.stop(home)
            shutil.rmtree(home, ignore_errors=True)


def test_reembed_refuses_a_bad_batch_size_before_it_prepares_anything(run, db_url):
    from sqlalchemy import create_engine, text

    r = run("reembed", "--model", "minilm", "--batch-size", "0")
    assert r.exit_code == 2 and "--batch-size" in r.stderr
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        models = conn.execute(text("SELECT model FROM cortex.embedding_models")).scalars().all()
    engine.dispose()
    assert "all-MiniLM-L6-v2" not in models
