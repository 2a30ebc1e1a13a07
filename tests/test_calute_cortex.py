"""calute CortexMemory: every method, scopes, processes, threads, and the documented example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

import cortex_pg
from cortex_pg import CortexMemory
from cortex_pg.db import embedded
from cortex_pg.embeddings import HashingEmbedder

ROOT = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def cm(db_url):
    m = CortexMemory(database_url=db_url, embedder=HashingEmbedder())
    yield m
    m.close()


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=180,
    )
    return done.stdout


def test_empty_memory_builds_empty_context_and_fresh_summary(cm):
    assert cm.build_context_for_task("Analyze sales data", agent_role="Data Analyst") == ""
    assert cm.get_summary() == "No recent memories.\n\nNo long-term memories available."
    assert cm.build_context_for_task("x", additional_context="Quarter ends in May") == (
        "Background:\nQuarter ends in May"
    )


def test_all_disabled(db_url):
    with CortexMemory(False, False, False, False, database_url=db_url, embedder=HashingEmbedder()) as m:
        assert m.short_term is None and m.long_term is None and m.entity_memory is None
        assert m.get_summary() == "" and m.get_agent_history("A") == [] and m.get_user_context("u") == ""
        m.save_task_result("t", "result kept in contextual memory", "A", importance=0.9)
        assert "result kept in contextual memory" in m.build_context_for_task("result contextual")


def test_save_task_result_writes_every_store(cm):
    meta = {"ticket": 7}
    cm.save_task_result("Write unit tests", "Added 12 tests for the parser", "Test Engineer", 0.5, meta)
    assert meta == {"ticket": 7}  # copied, never mutated
    st = cm.short_term.get_recent()
    assert [i.content for i in st] == [
        "Task completed: Write unit tests - Result: Added 12 tests for the parser"
    ]
    assert st[0].agent_id == "Test Engineer" and st[0].metadata["task"] == "Write unit tests"
    assert st[0].metadata["ticket"] == 7 and st[0].metadata["agent_role"] == "Test Engineer"
    assert len(cm.long_term) == 0  # importance < 0.7
    assert len(cm.contextual.short_term) == 1 and len(cm.contextual.long_term) == 0
    assert len(cm.entity_memory) == 1
    cm.save_task_result("review the code of Alice.", "approved with comments", "Reviewer", importance=0.7)
    assert [i.content for i in cm.long_term.retrieve(filters={})] == ["approved with comments"]
    assert len(cm.contextual.long_term) == 1
    assert cm.entity_memory.get_entity_info("Alice")["frequency"] == 1


@pytest.mark.parametrize(
    ("task", "result", "role", "field"),
    [
        ("x" * 150 + "\x00", "done", "Tester", "task_description"),  # NUL past the first 100 characters
        (None, "done", "Tester", "task_description"),
        ("a task", "done", 7, "agent_role"),
        ("a task", "done", None, "agent_role"),
        ("a task", "   ", "Tester", "result"),
    ],
)
def test_save_task_result_refuses_bad_input_before_any_write(cm, task, result, role, field):
    """Every text is checked first (a NUL in the task past its first 100 characters used to be
    refused after the short- and long-term items were written; an agent role of 7 was stored,
    and every later summary of the scope raised AttributeError)."""
    with pytest.raises(cortex_pg.ValidationError) as err:
        cm.save_task_result(task, result, role, importance=0.9)
    assert err.value.field == field
    assert len(cm.short_term) == len(cm.long_term) == len(cm.entity_memory) == 0
    assert len(cm.contextual.short_term) == len(cm.contextual.long_term) == 0
    assert cm.long_term.consolidate() == "No long-term memories available."


def test_item_fields_and_updates_of_the_wrong_type_are_typed_errors(cm):
    """An item field that is not a string, and updates that are not a dict, are ValidationErrors
    naming them (they were stored, or raised AttributeError / TypeError)."""
    for shelf in (cm.short_term, cm.long_term):
        with pytest.raises(cortex_pg.ValidationError) as err:
            shelf.save("an item", agent_id=7)
        assert err.value.field == "agent_id"
        item = shelf.save("an item", agent_id="a7")
        for bad in (None, ["content"], "content"):
            with pytest.raises(cortex_pg.ValidationError) as err:
                shelf.update(item.memory_id, bad)
            assert err.value.field == "updates"
        with pytest.raises(cortex_pg.ValidationError) as err:
            shelf.update(item.memory_id, {"conversation_id": 3})
        assert err.value.field == "updates.conversation_id"
    with pytest.raises(cortex_pg.ValidationError):
        cm.contextual.update(item.memory_id, None)
    # in the metadata too, on every path that writes it
    for write, field in (
        (lambda: cm.long_term.save("another item", {"agent_id": 7}), "metadata.agent_id"),
        (
            lambda: cm.long_term.update(item.memory_id, {"metadata": {"conversation_id": 7}}),
            "updates.conversation_id",
        ),
        (lambda: cm.entity_memory.save("Alice met Bob", {"task_id": 1.5}), "metadata.task_id"),
        (lambda: cm.entity_memory.save("Alice met Bob", agent_id=7), "agent_id"),
        (
            lambda: cm.save_task_result("plan", "done", "Planner", task_metadata={"conversation_id": 7}),
            "task_metadata.conversation_id",
        ),
    ):
        with pytest.raises(cortex_pg.ValidationError) as err:
            write()
        assert err.value.field == field
    assert "A7" in cm.long_term.consolidate()  # the summary still works: grouped by agent
    for shelf in (cm.short_term, cm.long_term):  # importance in the metadata is a number in [0, 1]
        with pytest.raises(cortex_pg.ValidationError) as err:
            shelf.update(item.memory_id, {"metadata": {"importance": "high"}})
        assert err.value.field == "updates.importance"
    # a value stored before it was checked: read as the default, the summary does not raise
    with cm.store.engine.begin() as conn:
        conn.execute(
            text('UPDATE cortex.notes SET metadata = metadata || \'{"importance": "high"}\' WHERE id = :id'),
            {"id": item.memory_id},
        )
    assert "(importance: 0.5," in cm.long_term.consolidate()


def test_save_task_result_refuses_metadata_over_the_cap_before_any_write(cm):
    """Metadata within the cap that the entity item's keys push over it: refused first (the
    short-term item used to be written before the entity item was refused)."""
    from cortex_pg.store.validation import MAX_METADATA_LENGTH

    task = "Write the report about Alice Walker"
    own = {"notes": "", "task": task, "agent_role": "Writer"}  # what the short-term item holds
    room = MAX_METADATA_LENGTH - len(json.dumps(own, ensure_ascii=False))
    big = {"notes": "x" * (room - 10)}  # fits there; the entity item adds agent_id and entities
    with pytest.raises(cortex_pg.ValidationError) as err:
        cm.save_task_result(task, "done", "Writer", task_metadata=big)
    assert err.value.field == "task_metadata"
    assert len(cm.short_term) == len(cm.long_term) == len(cm.entity_memory) == 0


def test_truncation_lengths(cm):
    task, result = "T" * 150, "r" * 300
    cm.save_task_result(task, result, "A", importance=0.9)
    st = cm.short_term.get_recent()[0].content
    assert st == f"Task completed: {'T' * 100} - Result: {'r' * 200}"
    text = cm.build_context_for_task("r" * 10)
    lines = text.split("\n")
    assert lines[0] == "Recent context:" and lines[1] == "  • " + st[:200]
    assert "\nRelevant knowledge:\n  • " + "r" * 200 + "\n" in text
    assert text.endswith("Related memories:\n  • " + "r" * 150)


def test_relevant_knowledge_is_filtered_by_agent_and_entities_listed(cm):
    cm.save_task_result(
        "plan the trip to Berlin.", "booked hotel in Berlin for Alice", "Planner", importance=0.9
    )
    cm.save_task_result("plan the trip to Paris.", "booked hotel in Paris", "Other Agent", importance=0.9)
    text = cm.build_context_for_task("plan a trip to Berlin", agent_role="Planner")
    knowledge = text.split("Relevant knowledge:\n")[1].split("\n\n")[0]
    assert knowledge == "  • booked hotel in Berlin for Alice"
    assert "\nKnown entities:\n  • Berlin: 1 mentions" in text


def test_interactions_decisions_and_history(cm):
    cm.save_agent_interaction("Writer", "draft", "wrote the intro")
    cm.save_agent_interaction("Writer", "edit", "tightened section 2", importance=0.6)
    cm.save_agent_interaction("Critic", "review", "too long")
    assert [i.content for i in cm.long_term.retrieve(filters={})] == ["[Writer] edit: tightened section 2"]
    assert cm.short_term.retrieve(filters={"agent_id": "Writer"})[0].metadata["action"] == "edit"
    assert cm.get_agent_history("Writer") == [
        "[Writer] edit: tightened section 2",
        "[Writer] draft: wrote the intro",
        "[Writer] edit: tightened section 2",
    ]
    assert cm.get_agent_history("Writer", limit=1) == ["[Writer] edit: tightened section 2"]
    cm.save_cortex_decision(
        "Completed 2 tasks using sequential process", "Agents involved: Writer, Critic", "ok"
    )
    decision = cm.long_term.retrieve(filters={"agent_id": "cortex_manager"})[0]
    assert decision.content == (
        "Decision: Completed 2 tasks using sequential process\nContext: Agents involved: Writer, Critic\nOutcome: ok"
    )
    assert decision.metadata["type"] == "cortex_decision" and decision.metadata["has_outcome"] is True
    assert len(cm.contextual.long_term) == 1
    summary = cm.get_summary()
    assert "Recent activity:\n  [Writer]: [Writer] draft: wrote the intro" in summary
    assert "\nCortex_Manager:\n  - Decision: Completed 2 tasks" in summary


def test_reset_short_term_and_reset_all_keep_other_scopes(db_url):
    emb = HashingEmbedder()
    a = CortexMemory(database_url=db_url, embedder=emb, scope="team-a")
    b = CortexMemory(database_url=db_url, embedder=emb, scope="team-b")
    try:
        for m in (a, b):
            m.save_task_result("Study Rome", f"Rome notes of {m.scope}", "R", importance=0.9)
            m.contextual.push_context("task", {"n": m.scope})
        a.reset_short_term()
        assert len(a.short_term) == 0 and len(a.contextual.short_term) == 0 and len(a.long_term) == 1
        a.reset_all()
        assert (
            len(a.long_term) == 0 and len(a.entity_memory) >= 0 and a.contextual.get_current_context() is None
        )
        assert a.build_context_for_task("Rome notes") == ""
        assert len(b.short_term) == 1 and len(b.long_term) == 1 and len(b.contextual.long_term) == 1
        assert b.contextual.get_current_context()["data"] == {"n": "team-b"}
        assert "Rome notes of team-b" in b.build_context_for_task("Rome notes")
        assert b.get_summary().endswith("Tracking 1 entities")
    finally:
        a.close()
        b.close()


def test_user_context_when_enabled(db_url):
    with CortexMemory(enable_user=True, database_url=db_url, embedder=HashingEmbedder()) as m:
        m.user_memory.update_user_preferences("u1", {"verbosity": "terse"})
        assert m.get_user_context("u1").startswith("User preferences: {") and "'verbosity': 'terse'" in (
            m.get_user_context("u1")
        )


def test_result_saved_in_another_process_is_in_the_context(cm, db_url):
    _run(
        """
        import sys
        from cortex_pg import CortexMemory
        from cortex_pg.embeddings import HashingEmbedder
        with CortexMemory(database_url=sys.argv[1], embedder=HashingEmbedder()) as m:
            m.save_task_result("Analyze churn", "Churn fell to 3% after onboarding changes", "Analyst", importance=0.8)
        """,
        db_url,
    )
    text = cm.build_context_for_task("Analyze churn", agent_role="Analyst")
    assert "Churn fell to 3% after onboarding changes" in text
    assert "Relevant knowledge:\n  • Churn fell to 3% after onboarding changes" in text
    # and the other way round: a process builds the context from what this one saved
    cm.save_task_result("Draft memo", "Memo sent to the board", "Writer", importance=0.9)
    out = _run(
        """
        import sys
        from cortex_pg import CortexMemory
        from cortex_pg.embeddings import HashingEmbedder
        with CortexMemory(database_url=sys.argv[1], embedder=HashingEmbedder()) as m:
            print(m.build_context_for_task("Draft memo", agent_role="Writer"))
        """,
        db_url,
    )
    assert "Memo sent to the board" in out


def test_threads_and_processes_saving_interactions_lose_nothing(db_url):
    per_writer = 15
    script = """
        import sys
        from cortex_pg import CortexMemory
        from cortex_pg.embeddings import HashingEmbedder
        with CortexMemory(database_url=sys.argv[1], embedder=HashingEmbedder(), short_term_capacity=1000) as m:
            for i in range(int(sys.argv[3])):
                m.save_agent_interaction(sys.argv[2], "say", f"message {i} from {sys.argv[2]}", importance=0.7)
        """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), db_url, f"proc{p}", str(per_writer)],
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        for p in range(2)
    ]
    m = CortexMemory(database_url=db_url, embedder=HashingEmbedder(), short_term_capacity=1000)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for i in range(per_writer):
                m.save_agent_interaction(name, "say", f"message {i} from {name}", importance=0.7)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"thread{t}",)) for t in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [p.wait(timeout=180) for p in procs] == [0, 0]
        assert errors == []
        total = 6 * per_writer
        assert len(m.short_term) == total and len(m.long_term) == total
        for name in [f"thread{t}" for t in range(4)] + ["proc0", "proc1"]:
            history = m.get_agent_history(name, limit=100)
            assert sorted(set(history)) == sorted(
                f"[{name}] say: message {i} from {name}" for i in range(per_writer)
            )
    finally:
        m.close()


def test_documented_typical_usage_example(tmp_path):
    """calute's memory_integration module docstring example, with a real data directory."""
    path = tmp_path / "memory.db"
    try:
        memory = CortexMemory(
            enable_short_term=True,
            enable_long_term=True,
            persistence_path=str(path),
            short_term_capacity=50,
            long_term_capacity=5000,
            embedder=HashingEmbedder(),
        )
        context = memory.build_context_for_task(
            task_description="Analyze sales data", agent_role="Data Analyst"
        )
        assert context == ""
        memory.save_task_result(
            task_description="Analyze sales data",
            result="Sales increased 15% this quarter",
            agent_role="Data Analyst",
            importance=0.8,
        )
        memory.close()
        # a new instance (as after a restart) builds the context from the saved result
        memory = CortexMemory(persistence_path=str(path), embedder=HashingEmbedder())
        context = memory.build_context_for_task(
            task_description="Analyze sales data", agent_role="Data Analyst"
        )
        assert context == (
            "Recent context:\n"
            "  • Task completed: Analyze sales data - Result: Sales increased 15% this quarter\n\n"
            "Relevant knowledge:\n"
            "  • Sales increased 15% this quarter\n\n"
            "Related memories:\n"
            "  • Sales increased 15% this quarter"
        )
        summary = memory.get_summary()
        assert (
            "  [Data Analyst]: Task completed: Analyze sales data - Result: Sales increased 15% this quarter"
            in (summary)
        )
        assert "\nData Analyst:\n  - Sales increased 15% this quarter (importance: 0.8" in summary
        assert summary.endswith("Tracking 1 entities")
        memory.close()
    finally:
        embedded.stop(path)


