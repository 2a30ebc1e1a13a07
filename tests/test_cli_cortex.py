"""``cortex-pg cortex``: the Prem Cortex CLI options; export -> clear -> import round-trips."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cortex_pg.cli import app
from cortex_pg.cli.cortex import split_chunks

TEXT = """Lyra Drake is a cartographer who maps desert canyons.

She met Mr. Maverick during a sandstorm in the desert; he guided her to an oasis.

""" + ("Long section about her maps. " * 120)


def test_split_chunks_overlaps_long_blocks_and_keeps_no_fragment():
    chunks = split_chunks(TEXT)
    assert chunks[0].text.startswith("Lyra Drake") and "She met Mr. Maverick" in chunks[0].text
    assert len(chunks) == 2 and all(400 <= len(c.text) <= 2000 + 400 for c in chunks)
    assert chunks[0].text[-50:] in chunks[1].text  # overlap
    # the original's section separator (three blank lines) always ends a chunk
    parted = split_chunks("A first section of some length. " * 20 + "\n\n\n\n" + "Another one. " * 40)
    assert len(parted) == 2 and parted[1].text.startswith("Another one.")


def test_cortex_cli_store_query_export_import_round_trip(db_url, tmp_path):
    runner = CliRunner()
    env = {"DATABASE_URL": db_url}
    src = tmp_path / "lyra.txt"
    src.write_text(TEXT)
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(["Who is Lyra Drake?", "Desert experience with Mr. Maverick"]))
    out1 = tmp_path / "run1"
    base = ["--embedder", "hashing", "cortex", "--user-id", "u1", "--session-id", "s1"]
    r = runner.invoke(
        app,
        [
            *base,
            "--input-file",
            str(src),
            "--queries-file",
            str(queries),
            "--query",
            "oasis",
            "--limit",
            "3",
            "--output-dir",
            str(out1),
        ],
        env=env,
    )
    assert r.exit_code == 0, r.output
    ltm = json.loads((out1 / "ltm_memories.json").read_text())
    stm = json.loads((out1 / "stm_memories.json").read_text())
    results1 = json.loads((out1 / "full_query_results.json").read_text())
    # near-identical chunks may be merged by evolution (offline heuristic, cosine >= 0.95)
    assert 1 <= len(ltm) <= len(split_chunks(TEXT)) and stm
    assert set(results1) == {"Who is Lyra Drake?", "Desert experience with Mr. Maverick", "oasis"}
    assert {"stm", "ltm", "all"} == set(results1["oasis"])
    assert all(
        set(m) >= {"id", "content", "context", "tags", "keywords", "timestamp", "score", "memory_tier"}
        for m in ltm
    )

    # clear, import, and the same searches return the same ids
    from cortex_pg.store import MemoryStore

    store = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
    assert store.delete_where(user_id="u1") >= len(ltm)  # merged-away notes are kept for history
    store.close()
    out2 = tmp_path / "run2"
    r = runner.invoke(
        app,
        [
            *base,
            "--ltm-json",
            str(out1 / "ltm_memories.json"),
            "--stm-json",
            str(out1 / "stm_memories.json"),
            "--queries-file",
            str(queries),
            "--query",
            "oasis",
            "--limit",
            "3",
            "--output-dir",
            str(out2),
        ],
        env=env,
    )
    assert r.exit_code == 0, r.output
    results2 = json.loads((out2 / "full_query_results.json").read_text())
    for q in results1:
        for src in ("ltm", "all"):
            assert [x["id"] for x in results2[q][src]] == [x["id"] for x in results1[q][src]], (q, src)
    assert {m["id"] for m in json.loads((out2 / "ltm_memories.json").read_text())} == {m["id"] for m in ltm}


def test_legacy_timestamps_and_bad_files(db_url, tmp_path):
    runner = CliRunner()
    legacy = tmp_path / "ltm.json"
    legacy.write_text(
        json.dumps(
            [
                {
                    "id": "3f2b8c1e-8a51-4c1e-9f7e-2d9f1f0a1b2c",
                    "content": "old memory",
                    "context": "General",
                    "tags": [],
                    "keywords": [],
                    "timestamp": "202506130646",
                    "score": -0.77,
                    "memory_tier": "ltm",
                }
            ]
        )
    )
    r = runner.invoke(
        app,
        [
            "--embedder",
            "hashing",
            "cortex",
            "--ltm-json",
            str(legacy),
            "--query",
            "old memory",
            "--skip-storage",
        ],
        env={"DATABASE_URL": db_url},
    )
    assert r.exit_code == 0, r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = runner.invoke(
        app, ["--embedder", "hashing", "cortex", "--ltm-json", str(bad)], env={"DATABASE_URL": db_url}
    )
    assert r.exit_code == 2


def test_import_keeps_links_importance_and_is_validated_first(db_url, tmp_path):
    from cortex_pg.store import MemoryStore

    runner = CliRunner()
    env = {"DATABASE_URL": db_url}
    store = MemoryStore.open(db_url, embedder="hashing", auto_migrate=False)
    a = store.add("Apples are red", user_id="u1", session_id="s1", importance=0.95, to_stm=False)
    b = store.add("Bananas are yellow", user_id="u1", session_id="s1", to_stm=False)
    store.update(a, user_id="u1", links={b: {"type": "contradicts", "strength": 0.9, "reason": "hand-made"}})
    out = tmp_path / "out"
    r = runner.invoke(
        app,
        [
            "--embedder",
            "hashing",
            "cortex",
            "--user-id",
            "u1",
            "--session-id",
            "s1",
            "--skip-storage",
            "--output-dir",
            str(out),
        ],
        env=env,
    )
    assert r.exit_code == 0, r.output
    assert store.delete_where(user_id="u1") == 2
    bad = tmp_path / "bad.json"
    good = json.loads((out / "ltm_memories.json").read_text())
    bad.write_text(json.dumps([good[0], {"content": "x", "timestamp": "not a time"}]))
    r = runner.invoke(app, ["--embedder", "hashing", "cortex", "--ltm-json", str(bad)], env=env)
    assert r.exit_code == 2 and store.count(user_id="u1") == 0  # validated before anything was written
    for broken in ([{"no": "content"}], ["x"], {"a": 1}):
        bad.write_text(json.dumps(broken))
        r = runner.invoke(app, ["--embedder", "hashing", "cortex", "--ltm-json", str(bad)], env=env)
        assert r.exit_code == 2, broken
    r = runner.invoke(
        app, ["--embedder", "hashing", "cortex", "--ltm-json", str(out / "ltm_memories.json")], env=env
    )
    assert r.exit_code == 0, r.output
    assert store.get(a, user_id="u1").importance == pytest.approx(0.95)
    from cortex_pg.store.links import get_links

    assert get_links(store, a)[b]["type"] == "contradicts"
    assert get_links(store, b)[a]["type"] == "contradicted_by"
    assert store.count(user_id="u1", memory_source="stm") == 0  # LTM import does not fill STM
    r = runner.invoke(
        app, ["--embedder", "hashing", "cortex", "--input-file", str(tmp_path / "missing.txt")], env=env
    )
    assert r.exit_code == 2
    store.close()


def test_files_with_a_byte_order_mark_are_read_as_without_it(db_url, tmp_path):
    runner = CliRunner()
    env = {"DATABASE_URL": db_url}
    src = tmp_path / "guide.md"
    src.write_text("# Field guide\n\n" + TEXT, encoding="utf-8-sig")
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(["Who is Lyra Drake?"]), encoding="utf-8-sig")
    out = tmp_path / "run"
    base = ["--embedder", "hashing", "cortex", "--user-id", "bom", "--session-id", "s1"]
    args = [*base, "--input-file", str(src), "--queries-file", str(queries), "--output-dir", str(out)]
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 0, r.output
    ltm = json.loads((out / "ltm_memories.json").read_text())
    first = min(ltm, key=lambda m: m["content"].find("Lyra Drake") < 0)
    assert first["content"].startswith("# Field guide") and first["context"] == "Field guide"
    assert not any("\ufeff" in m["content"] for m in ltm)
    assert list(json.loads((out / "full_query_results.json").read_text())) == ["Who is Lyra Drake?"]
