"""The Prem Cortex API (AgenticMemorySystem) on cortex-pg: the README's usage examples, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from cortex_pg import AgenticMemorySystem, ImmutableFieldError, ValidationError
from cortex_pg.embeddings import HashingEmbedder
from tests.helpers.openai_stub import OpenAIStub

NOW = datetime(2024, 3, 20, 15, 0, tzinfo=UTC)


@contextmanager
def _llm_system(db_url, chat):  # noqa: ANN001, ANN202
    """An AgenticMemorySystem whose LLM is an OpenAI-compatible stub answering ``chat(body)``:
    (system, stub), the system shut down on exit."""
    with OpenAIStub(chat=chat) as stub:
        system = AgenticMemorySystem(
            database_url=db_url,
            embedder=HashingEmbedder(),
            api_key="sk-test",
            llm_base_url=stub.base_url,
            enable_background_processing=False,
        )
        try:
            yield system, stub
        finally:
            system.shutdown()


@pytest.fixture
def ams(db_url, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=False
    )
    yield system
    system.shutdown()


@pytest.fixture
def readme_system(db_url, minilm, monkeypatch):
    """The README's four notes, times relative to NOW."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    system = AgenticMemorySystem(
        database_url=db_url, embedder=minilm, enable_background_processing=False, stm_capacity=10
    )
    system.add_note(
        "User prefers TypeScript over JavaScript for new projects",
        user_id="user_123",
        time=(NOW - timedelta(hours=1)).isoformat(),
    )
    system.add_note(
        "Discussed API rate limiting strategies using Redis",
        user_id="user_123",
        time=(NOW - timedelta(days=1)).isoformat(),
    )
    system.add_note(
        "Team decided to migrate from REST to GraphQL",
        user_id="user_123",
        time=(NOW - timedelta(days=7)).isoformat(),
    )
    system.add_note(
        "Q1 planning: Focus on performance optimization", user_id="user_123", time="2024-01-15T10:00:00+00:00"
    )
    yield system
    system.shutdown()


@pytest.mark.model
def test_strategy_1_pure_semantic(readme_system):
    results = readme_system.search(
        "programming preferences", user_id="user_123", memory_source="ltm", limit=3, now=NOW
    )
    assert results[0]["content"] == "User prefers TypeScript over JavaScript for new projects"
    assert "temporal_weighted" not in results[0]


@pytest.mark.model
def test_strategy_2_temporal_weight(readme_system):
    results = readme_system.search(
        "what did we discuss yesterday?",
        user_id="user_123",
        memory_source="ltm",
        temporal_weight=0.7,
        limit=3,
        now=NOW,
    )
    top = results[0]
    assert top["content"] == "Discussed API rate limiting strategies using Redis"
    assert top["temporal_weighted"] is True
    assert top["recency_score"] == pytest.approx(2.718281828 ** (-1 / 7), rel=1e-4)


@pytest.mark.model
def test_strategy_3_last_week(readme_system):
    # "last week" is the 7 days up to now: the note of an hour ago is in it
    results = readme_system.search(
        "team decisions",
        user_id="user_123",
        memory_source="ltm",
        date_range="last week",
        temporal_weight=0.0,
        limit=3,
        now=NOW,
    )
    contents = [r["content"] for r in results]
    assert contents[0] == "Team decided to migrate from REST to GraphQL"
    assert set(contents) == {
        "Team decided to migrate from REST to GraphQL",
        "Discussed API rate limiting strategies using Redis",
        "User prefers TypeScript over JavaScript for new projects",
    }
    # with no temporal_weight the date_range turns recency on (0.7): the week-old note no longer
    # leads (its recency exp(-7/7) = 0.37 against 0.87 and 0.99 for the others)
    auto = readme_system.search(
        "team decisions", user_id="user_123", memory_source="ltm", date_range="last week", limit=3, now=NOW
    )
    assert auto[0]["content"] != "Team decided to migrate from REST to GraphQL"
    assert auto[0]["temporal_weighted"] is True


@pytest.mark.model
def test_strategy_4_month(readme_system):
    results = readme_system.search(
        "planning", user_id="user_123", memory_source="ltm", date_range="2024-01", limit=3, now=NOW
    )
    assert [r["content"] for r in results] == ["Q1 planning: Focus on performance optimization"]


@pytest.mark.model
def test_date_range_filters_stm_too(readme_system):
    # the original skips STM when a date_range is given; we filter it
    results = readme_system.search(
        "planning", user_id="user_123", memory_source="stm", date_range="2024-01", limit=3, now=NOW
    )
    assert [r["content"] for r in results] == ["Q1 planning: Focus on performance optimization"]
    assert results[0]["memory_tier"] == "stm"


@pytest.mark.model
def test_auto_temporal_weight(readme_system):
    plain = readme_system.search(
        "recent programming preferences", user_id="user_123", limit=3, now=NOW, temporal_weight=None
    )
    assert plain[0]["temporal_weighted"] is True
    # auto-detection is the default; an explicit 0.0 is pure relevance
    default = readme_system.search("what did we discuss yesterday?", user_id="user_123", limit=3, now=NOW)
    assert default[0]["temporal_weighted"] is True
    pure = readme_system.search(
        "what did we discuss yesterday?", user_id="user_123", limit=3, now=NOW, temporal_weight=0.0
    )
    assert "temporal_weighted" not in pure[0]
    assert "temporal_weighted" not in readme_system.search("programming", user_id="user_123", now=NOW)[0]