def test_no_path_no_url_is_an_ephemeral_database_removed_on_close():
    m = CortexMemory(embedder=HashingEmbedder())
    directory = m._ephemeral_dir
    assert directory is not None and directory.exists()
    m.save_task_result("t", "kept until close", "A", importance=0.9)
    assert "kept until close" in m.build_context_for_task("kept until close")
    m.close()
    assert not directory.exists()


def test_entity_memory_is_limited_to_its_scope(db_url):
    a = CortexMemory(database_url=db_url, embedder=HashingEmbedder(), user_id="cal2", scope="A")
    b = CortexMemory(store=a.store, user_id="cal2", scope="B")
    try:
        a.save_task_result("Meet Alice", "Alice works at Acme Corp", agent_role="R")
        b.save_task_result("Meet Bob", "Bob works at Globex Inc", agent_role="R")
        assert len(a.entity_memory) == 1 and len(b.entity_memory) == 1
        assert "Known entities" not in a.build_context_for_task("What does Globex Inc do?")
        assert "Globex Inc: 1 mentions" in b.build_context_for_task("What does Globex Inc do?")
        a.entity_memory.clear()
        assert len(a.entity_memory) == 0 and len(b.entity_memory) == 1
        assert b.entity_memory.get_entity_info("Globex Inc")["frequency"] == 1
    finally:
        a.close()


