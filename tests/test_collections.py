"""Smart collections on a mixed corpus: prefix counts, creation at the threshold, the
anti-fragmentation rule, search with collections, tenants, and a worker killed mid-refresh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.collections import keyword_path, list_collections
from cortex_pg.collections.repository import discover
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.evolution import Worker
from cortex_pg.store import MemoryStore
from cortex_pg.store.rows import vector_literal
from tests.helpers.mixed_corpus import CORPUS, WORK, WORKOUT

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2024, 6, 1, 12, tzinfo=UTC)


def counts(store, user: str) -> dict[str, int]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT path, note_count FROM cortex.category_counts WHERE user_id = :u"), {"u": user}
        ).all()
    return {r.path: r.note_count for r in rows}


def collections(store, user: str) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {c.path: c.memory_count for c in list_collections(conn, user)}


def run_jobs(store) -> int:
    return Worker(store, listen=False).process_available()


def add_corpus(store, user: str, corpus=CORPUS) -> list[str]:
    ids = []
    for i, (content, category) in enumerate(corpus):
        ids.append(
            store.add(content, user_id=user, category=category, time=NOW - timedelta(days=i % 40, hours=i))
        )
    return ids


def test_prefix_counts_follow_writes_by_whole_segments(store):
    ids = add_corpus(store, "u")
    c = counts(store, "u")
    assert c["work"] == c["work.programming"] == len(WORK)
    assert c["workout"] == c["workout.training"] == len(WORKOUT)  # "work" never counts "workout"
    assert c["hobbies"] == 22 and c["personal.health"] == 10
    store.update(ids[0], user_id="u", category="work.meetings")
    store.delete(ids[1], user_id="u")
    c = counts(store, "u")
    assert (c["work"], c["work.programming"], c["work.meetings"]) == (len(WORK) - 1, len(WORK) - 2, 1)
    # the $under filter matches whole segments too
    found = store.search(
        "workout run training performance",
        user_id="u",
        limit=50,
        where_filter={"category": {"$under": "work"}},
    )
    assert found and all(r.note.category.split(".")[0] == "work" for r in found)
    with pytest.raises(ValidationError) as exc:
        store.search("x", user_id="u", where_filter={"category": {"$under": "work..x"}})
    assert exc.value.field == "where_filter"
    with pytest.raises(ValidationError, match=r"\$under applies to a text column"):
        store.search("x", user_id="u", where_filter={"importance": {"$under": "work"}})


def test_collections_appear_at_the_threshold_and_not_before(store):
    for i in range(9):
        store.add(f"Car note number {i}: oil, tyres and brakes", user_id="t", category="hobbies.cars")
    run_jobs(store)
    assert collections(store, "t") == {}
    store.add("Car note number 9: oil, tyres and brakes", user_id="t", category="hobbies.cars")
    assert run_jobs(store) == 2  # "hobbies" and "hobbies.cars"
    assert collections(store, "t") == {"hobbies": 10, "hobbies.cars": 10}
    with store.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT description, query_helper, source, centroid IS NOT NULL AS has_centroid "
                "FROM cortex.collections WHERE user_id = 't' AND path = 'hobbies.cars'"
            )
        ).one()
    assert row.has_centroid and row.source == "offline" and row.description.startswith("hobbies.cars")
    # an 11th note does not refresh at once (grown < 1.5x and < +25, and under an hour)
    store.add("Car note number 10: oil", user_id="t", category="hobbies.cars")
    assert run_jobs(store) == 0


def test_discovery_skips_a_collection_that_holds_the_same_notes_as_its_descendant(store):
    for i in range(10):
        store.add(f"Car note number {i}: oil, tyres and brakes", user_id="d", category="hobbies.cars")
    run_jobs(store)
    assert collections(store, "d") == {"hobbies": 10, "hobbies.cars": 10}
    [vector] = store._query_vectors(["oil and tyres for my car"])
    with store.engine.connect() as conn:
        hits = discover(conn, "d", store.embedder.name, vector_literal(vector), min_similarity=-1.0, limit=4)
    assert [h.path for h in hits] == ["hobbies.cars"]  # "hobbies" holds the same 10 notes
    with store.engine.connect() as conn:  # a parent with notes of its own: a wider set
        conn.execute(
            text("UPDATE cortex.collections SET memory_count = 11 WHERE user_id = 'd' AND path = 'hobbies'")
        )
        hits = discover(conn, "d", store.embedder.name, vector_literal(vector), min_similarity=-1.0, limit=4)
    assert sorted(h.path for h in hits) == ["hobbies", "hobbies.cars"]


def test_anti_fragmentation_rule(store):
    for i in range(30):
        store.add(f"Programming task {i} about code", user_id="f", category="work.programming")
    for i in range(10):
        store.add(f"Meeting {i} about the roadmap", user_id="f", category="work.meetings")
    run_jobs(store)
    # work.meetings: 10 notes >= 10, but its parent has 40 >= 30 and 10 < 0.3 * 40
    assert set(collections(store, "f")) == {"work", "work.programming"}
    for i in range(10, 12):
        store.add(f"Meeting {i} about the roadmap", user_id="f", category="work.meetings")
    run_jobs(store)
    assert "work.meetings" not in collections(store, "f")  # 12 < 0.3 * 42
    store.add("Meeting 12 about the roadmap", user_id="f", category="work.meetings")
    run_jobs(store)
    assert collections(store, "f")["work.meetings"] == 13  # 13 >= 0.3 * 43


def test_min_notes_is_a_database_setting(store):
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL cortex.collection_min_notes = 3"))
        for i in range(3):
            conn.execute(
                text(
                    "INSERT INTO cortex.notes (id, user_id, content, category) "
                    "VALUES (gen_random_uuid(), 'm', :c, 'books.scifi')"
                ),
                {"c": f"book {i}"},
            )
        queued = conn.execute(
            text("SELECT count(*) FROM cortex.evolution_jobs WHERE user_id = 'm' AND kind = 'collection'")
        ).scalar_one()
    assert queued == 2


@pytest.mark.model
def test_search_with_collections_on_the_mixed_corpus(db_url, minilm):
    with MemoryStore.open(db_url, embedder=minilm, auto_migrate=False) as store:
        add_corpus(store, "alice")
        run_jobs(store)
        assert set(collections(store, "alice")) >= {"work", "work.programming", "workout", "hobbies.cars"}
        results = store.search(
            "performance optimization", user_id="alice", limit=5, collections=True, now=NOW
        )
        assert [r.note.category for r in results[:3]] == ["work.programming"] * 3
        top = results[0]
        assert top.search_strategy == "collection" and top.collection_name.startswith("work")
        assert top.composite_score == pytest.approx(0.3 * top.collection_similarity + 0.7 * top.score)
        assert all(r.composite_score >= s.composite_score for r, s in zip(results, results[1:], strict=False))
        assert len({r.id for r in results}) == len(results)
        # a date window filters collection results too
        start, end = NOW - timedelta(days=10), NOW - timedelta(days=2)
        windowed = store.search(
            "performance optimization", user_id="alice", limit=10, collections=True,
            date_from=start, date_to=end, now=NOW,
        )  # fmt: skip
        assert windowed and any(r.search_strategy == "collection" for r in windowed)
        assert all(start <= r.created_at < end for r in windowed)
        # another tenant with the same notes but no collections yet: only its own notes, no collection
        add_corpus(store, "bob", CORPUS[:5])
        other = store.search("performance optimization", user_id="bob", limit=10, collections=True, now=NOW)
        assert other and all(r.note.user_id == "bob" and r.search_strategy == "global" for r in other)
        with store.engine.connect() as conn:
            assert list_collections(conn, "bob") == []


def test_query_embedded_once_per_distinct_text(store):
    add_corpus(store, "e", [(f"car tyres brakes engine oil service {i}", "hobbies.cars") for i in range(12)])
    run_jobs(store)
    calls: list[list[str]] = []
    embed = store.embedder.embed

    def counting(texts):
        calls.append(list(texts))
        return embed(texts)

    store.embedder.embed = counting  # type: ignore[method-assign]
    results = store.search("car tyres brakes engine oil", user_id="e", limit=5, collections=True)
    embedded = [t for batch in calls for t in batch]
    assert results and len(embedded) == len(set(embedded))
    assert any(r.search_strategy == "collection" for r in results)
    assert any(r.query_enhanced for r in results) and len(embedded) == 2  # the query and its enhanced form


def test_offline_categories_keyword_path_and_nearest_collection(db_url, monkeypatch):
    from cortex_pg import AgenticMemorySystem

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=False
    )
    try:
        a = system.add_note(
            "Quantum entanglement links particles", user_id="k", keywords=["Quantum physics", "entanglement"]
        )
        assert (
            system.read(a).category
            == "quantum_physics.entanglement"
            == keyword_path(["Quantum physics", "entanglement"])
        )
        b = system.add_note(
            "Quantum entanglement links particles", user_id="k2", keywords=["Quantum physics", "entanglement"]
        )
        assert system.read(b).category == system.read(a).category  # stable for the same text
        for i in range(10):  # a collection "hobbies.cars" of nearly the same text
            system.add_note(f"car tyres brakes engine oil {i}", user_id="k", category="hobbies.cars")
        assert "hobbies.cars" in collections(system.store, "k")
        near = system.add_note("car tyres brakes engine oil", user_id="k", keywords=["zzz"])
        assert system.read(near).category in ("hobbies", "hobbies.cars")  # nearest centroid, cosine >= 0.5
    finally:
        system.shutdown()


def test_offline_category_takes_the_deepest_of_equally_near_collections(db_url, monkeypatch):
    """A prefix whose notes all lie in one child category ("hobbies" over "hobbies.cars") is a
    collection with the child's members and centroid; a note near both joins the child."""
    from cortex_pg import AgenticMemorySystem

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=False
    )
    try:
        for i in range(10):
            system.add_note(f"car tyres brakes engine oil {i}", user_id="k", category="hobbies.cars")
        assert collections(system.store, "k") == {"hobbies": 10, "hobbies.cars": 10}
        near = system.add_note("car tyres brakes engine oil", user_id="k", keywords=["zzz"])
        assert system.read(near).category == "hobbies.cars"
    finally:
        system.shutdown()