def test_multi_user_and_no_widening(ams):
    nid = ams.add_note(
        "User prefers dark mode for all interfaces", user_id="user123", session_id="session456"
    )
    found = ams.search_memory("user interface preferences", user_id="user123", session_id="session456")
    assert [r["id"] for r in found] == [nid]
    assert found[0]["user_id"] == "user123" and found[0]["session_id"] == "session456"
    assert ams.search_memory("user interface preferences", user_id="someone_else") == []
    assert ams.search_memory("user interface preferences", user_id="user123", session_id="other") == []


@pytest.mark.model
def test_context_aware_search(db_url, minilm):
    system = AgenticMemorySystem(database_url=db_url, embedder=minilm, enable_background_processing=False)
    try:
        system.add_note("The model overfits the training data; add dropout and weight decay.", user_id="c")
        system.add_note("The fashion model walked the runway in Milan.", user_id="c")
        with_ctx = system.search_memory(
            "machine learning models", context="machine learning research", limit=10, user_id="c"
        )
        assert "context_score" in with_ctx[0]
        assert with_ctx[0]["content"].startswith("The model overfits")
        r = with_ctx[0]
        blended = r["relevance_score"]  # temporal weight 0: blended = relevance
        assert r["score"] == pytest.approx(0.3 * blended + 0.7 * r["context_score"], rel=1e-6)
        no_post = system.search_memory(
            "machine learning models", context="Computer Science", apply_postprocessing=False, user_id="c"
        )
        assert "context_score" not in no_post[0]
    finally:
        system.shutdown()


def test_where_filter_on_tags(ams):
    a = ams.add_note("Dijkstra finds shortest paths", tags=["algorithms", "graphs"], user_id="f")
    ams.add_note("Gradient descent with momentum", tags=["optimization"], user_id="f")
    results = ams.search_memory(
        "optimization techniques", where_filter={"tags": {"$contains": "algorithms"}}, user_id="f"
    )
    assert [r["id"] for r in results] == [a]
    for source in ("stm", "ltm"):
        results = ams.search(
            "paths", where_filter={"tags": {"$contains": "algorithms"}}, user_id="f", memory_source=source
        )
        assert [r["id"] for r in results] == [a] and results[0]["memory_tier"] == source


def test_result_shape_and_access_counts(ams):
    nid = ams.add_note(
        "The sky is blue because of Rayleigh scattering.",
        context="Science",
        tags=["physics", "optics"],
        user_id="1",
        source="book",
        page=12,
    )
    r = ams.search("why is the sky blue", user_id="1")[0]
    for key in (
        "id",
        "content",
        "keywords",
        "tags",
        "context",
        "category",
        "timestamp",
        "last_accessed",
        "links",
        "retrieval_count",
        "evolution_history",
        "user_id",
        "session_id",
        "score",
        "distance",
        "memory_tier",
        "semantic_score",
        "recency_score",
    ):
        assert key in r, key
    assert "embedding" not in r
    assert r["user_id"] == "1" and isinstance(r["user_id"], str)
    assert r["metadata"] == {"source": "book", "page": 12}  # unknown kwargs are kept
    assert r["context"] == "Science" and r["tags"] == ["physics", "optics"]
    assert r["retrieval_count"] == 1
    note = ams.read(nid)
    assert note.retrieval_count == 2
    assert ams.read(nid, user_id="1").retrieval_count == 3
    assert ams.read(nid, user_id="2") is None


def test_light_and_offline_deep_processing(ams):
    nid = ams.add_note("Neural networks are computational systems inspired by the human brain.", user_id="p")
    note = ams.read(nid)
    assert note.keywords and len(note.keywords) <= 5
    assert note.context == "General"
    assert note.tags  # offline: tags from the keywords
    kept = ams.add_note(
        "Transformers use attention",
        keywords=["attention"],
        context="Deep learning",
        tags=["nlp"],
        user_id="p",
    )
    note = ams.read(kept)
    assert note.keywords == ["attention"] and note.context == "Deep learning" and note.tags == ["nlp"]


def test_llm_analysis_over_http_and_fallback(db_url):
    answers = iter(
        [
            {
                "keywords": ["neural networks", "brain"],
                "context": "Intro to neural networks.",
                "tags": ["ai", "ml", "education"],
            },
            "this is not json",
            "still not json",
            "never json",
        ]
    )
    with _llm_system(db_url, lambda body: next(answers)) as (system, stub):
        a = system.add_note("Neural networks are inspired by the brain.", user_id="l", tags=["mine"])
        note = system.read(a)
        assert note.keywords == ["neural networks", "brain"]
        assert note.context == "Intro to neural networks."
        assert note.tags == ["mine"]  # user-supplied fields are kept
        chat = [r for r in stub.requests if r["path"].endswith("/chat/completions")]
        assert chat[0]["body"]["response_format"]["type"] == "json_schema"
        # malformed answers (3 attempts) degrade to the offline path; the note is kept
        b = system.add_note("Gradient descent minimises a loss function step by step.", user_id="l")
        note = system.read(b)
        assert note.content.startswith("Gradient descent") and note.keywords and note.context == "General"