def _running(pid: int) -> bool:
    """True while ``pid`` is a live process (a stopped server's zombie, not yet reaped, is not)."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        try:
            return "\tZ" not in next(x for x in status.read_text().splitlines() if x.startswith("State:"))
        except (OSError, StopIteration):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_an_ephemeral_memory_never_closed_is_removed_at_exit():
    out = _run(
        """
        from cortex_pg import CortexMemory
        from cortex_pg.embeddings import HashingEmbedder
        m = CortexMemory(embedder=HashingEmbedder())
        m.save_task_result("t", "left open on purpose", "A")
        pid = (m._ephemeral_dir / "pgdata" / "postmaster.pid").read_text().split()[0]
        print(m._ephemeral_dir, pid)
        # no m.close()
        """
    )
    directory, pid = out.split()
    assert not Path(directory).exists()
    assert not _running(int(pid))


def test_close_unregisters_the_exit_hook_and_is_idempotent():
    out = _run(
        """
        from cortex_pg import CortexMemory
        from cortex_pg.embeddings import HashingEmbedder
        m = CortexMemory(embedder=HashingEmbedder())
        directory = m._ephemeral_dir
        m.close()
        m.close()
        print(directory.exists(), m._atexit_hook is None)
        """
    )
    exists, unregistered = out.split()
    assert (exists, unregistered) == ("False", "True")


def test_known_entities_skip_sentence_initial_common_words(cm):
    cm.save_task_result("Plan the launch", "Later, Alice met Sean O'Brien", agent_role="R")
    context = cm.build_context_for_task("Later, plan with Alice and Sean O'Brien")
    known = context.split("Known entities:")[1].split("\n\n")[0]
    assert "Alice: 1 mentions" in known and "Sean O'Brien: 1 mentions" in known
    assert "Later" not in known and "Plan" not in known
    assert cm.entity_memory.get_entity_info("Later") == {"mentions": [], "relationships": []}
    assert cm.entity_memory.get_entity_info("Plan") == {"mentions": [], "relationships": []}


def test_build_context_for_task_names_max_items_when_it_is_wrong(cm):
    from cortex_pg import ValidationError

    cm.save_task_result("Analyze sales data", "Sales increased 15% this quarter", agent_role="Analyst")
    for task in ("Analyze sales data", ""):
        for bad in (0, -1, True, 2.5):
            with pytest.raises(ValidationError) as err:
                cm.build_context_for_task(task, max_items=bad)
            assert err.value.field == "max_items"
    assert "Sales increased" in cm.build_context_for_task("Analyze sales data", max_items=1)


def test_build_context_for_task_names_a_task_with_nul_bytes(cm):
    from cortex_pg import ValidationError

    with pytest.raises(ValidationError) as err:
        cm.build_context_for_task("Analyze\x00 sales")
    assert err.value.field == "task_description"


@pytest.mark.parametrize("task", [123, None, ["Analyze sales"], "Analyze\ud800 sales", "sales " * 2_000])
def test_build_context_for_task_names_a_task_that_is_no_query(cm, task):
    """A task that is not a string was taken as no task (a context without the search sections);
    a lone surrogate reached the embedder: each is ValidationError(field="task_description")."""
    from cortex_pg import ValidationError

    cm.save_task_result("Analyze sales data", "Sales increased 15% this quarter", agent_role="Analyst")
    with pytest.raises(ValidationError) as err:
        cm.build_context_for_task(task)
    assert err.value.field == "task_description" and err.value.reason
    assert cm.build_context_for_task("   ") == cm.build_context_for_task("")  # blank: no search


def test_a_data_directory_that_is_a_file_is_a_typed_error(tmp_path):
    """calute's own SQLite file (memory.db) given as the data directory: a ValidationError naming
    the caller's argument, and the file is left as it was (it was a raw FileExistsError)."""
    from cortex_pg import AgenticMemorySystem
    from cortex_pg.store import MemoryStore

    db = tmp_path / "memory.db"
    db.write_bytes(b"SQLite format 3\x00")
    for open_it, field in (
        (lambda p: CortexMemory(persistence_path=p, embedder="hashing"), "persistence_path"),
        (lambda p: AgenticMemorySystem(path=p, embedder=HashingEmbedder()), "path"),
        (lambda p: MemoryStore.open(path=p, embedder="hashing"), "path"),
    ):
        for p in (db, db / "inside"):
            with pytest.raises(cortex_pg.ValidationError) as err:
                open_it(p)
            assert err.value.field == field, p
    assert db.read_bytes() == b"SQLite format 3\x00"


def test_a_scope_named_like_another_scopes_memory_is_refused(db_url):
    """Scope "proj/contextual" was scope "proj"'s contextual memory: it listed its items, and its
    reset_all emptied them."""
    proj = CortexMemory(database_url=db_url, embedder=HashingEmbedder(), scope="proj")
    proj.save_task_result("plan", "proj private result 15%", "Planner", importance=0.3)
    for name in ("proj/contextual", "proj/entities", "a/b/entities"):
        with pytest.raises(cortex_pg.ValidationError) as err:
            CortexMemory(database_url=db_url, embedder=HashingEmbedder(), scope=name)
        assert err.value.field == "scope"
    for name in ("contextual", "entities", "proj/contexts"):  # nothing else's memory
        other = CortexMemory(database_url=db_url, embedder=HashingEmbedder(), scope=name)
        other.reset_all()
        other.close()
    assert len(proj.contextual.short_term) == 1
    proj.close()