DOOMED = """
import sys, time
from pathlib import Path
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.evolution import Worker
from cortex_pg.store import MemoryStore

url, marker = sys.argv[1], Path(sys.argv[2])

def hold(job):  # the refreshed row is written, not committed: signal the test and wait to be killed
    marker.write_text(str(job.id))
    time.sleep(120)

store = MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
Worker(store, listen=False, before_commit=hold, name="doomed").run_one()
"""


def test_worker_killed_during_a_refresh_leaves_the_old_row(store, db_url, tmp_path):
    add_corpus(store, "r", [c for c in CORPUS if c[1] == "hobbies.cars"])
    run_jobs(store)
    read = "SELECT memory_count, refreshed_at, centroid::text AS c FROM cortex.collections WHERE user_id = 'r' AND path = 'hobbies.cars'"
    with store.engine.connect() as conn:
        before = conn.execute(text(read)).one()
    for i in range(30):  # grown past 1.5x; force the refresh (the hour has not passed)
        store.add(f"Extra car note {i} about wheels", user_id="r", category="hobbies.cars")
    with store.engine.begin() as conn:
        conn.execute(
            text("DELETE FROM cortex.evolution_jobs WHERE kind = 'collection' AND status = 'queued'")
        )
        assert conn.execute(text("SELECT cortex.enqueue_collection_job('r', 'hobbies.cars')")).scalar_one()
    marker = tmp_path / "taken"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", DOOMED, db_url, str(marker)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the worker did not take the job"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with store.engine.connect() as conn:
        assert conn.execute(text(read)).one() == before
        status = conn.execute(
            text(
                "SELECT status, locked_by FROM cortex.evolution_jobs WHERE kind = 'collection' AND collection_path = 'hobbies.cars' AND status <> 'done'"
            )
        ).one()
    assert status.status == "running" and status.locked_by.startswith("doomed")
    assert (
        Worker(store, listen=False, lock_timeout=0).process_available() >= 1
    )  # the lock counts as abandoned
    with store.engine.connect() as conn:
        after = conn.execute(text(read)).one()
    assert after.memory_count == before.memory_count + 30 and after.refreshed_at > before.refreshed_at