def _jobs(system, user_id):
    with system.store.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT kind, status, attempts, error FROM cortex.evolution_jobs WHERE user_id = :u ORDER BY id"
            ),
            {"u": user_id},
        ).all()


@pytest.mark.parametrize(
    "answer, why",
    [
        ({"keywords": ["cat"], "context": "Ctx\u0000bad", "tags": ["pets"]}, "NUL"),
        ({"keywords": ["cat"], "context": "Pets.", "tags": ["bad\ud800"]}, "lone surrogate"),
        ({"keywords": ["cat"], "context": "Pets.", "tags": ["bad\u0001tag"]}, "control character"),
        ({"keywords": ["c\u0000t"], "context": "Pets.", "tags": ["pets"]}, "NUL"),
    ],
    ids=["nul-context", "surrogate-tag", "control-tag", "nul-keyword"],
)
def test_an_llm_analysis_the_store_cannot_hold_falls_back_to_the_offline_path(db_url, caplog, answer, why):
    """A schema-valid answer whose strings PostgreSQL text (or the store's rules for the field)
    cannot hold is a malformed answer: the offline analysis, a log line saying why, the job done
    (it went back to the queue with a ValidationError before, and the note stayed unprocessed)."""
    with _llm_system(db_url, lambda body: answer) as (system, stub):
        content = "Maya adopted a grey cat called Pixel from the shelter."
        with caplog.at_level("WARNING"):
            nid = system.add_note(content, user_id="bad-llm")
        offline = system.analyzer.offline(content)
        note = system.read(nid, user_id="bad-llm")
        assert note.keywords == offline["keywords"] and note.tags == offline["tags"] and note.tags
        assert note.context == "General" and note.category is not None
        assert _jobs(system, "bad-llm") == [("prem", "done", 1, None)]
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert "content analysis falls back to the offline path" in logged and why in logged


EVOLUTION_ANSWER = {
    "should_evolve": True,
    "actions": ["strengthen", "update_neighbor"],
    "suggested_connections": [{"id": "0", "type": "supports", "strength": 0.99, "reason": "same report"}],
    "tags_to_update": ["sales"],
    "new_context_neighborhood": ["Sales"],
    "new_tags_neighborhood": [["sales"]],
    "merge_candidates": [],
}


@pytest.mark.parametrize(
    "bad, why",
    [
        ({"tags_to_update": ["sa\u0000les"]}, "NUL"),
        ({"new_context_neighborhood": ["S\ud800ales"]}, "lone surrogate"),
        ({"new_tags_neighborhood": [["sa\u0007les"]]}, "control character"),
        (
            {
                "suggested_connections": [
                    {"id": "0", "type": "supports", "strength": 0.99, "reason": "r\u0000"}
                ]
            },
            "NUL",
        ),
    ],
    ids=["nul-tag", "surrogate-context", "control-neighbour-tag", "nul-reason"],
)
def test_an_llm_evolution_decision_the_store_cannot_hold_falls_back_to_the_offline_heuristic(
    db_url, caplog, bad, why
):
    """A schema-valid decision holding strings the store cannot hold is a malformed answer:
    the offline heuristic decides, a log line says why, the job is done (it failed with a
    DatabaseError or a UnicodeEncodeError before, and no link was made)."""

    def chat(body):
        if body["response_format"]["json_schema"]["name"] == "evolution_decision":
            return {**EVOLUTION_ANSWER, **bad}
        return {"keywords": ["sales report"], "context": "Sales.", "tags": ["sales"]}

    with _llm_system(db_url, chat) as (system, stub):
        a = system.add_note(
            "The quarterly sales report shows revenue growth in Europe", user_id="E", session_id="s"
        )
        with caplog.at_level("WARNING"):
            b = system.add_note(
                "The quarterly sales report shows revenue growth in Europe and Asia",
                user_id="E",
                session_id="s",
            )
        assert any(
            r["body"]["response_format"]["json_schema"]["name"] == "evolution_decision"
            for r in stub.requests
            if r["path"].endswith("/chat/completions")
        )
        # the offline heuristic's link (cosine 0.928), not the LLM's "supports" 0.99
        link = system.read(b, user_id="E").links[a]
        assert link["type"] == "related" and link["strength"] == pytest.approx(0.9278, abs=1e-3)
        assert system.read(a, user_id="E").context == "Sales."  # the neighbour is not rewritten
        assert system.read(b, user_id="E").tags == ["sales"]
        assert [j[:3] for j in _jobs(system, "E")] == [("prem", "done", 1), ("prem", "done", 1)]
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert "evolution decision falls back to the offline heuristic" in logged and why in logged


def test_background_processing_fills_fields_later(db_url):
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=True
    )
    try:
        nid = system.add_note("Pepper the beagle chewed a shoe on her first night.", user_id="b")
        assert system.read(nid) is not None  # in the store at once
        system.wait()
        assert system.read(nid).tags
    finally:
        system.shutdown()


