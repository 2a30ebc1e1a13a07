"""Issue 13, item 6: links to notes merged away meanwhile, update(links={}), updates of merged
notes, delete_where counts, LoCoMo sessions without a time, a data directory held by another
server."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex_pg import MergedNoteError, ServerError, ValidationError
from cortex_pg.db import embedded
from cortex_pg.evolution import get_links, merge_notes
from cortex_pg.evolution.merge import merge_in
from cortex_pg.ingest import LocomoTimeWarning, read_locomo
from cortex_pg.store.links import Link, write_links


def _waiting_on_a_lock(store) -> bool:
    with store.engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar()
        )


def test_a_link_to_a_note_merged_meanwhile_is_repointed(store):
    a = uuid.UUID(store.add("Alice likes tea", user_id="m", session_id="s"))
    b = uuid.UUID(store.add("Bob likes coffee", user_id="m", session_id="s"))
    c = uuid.UUID(store.add("Bob likes coffee a lot", user_id="m", session_id="s"))
    merging = store.engine.connect()
    merging.begin()
    merge_in(merging, store.embedder, "m", b, c)  # B merged into C, not yet committed
    errors: list[BaseException] = []

    def evolve_a() -> None:  # an evolution job of A links it to B, which it saw as current
        try:
            with store.engine.begin() as conn:
                write_links(conn, "m", [Link(a, b, "related", 0.8, "job")], repoint_merged=True)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    job = threading.Thread(target=evolve_a)
    job.start()
    for _ in range(200):
        if _waiting_on_a_lock(store):
            break
        time.sleep(0.05)
    assert _waiting_on_a_lock(store)  # the link writer waits for the merge
    merging.commit()
    merging.close()
    job.join()
    assert not errors
    with store.engine.connect() as conn:
        to_b = conn.execute(
            text("SELECT count(*) FROM cortex.note_links WHERE target_id = :b OR source_id = :b"), {"b": b}
        ).scalar()
    assert to_b == 0  # nothing points at the merged-away note
    assert str(c) in get_links(store, a, user_id="m")


def test_manual_links_to_a_merged_note_are_refused(store):
    a = store.add("one", user_id="m", session_id="s")
    b = store.add("two", user_id="m", session_id="s")
    c = store.add("three", user_id="m", session_id="s")
    merge_notes(store, b, c, user_id="m")
    with pytest.raises(ValidationError, match="merged into"):
        store.update(a, user_id="m", links={b: {"type": "supports"}})


def test_update_links_empty_clears_them(store):
    a = store.add("one", user_id="u")
    b = store.add("two", user_id="u")
    c = store.add("three", user_id="u")
    store.update(a, user_id="u", links={b: {"type": "supports", "strength": 0.9}, c: {}})
    assert set(get_links(store, a, user_id="u")) == {b, c}
    assert set(get_links(store, b, user_id="u")) == {a}  # the reciprocal
    store.update(a, user_id="u", links={c: {}})  # a's links become exactly these
    assert set(get_links(store, a, user_id="u")) == {c}
    assert get_links(store, b, user_id="u") == {}  # the reciprocal goes with its link (one pair)
    store.update(a, user_id="u", links={})
    assert get_links(store, a, user_id="u") == {}


def test_update_of_a_merged_note_is_refused(store):
    a = store.add("source text", user_id="m", session_id="s")
    b = store.add("target text", user_id="m", session_id="s")
    merge_notes(store, a, b, user_id="m")
    with pytest.raises(MergedNoteError) as info:
        store.update(a, user_id="m", importance=0.9)
    assert info.value.merged_into == b and info.value.field == "id"
    assert store.get(a, user_id="m").importance == 0.5


def test_delete_where_does_not_count_merged_notes(store):
    a = store.add("first", user_id="m", session_id="s", to_stm=False)
    b = store.add("second", user_id="m", session_id="s", to_stm=False)
    store.add("third", user_id="m", session_id="s", to_stm=False)
    merge_notes(store, a, b, user_id="m")
    assert store.delete_where(user_id="m") == 2
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM cortex.notes WHERE user_id = 'm'")).scalar() == 0


def _locomo(tmp_path: Path, sessions: dict) -> Path:
    conv = {"speaker_a": "A", "speaker_b": "B", **sessions}
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps([{"sample_id": "s1", "conversation": conv, "qa": []}]))
    return f


def test_locomo_session_without_time_takes_the_previous_and_warns(tmp_path):
    f = _locomo(
        tmp_path,
        {
            "session_1": [{"speaker": "A", "text": "hi", "dia_id": "D1:1"}, {"speaker": "B", "text": "yo"}],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": [{"speaker": "A", "text": "later"}],
        },
    )
    with pytest.warns(LocomoTimeWarning, match="session_2"):
        (conv,) = list(read_locomo(f))
    assert [i["content"] for i in conv.items] == ["A: hi", "B: yo", "A: later"]
    times = [i["time"] for i in conv.items]
    assert times == sorted(times) and times[2] > times[1]
    assert (times[2] - times[1]).total_seconds() == 1


def test_locomo_first_session_without_time_comes_before_the_next(tmp_path):
    f = _locomo(
        tmp_path,
        {
            "session_1": [{"speaker": "A", "text": "first"}],
            "session_2": [{"speaker": "B", "text": "second"}],
            "session_2_date_time": "1:56 pm on 8 May, 2023",
        },
    )
    with pytest.warns(LocomoTimeWarning):
        (conv,) = list(read_locomo(f))
    assert conv.items[0]["time"] < conv.items[1]["time"]


def test_locomo_sample_without_any_time_is_refused(tmp_path):
    f = _locomo(tmp_path, {"session_1": [{"speaker": "A", "text": "x"}]})
    with pytest.raises(ValidationError, match="date_time"):
        list(read_locomo(f))


def test_a_data_directory_held_by_another_process_says_what_holds_it():
    """A postmaster.pid naming a live process that is not a ready server (e.g. one still
    shutting down): the ServerError names the holder and what to run."""
    tmp = Path(tempfile.mkdtemp(prefix="cortex-held-"))
    embedded.start(tmp)
    embedded.stop(tmp)
    holder = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp / "pgdata" / "postmaster.pid"
        lines = [str(holder.pid), str(tmp / "pgdata"), "0", "5432", str(tmp), "*", "0 0", "stopping"]
        pid_file.write_text("\n".join(lines) + "\n")
        with pytest.raises(ServerError) as info:
            embedded.start(tmp)
        message = str(info.value)
        assert not message.rstrip().endswith(":")
        assert f"pid {holder.pid}" in message and "db stop" in message and "stopping" in message
    finally:
        holder.kill()
        holder.wait()
        (tmp / "pgdata" / "postmaster.pid").unlink(missing_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