NO_EVOLUTION = {
    "should_evolve": False,
    "actions": [],
    "suggested_connections": [],
    "tags_to_update": [],
    "new_context_neighborhood": [],
    "new_tags_neighborhood": [],
    "merge_candidates": [],
}


def stub_llm(body):
    name = body["response_format"]["json_schema"]["name"]
    prompt = body["messages"][-1]["content"]
    if name == "content_analysis":
        python = "Python" in prompt.split("Content for analysis:")[-1]
        return {
            "keywords": ["python"] if python else ["fitness"],
            "context": "A note.",
            "tags": ["t"],
            "category": "Work.Programming.Python" if python else "personal.health.fitness",
        }
    if name == "collection_summary":
        return {"description": "Notes about " + prompt.split("'")[1], "query_helper": "python profiling"}
    if name == "collection_query":
        query = prompt.split("\n")[0].removeprefix("Search query: ")
        return {"relevant": "Collection: work" in prompt, "enhanced_query": query + " python profiling"}
    return NO_EVOLUTION


def test_llm_categories_collections_and_query_enhancement(db_url):
    from cortex_pg import AgenticMemorySystem
    from tests.helpers.openai_stub import OpenAIStub

    with OpenAIStub(chat=stub_llm) as stub:
        system = AgenticMemorySystem(
            database_url=db_url,
            embedder=HashingEmbedder(),
            api_key="sk-test",
            llm_base_url=stub.base_url,
            enable_smart_collections=True,
            enable_background_processing=False,
        )
        try:
            for i in range(10):
                system.add_note(f"Python service {i}: profiling the slow endpoint", user_id="llm")
                system.add_note(f"Fitness {i}: morning run and stretching", user_id="llm")
            found = collections(system.store, "llm")
            assert found == {
                "work": 10, "work.programming": 10, "work.programming.python": 10,
                "personal": 10, "personal.health": 10, "personal.health.fitness": 10,
            }  # fmt: skip
            with system.store.engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT DISTINCT source, description FROM cortex.collections WHERE path = 'work'")
                ).all()
            assert [(r.source, r.description) for r in rows] == [("llm", "Notes about work")]
            analysis = [
                r["body"]
                for r in stub.requests
                if r["body"].get("response_format", {}).get("json_schema", {}).get("name")
                == "content_analysis"
            ]
            assert "work.programming.python (1 notes)" in analysis[2]["messages"][-1]["content"]
            stub.requests.clear()
            results = system.search("slow endpoint", user_id="llm", limit=5)
            queries = [
                r
                for r in stub.requests
                if r["body"]["response_format"]["json_schema"]["name"] == "collection_query"
            ]
            assert 1 <= len(queries) <= 4
            via = [r for r in results if r["search_strategy"] == "collection"]
            assert via and all(r["collection_name"].startswith("work") and r["query_enhanced"] for r in via)
            assert all("Python service" in r["content"] for r in via)
            assert {"collection_similarity", "composite_score"} <= set(results[0])
        finally:
            system.shutdown()