def test_update_delete_clear(ams):
    nid = ams.add_note("first text", user_id="u", session_id="s")
    assert ams.update(nid, content="second text", tags=["t"], mood="happy") is True
    note = ams.read(nid)
    assert note.content == "second text" and note.tags == ["t"] and note.metadata["mood"] == "happy"
    assert note.keywords and "first" not in " ".join(note.keywords)  # keywords follow the new text
    assert ams.update("00000000-0000-0000-0000-000000000000", content="x") is False
    # another user's update or delete finds nothing there, and does not learn that the note exists
    assert ams.update(nid, user_id="someone-else", content="hijacked") is False
    assert ams.delete(nid, user_id="someone-else") is False
    assert ams.read(nid).content == "second text"
    assert ams.update(nid, user_id="u", context="a scoped update") is True
    assert ams.read(nid).context == "a scoped update"
    with pytest.raises(ImmutableFieldError):
        ams.update(nid, session_id="another-session")
    # one time under two names is an error, on add and on update
    with pytest.raises(ValidationError) as err:
        ams.add_note("two times", user_id="u", time="2024-01-01T00:00:00Z", timestamp="2025-01-01T00:00:00Z")
    assert err.value.field == "timestamp"
    with pytest.raises(ValidationError):
        ams.update(nid, time="2024-01-01T00:00:00Z", timestamp="2025-01-01T00:00:00Z")
    assert ams.update(nid, timestamp="2024-01-01T00:00:00Z") is True
    assert ams.read(nid).timestamp.startswith("2024-01-01")
    other = ams.add_note("another", user_id="u", session_id="t")
    assert ams.clear_stm(user_id="u", session_id="s") == 1
    assert ams.search("second text", user_id="u", session_id="s", memory_source="stm") == []
    assert ams.search("second text", user_id="u", memory_source="ltm")[0]["id"] == nid
    assert ams.clear_ltm(user_id="u") == 2
    assert ams.delete(other) is True  # still in STM
    assert ams.delete(other) is False


def test_a_bad_user_id_is_an_error_not_a_missing_note(ams):
    nid = ams.add_note("a note of u", user_id="u")
    for call in (
        lambda: ams.read(nid, user_id=123),
        lambda: ams.read(nid, user_id="a\x00"),
        lambda: ams.read(nid, user_id="u", session_id=["s"]),
        lambda: ams.update(nid, user_id=123, content="x"),
        lambda: ams.delete(nid, user_id=["u"]),
    ):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field in ("user_id", "session_id")
    assert ams.read(nid).content == "a note of u"
    # a memory_id that is not a note id is no note, as in the original
    assert ams.read("not-an-id") is None
    assert ams.update("not-an-id", content="x") is False and ams.delete("not-an-id") is False
    with pytest.raises(ValidationError) as err:
        ams.find_related_memories("note", k=0)
    assert err.value.field == "k"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"date_range": "the other day, maybe"}, "date_range"),
        ({"memory_source": "cache"}, "memory_source"),
        ({"limit": 0}, "limit"),
        ({"temporal_weight": 2}, "temporal_weight"),
        ({"where_filter": {"tags": {"$regex": "x"}}}, "where_filter"),
    ],
)
def test_bad_search_input(ams, kwargs, field):
    with pytest.raises(ValidationError) as err:
        ams.search("anything", **kwargs)
    assert err.value.field == field


def test_other_process_sees_reads_updates_and_deletes(ams, db_url):
    code = f"""
import json
from cortex_pg import AgenticMemorySystem
from cortex_pg.embeddings import HashingEmbedder
s = AgenticMemorySystem(database_url={db_url!r}, embedder=HashingEmbedder(), enable_background_processing=False)
print(json.dumps(s.add_note("written by another process", user_id="x", tags=["ipc"])))
s.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    nid = json.loads(out.stdout.strip().splitlines()[-1])
    assert ams.read(nid).content == "written by another process"
    assert ams.search("another process", user_id="x")[0]["id"] == nid
    assert ams.update(nid, tags=["ipc", "seen"]) is True
    assert ams.read(nid).tags == ["ipc", "seen"]
    assert ams.delete(nid) is True
    assert ams.read(nid) is None


def test_find_related_memories_and_analyze(ams):
    ids = [ams.add_note(t, user_id="r") for t in ("cats purr", "dogs bark", "cats sleep a lot")]
    text_block, found = ams.find_related_memories("cats", k=2, user_id="r")
    assert len(found) == 2 and set(found) <= set(ids)
    assert text_block.startswith("memory index:0\tmemory id:")
    analysis = ams.analyze_content("Kubernetes schedules containers onto nodes.")
    assert set(analysis) == {"keywords", "context", "tags"}


def test_links_by_hand_are_reciprocal_and_returned(ams):
    a = ams.add_note("Photosynthesis turns light into chemical energy", user_id="k")
    b = ams.add_note("Chlorophyll absorbs red and blue light", user_id="k")
    assert ams.update(a, links={b: {"type": "supports", "strength": 0.85, "reason": "same process"}})
    assert ams.read(a).links[b] == {
        "type": "supports",
        "strength": pytest.approx(0.85),
        "reason": "same process",
    }
    back = ams.read(b).links[a]
    assert back["type"] == "supported_by" and back["strength"] == pytest.approx(0.765)
    results = ams.search("photosynthesis energy", user_id="k", limit=1, include_links=True)
    assert results[0]["id"] == a and results[0]["is_linked"] is False
    linked = [r for r in results if r["is_linked"]]
    assert [r["id"] for r in linked] == [b] and linked[0]["relationship_type"] == "supports"


def test_inline_evolution_links_near_duplicates(ams):
    a = ams.add_note("The quarterly sales report shows revenue growth in Europe", user_id="e", session_id="s")
    b = ams.add_note(
        "The quarterly sales report shows revenue growth in Europe and Asia", user_id="e", session_id="s"
    )
    # offline heuristic: cosine in [0.7, 0.95) -> a "related" link, strength = cosine (here 0.928)
    link = ams.read(b).links[a]
    assert link["type"] == "related" and link["strength"] == pytest.approx(0.9278, abs=1e-3)
    back = ams.read(a).links[b]
    assert back["type"] == "related" and back["strength"] == pytest.approx(max(0.65, 0.9 * 0.9278), abs=1e-3)


def test_background_jobs_survive_a_killed_process(db_url):
    code = f"""
