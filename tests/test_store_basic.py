"""add / get / update / delete / delete_where / history on a real database."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from cortex_pg import ImmutableFieldError, NotFoundError, ValidationError


def test_add_and_get_round_trip(store):
    nid = store.add(
        "Alice moved to Lisbon in March",
        user_id="alice",
        session_id="s1",
        time="2024-03-01T09:30:00+02:00",
        keywords=["move", "Lisbon"],
        tags=["life"],
        context="relocation",
        category="life/places",
        metadata={"source": "chat", "n": 3},
        importance=0.8,
    )
    note = store.get(nid, user_id="alice")
    assert note.content == "Alice moved to Lisbon in March"
    assert note.user_id == "alice" and note.session_id == "s1"
    assert note.created_at == datetime(2024, 3, 1, 7, 30, tzinfo=UTC)
    assert note.keywords == ["move", "Lisbon"] and note.tags == ["life"]
    assert note.category == "life.places"
    assert note.metadata == {"source": "chat", "n": 3}
    assert note.importance == pytest.approx(0.8)
    assert note.memory_tier == "ltm"


def test_naive_time_is_utc(store):
    nid = store.add("naive time note", time="2023-05-08T13:56:00")
    assert store.get(nid).created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_a_date_is_its_midnight_utc_and_one_time_has_one_name(store):
    nid = store.add("a note dated by a date", user_id="dates", time=date(2023, 5, 8))
    assert store.get(nid).created_at == datetime(2023, 5, 8, tzinfo=UTC)
    found = store.search("note dated", user_id="dates", date_from=date(2023, 5, 8), date_to=date(2023, 5, 9))
    assert [r.note.id for r in found] == [nid]
    # the note's time given twice, under both of its names: an error, and nothing is stored
    with pytest.raises(ValidationError) as err:
        store.add_many(
            [{"content": "two times", "user_id": "dates", "created_at": "2020-01-01", "time": "2021-01-01"}]
        )
    assert err.value.field.endswith("created_at")
    assert store.count(user_id="dates") == 1


def test_get_other_tenant_is_not_found(store):
    nid = store.add("secret of alice", user_id="alice")
    with pytest.raises(NotFoundError):
        store.get(nid, user_id="bob")


def test_update_merges_metadata_and_reembeds(store):
    nid = store.add("the cat sleeps on the sofa", user_id="u", metadata={"a": 1, "b": 2})
    before = store.search("quantum chromodynamics lecture", user_id="u", touch=False)[0]
    updated = store.update(
        nid, user_id="u", content="quantum chromodynamics lecture notes", metadata={"b": None, "c": 3}
    )
    assert updated.content == "quantum chromodynamics lecture notes"
    assert updated.metadata == {"a": 1, "c": 3}
    after = store.search("quantum chromodynamics lecture", user_id="u", touch=False)[0]
    assert after.id == nid
    assert after.semantic_score > before.semantic_score + 0.3  # the embedding was recomputed
    # the STM copy follows
    stm = store.search("quantum chromodynamics", user_id="u", memory_source="stm", touch=False)
    assert stm[0].content == "quantum chromodynamics lecture notes"


@pytest.mark.parametrize("tier", ["ltm", "stm"])
def test_a_text_written_back_after_another_update_is_embedded(store, tier):
    """Two updates read the note's text A; one writes X, the other writes A back. The second
    decided from its read that A needed no new embedding, but the stored text was X by then:
    the decision is made again under the note's lock, so the embedding is A's, not X's (a
    long-term note's embeddings rows; a note only in short-term memory, its row's)."""
    import threading
    import time

    from sqlalchemy import text

    a_text, x_text = "Paris is the capital of France", "Kubernetes autoscaling reacts to CPU load"
    nid = store.add(a_text, user_id="u", to_ltm=tier == "ltm")
    table = "cortex.notes" if tier == "ltm" else "cortex.stm_notes"
    pid = {}

    def waiting() -> int:
        with store.engine.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'LWLock') "
                     "AND pid <> :me AND datname = current_database()"),
                {"me": pid["holder"]},
            ).scalar_one()  # fmt: skip

    holder = store.engine.connect()
    tx = holder.begin()
    pid["holder"] = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
    holder.execute(text(f"SELECT 1 FROM {table} WHERE id = CAST(:id AS uuid) FOR UPDATE"), {"id": nid})
    errors: list[BaseException] = []

    def update(content: str) -> None:
        try:
            store.update(nid, user_id="u", content=content)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    first = threading.Thread(target=update, args=(x_text,))
    first.start()
    deadline = time.monotonic() + 30
    while waiting() < 1 and time.monotonic() < deadline:  # X waits for the row
        time.sleep(0.02)
    second = threading.Thread(target=update, args=(a_text,))  # reads A: X is not committed
    second.start()
    while waiting() < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    tx.commit()  # X is written, then A back
    holder.close()
    first.join(60)
    second.join(60)
    assert errors == []
    assert store.get(nid, user_id="u").content == a_text
    with store.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT embedding::text FROM cortex.embeddings WHERE note_id = CAST(:id AS uuid) "
                 "AND kind = 'text' AND window_no = 0" if tier == "ltm" else
                 "SELECT embedding::text FROM cortex.stm_notes WHERE id = CAST(:id AS uuid)"),
            {"id": nid},
        ).scalar_one()  # fmt: skip
    stored = [float(x) for x in stored.strip("[]").split(",")]
    expected = store.embedder.embed([a_text])[0]
    assert max(abs(p - q) for p, q in zip(stored, expected, strict=True)) < 1e-5


def test_update_runs_a_callers_write_in_its_transaction(store):
    """in_same_transaction sees the new text and commits with it; when it raises, the update
    is rolled back with it."""
    from sqlalchemy import text

    nid = store.add("the first text", user_id="u")
    seen = []

    def record(conn):
        seen.append(
            conn.execute(text("SELECT content FROM cortex.notes WHERE id = :id"), {"id": nid}).scalar_one()
        )

    assert store.update(nid, user_id="u", content="the second text", in_same_transaction=record).content == (
        "the second text"
    )
    assert seen == ["the second text"]

    def broken(conn):
        conn.execute(text("UPDATE cortex.notes SET importance = 1 WHERE id = :id"), {"id": nid})
        raise RuntimeError("the caller's write failed")

    with pytest.raises(RuntimeError):
        store.update(nid, user_id="u", content="the third text", tags=["x"], in_same_transaction=broken)
    note = store.get(nid, user_id="u")
    assert (note.content, note.tags, note.importance) == ("the second text", [], 0.5)
    assert [r.content for r in store.search("second", user_id="u", touch=False)] == ["the second text"]


def test_a_callers_write_must_be_a_plain_function(store):
    """Refused before any work: not callable (a raw TypeError after the write's work), or async
    (the coroutine was created and never awaited, its rows silently not written)."""

    async def coroutine(conn):
        return None

    nid = store.add("kept as it is", user_id="u")
    for bad in (42, "fn", coroutine, lambda conn: coroutine(conn)):  # the last hands one back
        with pytest.raises(ValidationError) as err:
            store.add("never stored", user_id="u", in_same_transaction=bad)
        assert err.value.field == "in_same_transaction"
        with pytest.raises(ValidationError) as err:
            store.update(nid, user_id="u", content="never written", in_same_transaction=bad)
        assert err.value.field == "in_same_transaction"
    assert store.count(user_id="u") == 1 and store.get(nid, user_id="u").content == "kept as it is"


def test_update_refuses_scope_change_and_unknown_fields(store):
    nid = store.add("note", user_id="u", session_id="s")
    with pytest.raises(ImmutableFieldError) as err:
        store.update(nid, user_id="u", session_id="other")
    assert err.value.field == "session_id"
    with pytest.raises(ValidationError) as err2:
        store.update(nid, user_id="u", colour="red")
    assert err2.value.field == "colour"
    with pytest.raises(ValidationError):
        store.update(nid, user_id="u", importance=3)
    assert store.get(nid).importance == pytest.approx(0.5)
    # same session_id is allowed (not a change)
    assert store.update(nid, user_id="u", session_id="s", tags=["x"]).tags == ["x"]


def test_history_records_every_change(store):
    nid = store.add("first version", user_id="h")
    store.update(nid, user_id="h", content="second version", importance=0.9)
    store.search("version", user_id="h")  # access bookkeeping is not a change
    assert store.delete(nid, user_id="h") is True
    ops = [row["op"] for row in store.history(nid, user_id="h")]
    assert ops == ["insert", "update", "delete"]
    upd = store.history(nid)[1]
    assert upd["old"]["content"] == "first version" and upd["new"]["content"] == "second version"
    assert set(upd["new"]) == {"content", "content_hash", "importance"}


def test_delete_and_delete_where_counts(store):
    a = store.add("a1", user_id="a", session_id="s1")
    store.add("a2", user_id="a", session_id="s1")
    store.add("a3", user_id="a", session_id="s2")
    store.add("b1", user_id="b", session_id="s1")
    assert store.delete(a, user_id="a") is True
    assert store.delete(a, user_id="a") is False
    with pytest.raises(NotFoundError):
        store.get(a)
    assert store.delete_where(user_id="a", session_id="s1") == 1
    assert store.delete_where(user_id="a") == 1
    assert store.delete_where(user_id="a") == 0
    assert store.count(user_id="b") == 1


def test_duplicate_content_is_a_noop(store, monkeypatch):
    first = store.add("exactly the same words", user_id="d", session_id="s")
    calls = []
    original = store.embedder.embed
    monkeypatch.setattr(store.embedder, "embed", lambda texts: calls.append(texts) or original(texts))
    again = store.add("exactly the same words", user_id="d", session_id="s")
    assert again == first
    assert calls == []  # caught before embedding
    assert store.count(user_id="d") == 1
    # another session or user is a different note
    assert store.add("exactly the same words", user_id="d", session_id="t") != first
    assert store.add("exactly the same words", user_id="e", session_id="s") != first


def test_add_many_batches_and_dedupes(store):
    items = [{"content": f"note number {i}", "user_id": "m"} for i in range(30)]
    items.append({"content": "note number 3", "user_id": "m"})
    ids = store.add_many(items, batch_size=7)
    assert len(ids) == 31 and ids[30] == ids[3]
    assert len(set(ids)) == 30
    assert store.count(user_id="m") == 30


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": ""}, "content"),
        ({"content": "   \n\t"}, "content"),
        ({"content": "nul\x00byte"}, "content"),
        ({"content": "ok", "time": "not a time"}, "time"),
        ({"content": "ok", "importance": 1.5}, "importance"),
        ({"content": "ok", "user_id": "bad\x01id"}, "user_id"),
        ({"content": "ok", "user_id": "x" * 256}, "user_id"),
        ({"content": "ok", "keywords": "not-a-list"}, "keywords"),
        ({"content": "ok", "metadata": {"x": object()}}, "metadata"),
        ({"content": "ok", "category": "a..b"}, "category"),
    ],
)
def test_bad_input_is_refused_and_stores_nothing(store, kwargs, field):
    with pytest.raises(ValidationError) as err:
        store.add(**kwargs)
    assert err.value.field == field
    assert store.stats()["ltm_notes"] == 0 and store.stats()["stm_notes"] == 0


def test_add_many_is_all_or_nothing(store):
    with pytest.raises(ValidationError) as err:
        store.add_many([{"content": "good"}, {"content": ""}])
    assert err.value.field == "items[1].content"
    assert store.stats()["ltm_notes"] == 0


def test_ids_with_any_printable_characters_are_kept(store):
    uid = "org:42 / Ünïcode user"
    nid = store.add("hello", user_id=uid, session_id="a session: 1")
    note = store.get(nid)
    assert note.user_id == uid and note.session_id == "a session: 1"
    assert store.search("hello", user_id=uid)[0].id == nid


def test_explicit_ids_are_kept_and_collisions_refused(store):
    import uuid

    from cortex_pg import ConflictError

    nid = str(uuid.uuid4())
    assert store.add("imported note", user_id="i", metadata={}, **{}) != nid
    assert store.add_many([{"id": nid, "content": "note with my id", "user_id": "i"}]) == [nid]
    assert store.get(nid).content == "note with my id"
    with pytest.raises(ConflictError):
        store.add_many([{"id": nid, "content": "another text, same id", "user_id": "i"}])
    assert store.get(nid).content == "note with my id"
    with pytest.raises(ValidationError) as err:
        store.add_many([{"id": "not-a-uuid", "content": "x"}])
    assert err.value.field == "items[0].id"


def test_update_to_another_notes_content_is_a_conflict_naming_content(store) -> None:  # noqa: ANN001
    from cortex_pg.errors import ConflictError

    a = store.add("The boiler was serviced in March.", user_id="u")
    b = store.add("The car was serviced in April.", user_id="u")
    with pytest.raises(ConflictError, match="^content: another note of this user and session"):
        store.update(b, user_id="u", content="The boiler was serviced in March.")
    assert store.get(b, user_id="u").content == "The car was serviced in April."
    assert store.get(a, user_id="u").content == "The boiler was serviced in March."


def _commit_modes(store, calls):  # noqa: ANN001, ANN202
    """Run ``calls`` and return, per statement that writes a note or counts notes as accessed,
    (what, synchronous_commit in its transaction). The touches are seen from inside their
    statement (a trigger of this test's database): a search is one statement in autocommit
    mode, whose transaction has ended when the client could ask."""
    from sqlalchemy import event

    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS public.touch_modes (n serial, mode text)")
        conn.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION public.record_touch_mode() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO public.touch_modes (mode) VALUES (current_setting('synchronous_commit'));"
            " RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            "CREATE OR REPLACE TRIGGER record_touch_mode AFTER UPDATE OF access_count ON cortex.notes"
            " FOR EACH STATEMENT EXECUTE FUNCTION public.record_touch_mode()"
        )
        conn.exec_driver_sql("TRUNCATE public.touch_modes")
    seen: list[tuple[str, str]] = []

    def after(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if "INSERT INTO cortex.notes" in statement:
            seen.append(("write", cursor.connection.execute("SHOW synchronous_commit").fetchone()[0]))

    event.listen(store.engine, "after_cursor_execute", after)
    try:
        for call in calls:
            call()
    finally:
        event.remove(store.engine, "after_cursor_execute", after)
        with store.engine.begin() as conn:
            seen += [
                ("touch", m)
                for m in conn.exec_driver_sql("SELECT mode FROM public.touch_modes ORDER BY n").scalars()
            ]
            conn.exec_driver_sql("DROP TRIGGER record_touch_mode ON cortex.notes")
    return seen


def test_access_bookkeeping_commits_without_waiting_for_the_disk(store):
    """A search or get that counts its notes as accessed runs its transaction with
    synchronous_commit off (that transaction only); reads without touch, and writes, keep the
    server's setting, and the setting does not outlive the transaction on the pooled connection."""
    with store.engine.connect() as conn:
        default = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
    a = store.add("the lighthouse keeper logs the storm", user_id="u")
    seen = _commit_modes(
        store,
        [
            lambda: store.search("lighthouse storm", user_id="u", touch=True),
            lambda: store.search("lighthouse storm", user_id="u", touch=False),
            lambda: store.add("a second note about the harbour", user_id="u"),
        ],
    )
    # one touch (the touching search's), and it did not wait; the write did
    assert [mode for what, mode in seen if what == "touch"] == ["off"]
    writes = [mode for what, mode in seen if what == "write"]
    assert writes and set(writes) == {default}
    gets = _commit_modes(
        store, [lambda: store.get(a, user_id="u", touch=True), lambda: store.get(a, user_id="u")]
    )
    # the touching get's update; the plain get writes nothing
    assert [mode for what, mode in gets if what == "touch"] == ["off"]
    # the touches were committed: one by the touching search, one by the touching get
    assert store.get(a, user_id="u").access_count == 2
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == default


def test_calute_long_term_search_commits_its_touch_without_waiting(store):
    from cortex_pg.compat.calute import LongTermMemory

    ltm = LongTermMemory(store=store, user_id="u", session_id="s")
    item = ltm.save("note about the cello recital")
    seen = _commit_modes(store, [lambda: ltm.search("cello recital")])
    assert [mode for what, mode in seen if what == "touch"] == ["off"]
    assert store.get(item.memory_id, user_id="u").access_count == 1


def _deadlock_retries(caplog) -> list[str]:  # noqa: ANN001
    return [
        r.getMessage() for r in caplog.records if r.name == "cortex_pg.db.retry" and "40P01" in r.getMessage()
    ]


def test_touching_gets_and_searches_side_by_side_do_not_deadlock(store, caplog):
    """get(touch=True) and touching searches lock the same rows; cortex.touch_notes takes the
    locks in one order (LTM then STM, each by id), so they wait for each other and never
    deadlock (not even a deadlock that a retry would hide)."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")

    ids = store.add_many(
        [{"content": f"sailing boats in the harbour, note {i}"} for i in range(10)], user_id="u"
    )

    def work(k: int) -> None:
        for r in range(25):
            if k % 2:
                store.search("sailing boats", user_id="u")
            else:
                store.get(ids[(k + r) % len(ids)], user_id="u", touch=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, range(8)))
    counts = [store.get(i, user_id="u").access_count for i in ids]
    assert sum(counts) >= 4 * 25  # every get counted (and the searches' touches on top)
    assert _deadlock_retries(caplog) == []


def test_calute_touching_reads_side_by_side_do_not_deadlock(store, caplog):
    """calute's long-term search returns its results in score order but touches them in id
    order (cortex.touch_notes), so two searches with different queries, or one beside a
    touching list, never deadlock."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    caplog.set_level(logging.INFO, logger="cortex_pg.db.retry")

    from cortex_pg.compat.calute import LongTermMemory

    ltm = LongTermMemory(store=store, user_id="u", session_id="s")
    for i in range(20):
        ltm.save(f"sailing boats in the harbour, note {i} " + " ".join(f"w{j}" for j in range(i)))
    queries = ["sailing boats", "harbour note", "w1 w2 w3", "boats w5 harbour", "note w9"]

    def work(k: int) -> int:
        for r in range(6):
            if k == 3:
                ltm.retrieve(limit=20)
            else:
                ltm.search(queries[(k + r) % len(queries)], limit=20)
        return k

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sorted(pool.map(work, range(4))) == [0, 1, 2, 3]
    assert _deadlock_retries(caplog) == []


def test_touch_notes_counts_one_tier_or_both_and_stays_in_its_tenant(store):
    """cortex.touch_notes updates the tenant's rows of the tier asked for and returns how many;
    another tenant's note with the same call is left alone; an unknown tier is SQLSTATE 22023."""
    import psycopg
    from sqlalchemy import text

    a = store.add("the lighthouse keeper logs the storm", user_id="u")  # in LTM and STM
    other = store.add("the ferry timetable changed", user_id="v")

    def touch(user: str, ids: list[str], tier: str) -> int:
        with store.engine.begin() as conn:
            return conn.execute(
                text("SELECT cortex.touch_notes(:u, CAST(:ids AS uuid[]), :t)"),
                {"u": user, "ids": ids, "t": tier},
            ).scalar_one()

    assert touch("u", [a], "ltm") == 1
    assert touch("u", [a], "all") == 2
    assert touch("u", [a, other], "stm") == 1  # v's note is not u's
    assert touch("u", [], "all") == 0
    assert store.get(a, user_id="u").access_count == 2  # LTM: the ltm and all calls
    assert store.get(other, user_id="v").access_count == 0
    with store.engine.connect() as conn:
        stm = conn.execute(
            text("SELECT access_count FROM cortex.stm_notes WHERE id = :i"), {"i": a}
        ).scalar_one()
    assert stm == 2  # STM: the all and stm calls
    with pytest.raises(Exception) as err:
        touch("u", [a], "both")
    assert isinstance(err.value.orig, psycopg.errors.InvalidParameterValue)


def test_a_bad_tag_or_keyword_is_named_by_its_position(store):
    with pytest.raises(ValidationError) as err:
        store.add("tea notes", user_id="u", tags=["ok", "bad\x00tag"])
    assert err.value.field == "tags[1]" and "NUL" in err.value.reason
    with pytest.raises(ValidationError) as err:
        store.add("tea notes", user_id="u", keywords=["tea", 7])
    assert err.value.field == "keywords[1]" and "int" in err.value.reason
    with pytest.raises(ValidationError) as err:
        store.add_many([{"content": "a"}, {"content": "b", "tags": [None]}], user_id="u")
    assert err.value.field.endswith("tags[0]") and err.value.field.startswith("items[1]")
    assert store.stats(user_id="u")["ltm_notes"] == 0  # nothing stored


def test_metadata_keys_that_are_one_in_json_are_refused(store):
    nid = store.add("tea notes", user_id="u", metadata={"k": 1})
    for bad in ({1: "x", "1": "y"}, {"nested": {True: 1, "true": 2}}):
        with pytest.raises(ValidationError) as err:
            store.update(nid, user_id="u", metadata=bad)
        assert err.value.field == "metadata" and "would be lost" in err.value.reason
    assert store.get(nid, user_id="u").metadata == {"k": 1}  # unchanged