def test_cli_lists_collections(store, db_url):
    from typer.testing import CliRunner

    from cortex_pg.cli import app

    def run(*args: str):
        return CliRunner().invoke(app, ["--embedder", "hashing", *args], env={"DATABASE_URL": db_url})

    ids = [store.add(f"Car note {i}: tyres", user_id="cli", category="hobbies.cars") for i in range(10)]
    r = run("collections", "--user", "cli")
    assert (
        r.exit_code == 0 and "no collections for user 'cli'" in r.stdout and "'hobbies' with 10" in r.stdout
    )
    run_jobs(store)
    r = run("collections", "--user", "cli")
    assert r.exit_code == 0 and "hobbies.cars" in r.stdout and "10" in r.stdout
    # the notes now beside the notes at the last refresh: three deleted since, no refresh yet
    for nid in ids[:3]:
        store.delete(nid, user_id="cli")
    with store.engine.connect() as conn:
        info = {c.path: (c.note_count, c.memory_count) for c in list_collections(conn, "cli")}
    assert info["hobbies.cars"] == (7, 10)
    row = next(
        line for line in run("collections", "--user", "cli").stdout.splitlines() if "hobbies.cars" in line
    )
    assert row.split("│")[2].strip() == "7" and row.split("│")[3].strip() == "10"
    assert "hobbies.cars" not in run("collections", "--user", "someone").stdout
    r = run("collections", "--user", " ")
    assert r.exit_code == 2 and "--user" in r.output