import os
from cortex_pg import AgenticMemorySystem
from cortex_pg.embeddings import HashingEmbedder
s = AgenticMemorySystem(database_url={db_url!r}, embedder=HashingEmbedder(), enable_background_processing=True)
s.worker.stop()  # no worker runs in this process
print(s.add_note("Deploy the billing service on Friday after the freeze", user_id="kill"))
os._exit(0)  # killed: no shutdown, no processing
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    nid = out.stdout.strip().splitlines()[-1]
    system = AgenticMemorySystem(
        database_url=db_url, embedder=HashingEmbedder(), enable_background_processing=True
    )
    try:
        system._added.append(nid)
        system.wait(timeout=60)
        note = system.read(nid)
        assert note.tags  # deep processing ran in the next process's worker
        from sqlalchemy import text

        with system.store.engine.connect() as conn:
            status = conn.execute(
                text("SELECT status FROM cortex.evolution_jobs WHERE note_id = :n"), {"n": nid}
            ).scalar_one()
        assert status == "done"
    finally:
        system.shutdown()


def test_ollama_backend_uses_the_openai_compatible_endpoint(db_url, monkeypatch):
    seen = []

    def chat(body):
        seen.append(body["model"])
        return {"keywords": ["llama"], "context": "About llamas.", "tags": ["animals"]}

    with OpenAIStub(chat=chat) as stub:
        monkeypatch.setenv("OLLAMA_HOST", stub.base_url.removesuffix("/v1"))
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        system = AgenticMemorySystem(
            database_url=db_url,
            embedder=HashingEmbedder(),
            llm_backend="ollama",
            llm_model="llama3.2",
            enable_background_processing=False,
        )
        try:
            nid = system.add_note("Llamas live in the Andes.", user_id="o")
            assert system.read(nid).context == "About llamas."
            assert seen and seen[0] == "llama3.2"
        finally:
            system.shutdown()
    with pytest.raises(ValidationError):
        AgenticMemorySystem(database_url=db_url, embedder=HashingEmbedder(), llm_backend="anthropic")


def test_bad_links_refuse_the_whole_note(ams):
    other = ams.add_note("someone else's note", user_id="other")
    for links in ({"00000000-0000-0000-0000-000000000001": {}}, {other: {"type": "supports"}}, {"nope": {}}):
        with pytest.raises(ValidationError):
            ams.add_note("New note with a bad link", user_id="L", links=links)
    assert ams.search("New note with a bad link", user_id="L") == []
    # a target merged away: refused in the note's own transaction, so nothing is stored either
    kept = ams.add_note("the note kept by a merge", user_id="L")
    gone = ams.add_note("the note merged away", user_id="L")
    with ams.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE cortex.notes SET merged_into = :k WHERE user_id = 'L' AND id = :g"),
            {"k": kept, "g": gone},
        )
    with pytest.raises(ValidationError) as err:
        ams.add_note("Linked to a merged note", user_id="L", links={gone: {}})
    assert err.value.field == f"links[{gone!r}]" and "merged into" in err.value.reason
    assert "Linked to a merged note" not in [
        r["content"] for r in ams.search("Linked to a merged note", user_id="L")
    ]
    with ams.store.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM cortex.notes WHERE content LIKE 'Linked to%'")).scalar()
            == 0
        )


def test_update_with_a_bad_link_changes_nothing(ams):
    a = ams.add_note("the original text", user_id="U", tags=["old"])
    b = ams.add_note("a second note", user_id="U")
    missing = "11111111-1111-4111-8111-111111111111"
    for links, field in (({"nope": {}}, "links"), ({missing: {}}, f"links[{missing!r}]"), ({a: {}}, "links")):
        with pytest.raises(ValidationError) as err:
            ams.update(a, user_id="U", content="a new text", tags=["new"], links=links)
        assert err.value.field.startswith(field)
        note = ams.read(a, user_id="U")
        assert note.content == "the original text" and note.tags == ["old"] and note.links == {}
    assert ams.update(a, user_id="U", content="a new text", links={b: {"type": "supports"}})
    assert ams.read(a, user_id="U").content == "a new text" and list(ams.read(a, user_id="U").links) == [b]


def test_a_content_update_and_its_processing_job_are_one_write(ams, monkeypatch):
    """The new text and the job that analyses it commit together: a job that cannot be queued
    (or a process killed there) leaves the old text (the text used to commit first, and a
    killed process left it without a job, so nothing ever processed it)."""
    from cortex_pg.store import jobs as queue

    a = ams.add_note("Paris is the capital of France", user_id="J")
    enqueue = queue.enqueue

    def broken(*args, **kwargs):
        raise RuntimeError("queue died")

    monkeypatch.setattr(queue, "enqueue", broken)
    with pytest.raises(RuntimeError):
        ams.update(a, user_id="J", content="Kubernetes autoscaling reacts to load")
    monkeypatch.setattr(queue, "enqueue", enqueue)
    assert ams.read(a, user_id="J").content == "Paris is the capital of France"
    assert ams.update(a, user_id="J", content="Kubernetes autoscaling reacts to load")
    with ams.store.engine.connect() as conn:
        jobs = conn.execute(
            text("SELECT count(*) FROM cortex.evolution_jobs WHERE note_id = :id"), {"id": a}
        ).scalar_one()
    assert jobs == 2  # the note's own, and its new text's


def test_a_new_text_gets_new_derived_tags_and_category_but_keeps_the_callers(ams):
    """Tags, category and context that processing derived from the old text are derived again
    from the new one (a note now about Kubernetes stayed tagged 'paris', in france.paris); those
    the caller gave, at add or by update, stay."""
    derived = ams.add_note("Paris is the capital of France", user_id="T")
    before = ams.read(derived, user_id="T")
    assert "paris" in before.tags and before.category.startswith("france")
    ams.update(derived, user_id="T", content="Kubernetes autoscaling reacts to CPU load within minutes")
    after = ams.read(derived, user_id="T")
    assert "paris" not in after.tags and after.tags and not after.category.startswith("france")
    assert ams.search("autoscaling", user_id="T", where_filter={"tags": {"$contains": "paris"}}) == []

    given = ams.add_note("Rome is the capital of Italy", user_id="T", tags=["travel"], category="trips")
    ams.update(given, user_id="T", content="Lisbon has yellow trams")
    assert (ams.read(given, user_id="T").tags, ams.read(given, user_id="T").category) == (["travel"], "trips")

    later = ams.add_note("Madrid is the capital of Spain", user_id="T")
    ams.update(later, user_id="T", tags=["mine"])  # given after processing: the caller's now
    ams.update(later, user_id="T", content="Oslo has long winters")
    assert ams.read(later, user_id="T").tags == ["mine"]


def test_processing_writes_only_over_the_text_it_analysed(ams, monkeypatch):
    """An update while processing analyses the old text (an LLM call, say): the analysis is
    dropped and the new text analysed (the old text's keywords, tags and category landed on
    the new text, and the update's job was not queued beside the running one)."""
    analyze = ams.analyzer.analyze
    nid = ams.add_note("Paris is the capital of France", user_id="P")
    calls = []

    def racing(content, **kw):
        calls.append(content)
        if len(calls) == 1:  # the caller updates the note while its processing runs
            ams.store.update(nid, user_id="P", content="Kubernetes autoscaling reacts to CPU load",
                             keywords=[], tags=[], category=None, context="General")  # fmt: skip
        return analyze(content, **kw)

    monkeypatch.setattr(ams.analyzer, "analyze", racing)
    ams.update(nid, user_id="P", content="Lisbon has yellow trams")  # its processing races
    note = ams.read(nid, user_id="P")
    assert calls[-1] == note.content == "Kubernetes autoscaling reacts to CPU load"
    assert "paris" not in note.tags and "lisbon" not in note.tags and note.tags
    assert not note.category.startswith(("france", "lisbon"))


def test_a_text_changed_after_processing_wrote_but_before_its_job_ended_is_processed(ams, monkeypatch):
    """The update commits after processing wrote its analysis of the old text and before the
    job ended (the evolution step ran): the update's job could not be queued beside the running
    one, which then ended done, and the new text kept no tags. The job now runs again."""
    nid = ams.add_note("Paris is the capital of France", user_id="W")
    preprocess = ams.worker.preprocess
    done: list[bool] = []

    def racing(job):  # noqa: ANN001
        preprocess(job)  # processing wrote its analysis of the text it read
        if not done:  # then, before the job has ended, the caller changes the text
            done.append(True)
            ams.update(nid, user_id="W", content="Kubernetes autoscaling reacts to CPU load")

    monkeypatch.setattr(ams.worker, "preprocess", racing)
    ams.update(nid, user_id="W", content="Lisbon has yellow trams")
    note = ams.read(nid, user_id="W")
    assert done and note.content == "Kubernetes autoscaling reacts to CPU load"
    assert note.tags and not {"lisbon", "paris"} & set(note.tags)
    assert not note.category.startswith(("france", "lisbon"))


def test_a_job_run_again_after_its_note_was_merged_ends_done(ams):
    """A job asked for again while it ran, whose first run merged the note away: the next
    run finds the note merged and has nothing to process (it failed 5 times before)."""
    from sqlalchemy import text

    from cortex_pg.store import jobs as queue

    keeper = ams.add_note("Lisbon has yellow trams", user_id="M")
    merged = ams.add_note("Paris is the capital of France", user_id="M")
    with ams.store.engine.begin() as conn:  # merged away, its derived fields still to fill
        conn.execute(
            text("UPDATE cortex.notes SET merged_into = CAST(:k AS uuid), keywords = '{}', tags = '{}', "
                 "category = NULL WHERE id = CAST(:m AS uuid)"),
            {"k": keeper, "m": merged},
        )  # fmt: skip
        queue.enqueue(conn, ["M"], [merged])
    assert ams.worker.process_available(note_ids=[merged]) == 1
    with ams.store.engine.connect() as conn:
        status = conn.execute(
            text(
                "SELECT status FROM cortex.evolution_jobs WHERE note_id = CAST(:m AS uuid) ORDER BY id DESC LIMIT 1"
            ),
            {"m": merged},
        ).scalar_one()
    assert status == "done"


def test_a_callers_tags_given_while_a_text_update_reads_are_kept(ams, monkeypatch):
    """update(content=...) read the note before a concurrent update(tags=...) committed: the
    tags it clears are decided under the note's lock, so the caller's stay."""
    from cortex_pg.compat import prem

    nid = ams.add_note("Madrid is the capital of Spain", user_id="Q")
    light = prem.light_keywords
    done = []

    def racing(text):  # called by the text update after its read, before its write
        if not done:
            done.append(True)
            ams.update(nid, user_id="Q", tags=["mine"])
        return light(text)

    monkeypatch.setattr(prem, "light_keywords", racing)
    ams.update(nid, user_id="Q", content="Oslo has long winters")
    assert done and ams.read(nid, user_id="Q").tags == ["mine"]


def test_a_text_written_back_after_another_update_replaced_it_is_processed(ams, monkeypatch):
    """update(content=A) read A; another update then wrote X (processed: X's tags and category);
    writing A back replaces X after all: A is processed again (it kept X's keywords, tags and
    category, with no job, when the choice was made from the read)."""
    from cortex_pg.compat import prem

    paris = "Paris is the capital of France"
    nid = ams.add_note(paris, user_id="B")
    metadata = prem.v.metadata
    done = []

    def racing(value):  # called by the update after its read, before its write
        if not done:
            done.append(True)
            ams.update(nid, user_id="B", content="Kubernetes autoscaling reacts to CPU load")
            assert "kubernetes" in ams.read(nid, user_id="B").tags
        return metadata(value)

    monkeypatch.setattr(prem.v, "metadata", racing)
    ams.update(nid, user_id="B", content=paris)
    note = ams.read(nid, user_id="B")
    assert done and note.content == paris
    assert "paris" in note.tags and note.category.startswith("france")
    assert "kubernetes" not in note.tags and not any("autoscaling" in k.lower() for k in note.keywords)


def test_a_plain_worker_leaves_prem_jobs_to_a_worker_that_runs_the_analysis(ams, db_url):
    """A Prem note's job (kind ``prem``) runs the API's analysis before evolution. A plain
    ``cortex-pg worker`` does not take it (it ended it done, the derived fields an update had
    cleared never derived again); ``cortex-pg worker --prem`` runs it whole."""
    from typer.testing import CliRunner

    from cortex_pg.cli import app

    nid = ams.add_note("Paris is the capital of France", user_id="J")
    ams.worker.stop()  # the job of the update below stays queued, as after a shutdown
    ams.enable_background_processing = True
    ams.update(nid, user_id="J", content="Berlin is the capital of Germany")
    assert (ams.read(nid, user_id="J").tags, ams.read(nid, user_id="J").category) == ([], None)

    def job_status() -> str:
        with ams.store.engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT kind, status FROM cortex.evolution_jobs WHERE note_id = CAST(:id AS uuid) "
                    "ORDER BY id DESC LIMIT 1"
                ),
                {"id": nid},
            ).one()

    assert tuple(job_status()) == ("prem", "queued")
    runner = CliRunner()
    worker = ["--database-url", db_url, "--embedder", "hashing", "worker", "--exit-when-idle"]
    r = runner.invoke(app, worker)
    assert r.exit_code == 0 and "done=0" in r.output, r.output
    assert tuple(job_status()) == ("prem", "queued")
    shown = runner.invoke(app, ["--database-url", db_url, "jobs"])
    assert "1 of the queued jobs are Prem Cortex notes'" in shown.output and "--prem" in shown.output
    r = runner.invoke(app, [*worker, "--prem"])
    assert r.exit_code == 0 and "done=1" in r.output, r.output
    note = ams.read(nid, user_id="J")
    assert "germany" in note.tags and note.category.startswith("germany")
    assert "paris" not in note.tags and tuple(job_status()) == ("prem", "done")


def test_updates_of_a_note_only_in_stm_and_of_a_note_deleted_meanwhile(ams, monkeypatch):
    """A note only in short-term memory (its LTM copy cleared) takes a new text and its keywords
    (it raised NoResultFound; with no long-term row it has no history to tell derived tags from
    given ones, and no processing job); an update of a note another caller deleted after its
    read returns False, as for a missing note (it raised NotFoundError)."""
    from cortex_pg.compat import prem
    from cortex_pg.store import jobs as queue

    nid = ams.add_note("Paris is the capital of France", user_id="S", session_id="s")
    ams.clear_ltm(user_id="S")
    assert ams.update(nid, user_id="S", content="Kubernetes autoscaling reacts to CPU load") is True
    note = ams.read(nid, user_id="S")  # its keywords are the new text's; no job (no LTM row)
    assert note.content == "Kubernetes autoscaling reacts to CPU load" and note.memory_tier == "stm"
    assert "kubernetes" in note.keywords and not any("paris" in k.lower() for k in note.keywords)
    with ams.store.engine.connect() as conn:
        assert queue.counts(conn, user_id="S")["failed"] == 0

    gone = ams.add_note("Lisbon has yellow trams", user_id="S")
    metadata = prem.v.metadata

    def racing(value):  # called by the update after its read, before its write
        if ams.store.get(gone, user_id="S") is not None and not getattr(racing, "done", False):
            racing.done = True
            ams.delete(gone, user_id="S")
        return metadata(value)

    monkeypatch.setattr(prem.v, "metadata", racing)
    assert ams.update(gone, user_id="S", content="Oslo has long winters") is False


def test_a_prem_worker_runs_a_plain_stores_evolve_jobs_without_the_analysis(ams):
    """In a database shared with a plain store, the Prem worker takes ``evolve`` jobs too, and
    runs their evolution alone: a plain note gets no derived tags or category."""
    from cortex_pg.store import MemoryStore

    plain = MemoryStore.open(ams.store.engine.url.render_as_string(False), embedder=HashingEmbedder(),
                             enqueue_evolution=True)  # fmt: skip
    try:
        nid = plain.add("The quarterly budget review meeting moved to Thursday afternoon", user_id="plain")
        assert ams.worker.process_available() == 1
        note = plain.get(nid, user_id="plain")
        assert (note.tags, note.category, note.evolution_history) == ([], None, [])
    finally:
        plain.close()


def test_processing_of_a_note_whose_long_term_row_goes_meanwhile_ends_quietly(ams, monkeypatch, caplog):
    """clear_ltm while the note's analysis runs: the job ends (its note's long-term row is
    gone), nothing is written to the short-term copy, and no error is logged."""
    analyze = ams.analyzer.analyze

    def racing(content, **kw):
        result = analyze(content, **kw)
        ams.clear_ltm(user_id="G")  # between the analysis and its write
        return result

    monkeypatch.setattr(ams.analyzer, "analyze", racing)
    with caplog.at_level("WARNING"):
        nid = ams.add_note("Paris is the capital of France", user_id="G", session_id="s")
    note = ams.read(nid, user_id="G")
    assert note.memory_tier == "stm" and note.tags == [] and note.category is None
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    with ams.store.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM cortex.evolution_jobs WHERE user_id = 'G'")).scalar() == 0
        )


def test_cli_errors_are_one_line_and_printed_as_given(db_url):
    """A cortex-pg error prints as one ``error:`` line however narrow the terminal, and the
    caller's input in it is not read as markup."""
    from typer.testing import CliRunner

    from cortex_pg.cli import app

    r = CliRunner().invoke(
        app,
        ["--database-url", db_url, "--embedder", "[bold]x", "worker", "--exit-when-idle"],
        env={"COLUMNS": "40"},
    )
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "[bold]x" in lines[0], r.output


def test_a_text_update_with_keywords_still_derives_tags_again(ams):
    nid = ams.add_note("Berlin is the capital of Germany", user_id="K")
    assert "germany" in ams.read(nid, user_id="K").tags
    ams.update(nid, user_id="K", content="PostgreSQL vacuum reclaims dead tuples", keywords=["postgres"])
    note = ams.read(nid, user_id="K")
    assert note.keywords == ["postgres"] and "germany" not in note.tags and note.tags


def test_a_read_in_another_session_is_not_counted(ams):
    a = ams.add_note("a note of session one", user_id="R", session_id="one")
    assert ams.read(a, user_id="R", session_id="two") is None
    assert ams.store.get(a, user_id="R").access_count == 0
    assert ams.read(a, user_id="R", session_id="one").retrieval_count == 1


def test_ids_are_global_across_tenants(ams):
    import uuid

    from cortex_pg import ConflictError

    x = str(uuid.uuid4())
    ams.add_note("Alice private diary entry", user_id="A", id=x)
    with pytest.raises(ConflictError):
        ams.add_note("Bob chooses the same id", user_id="B", id=x)
    assert ams.read(x, user_id="A").content == "Alice private diary entry"


def test_shutdown_refuses_more_writes_and_openai_without_key(ams, db_url, monkeypatch):
    ams.shutdown()
    with pytest.raises(ValidationError):
        ams.add_note("after shutdown")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValidationError) as err:
        AgenticMemorySystem(database_url=db_url, model_name="text-embedding-3-small")
    assert err.value.field == "api_key"


def test_a_note_of_one_very_long_word_gets_a_category_that_fits(ams):
    from cortex_pg.collections.rules import MAX_CATEGORY_LENGTH, clean_llm_category, keyword_path
    from cortex_pg.store.validation import MAX_CATEGORY_LENGTH as STORED

    assert MAX_CATEGORY_LENGTH == STORED
    path = keyword_path(["a" * 300, "b" * 300])
    assert path == "a" * 127 + "." + "b" * 127
    assert clean_llm_category("science." + "c" * 300) is None  # the offline rule takes over
    nid = ams.add_note("antidisestablishmentarianism" * 12 + " notes", user_id="u")
    note = ams.read(nid)
    assert note.category and len(note.category) <= MAX_CATEGORY_LENGTH
    assert note.keywords  # processed: the analysis was written, not retried
