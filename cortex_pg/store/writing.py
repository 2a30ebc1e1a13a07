"""Writing notes: add and add_many (with :mod:`cortex_pg.store.changing`, the write half of
:class:`MemoryStore`).

Every method validates its input first (raising :class:`~cortex_pg.errors.ValidationError`
before anything is written), runs in one transaction and filters every statement on
``user_id``. Database errors leave through :func:`~cortex_pg.errors.translate_db_errors`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.db import tenancy
from cortex_pg.db.distribution import is_distributed
from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import (
    Blocking,
    Plan,
    Query,
    Transaction,
    WithConnection,
    in_transaction,
    operation,
    run,
)
from cortex_pg.embeddings.base import Embedder
from cortex_pg.errors import (
    ConflictError,
    EmbeddingDimensionError,
    EmbeddingModelError,
    ValidationError,
    translate_db_errors,
)
from cortex_pg.store import sql, validation
from cortex_pg.store.copying import can_copy, copy_embeddings
from cortex_pg.store.rows import tenant_scoped, vector_literal
from cortex_pg.store.text_embeddings import (
    NoteWindows,
    drop_other_models_rows,
    embed_windows,
    write_text_embeddings,
)

#: ``maintenance_work_mem`` of the HNSW builds after a bulk load: a partition's graph (or
#: 100,000 notes' in one index) fits in it, where the server's default of 64 MB makes pgvector
#: finish the build on disk (2.3x slower for 100,000 384-d vectors on one index)
INDEX_BUILD_MEMORY = "512MB"

# which of sql.FIND_EXISTING's rows of one (user, session, text) a write takes: a current note
# of the text, then the note a note of it was merged into, then an STM row
_FOUND_RANK = {"ltm": 2, "merged": 1, "stm": 0}


class NoteWriter:
    """The writing methods of :class:`~cortex_pg.store.MemoryStore` (a mixin: it uses the
    store's ``engine``, ``embedder``, ``stm_capacity``, ``enqueue_evolution``,
    ``extract_entities`` and ``isolation``)."""

    @retry_transient
    @tenant_scoped
    @operation
    def add(
        self,
        content: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        time: datetime | str | None = None,
        keywords: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
        context: str | None = None,
        category: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float = 0.5,
        memory_type: str = "note",
        to_stm: bool = True,
        id: str | uuid.UUID | None = None,
        enqueue_evolution: bool | str | None = None,
        to_ltm: bool = True,
        stm_capacity: int | None = None,
        links: Mapping[Any, Any] | None = None,
        in_same_transaction: Callable[[Connection], Any] | None = None,
    ) -> Plan[str]:
        """Store one note in LTM (and STM when ``to_stm``); returns its id (UUID string).

        Args:
            content: the text; not blank, no NUL bytes.
            user_id: tenant (default ``"default"``); session_id: scope within it (default ``"default"``).
            time: the memory's own time (RFC 3339 / ISO 8601 or datetime; naive = UTC); default now.
            keywords, tags: lists of strings; context: free text; category: dot path.
            metadata: JSON-serialisable dict; importance: in [0, 1].
            memory_type: free label (``note``, ``task_result``, ...), used by the calute facade.
            to_stm: also write the note to short-term memory (LRU capacity per user and session).
            id: the note's id (a UUID), e.g. when importing; default a new random UUID.
            enqueue_evolution: queue an evolution job for a new note in the same transaction
                (None: the store's ``enqueue_evolution``); a job kind instead of True queues a
                job of that kind (``"prem"``: the Prem Cortex facade's, whose worker runs its
                analysis first; see :mod:`cortex_pg.store.jobs`).
            to_ltm: write the note to long-term memory. ``to_ltm=False, to_stm=True`` stores it
                in STM only (the calute ``ShortTermMemory``): no LTM row, no evolution job; it
                takes the id of an LTM note of the same scope and content when there is one.
            stm_capacity: the STM capacity enforced by this insert (None: ``store.stm_capacity``).
            links: the note's outgoing links, ``{target_id: {type, strength, reason}}`` (as
                :meth:`update`'s), written with their reciprocals in the insert's transaction: a
                target that is not a current note of the user refuses the whole note. For an
                existing note (same content) they replace its links. Long-term notes only.
            in_same_transaction: called with the insert's connection once the note is written
                (or found: the same content), in its transaction and under its session's scope
                lock (it may be called again when the insert is retried): a caller's rows or
                trims (a capacity kept by the calute facade) commit with the note, or neither does.

        Returns:
            The new note's id, or the existing id when the same user and session already hold
            exactly this content in the tier(s) written (a no-op, detected by content hash
            before embedding).

        Raises:
            ValidationError: any bad argument (nothing is stored).
            ConflictError: ``id`` belongs to another note.
        """
        item = {
            "content": content,
            "user_id": user_id,
            "session_id": session_id,
            "time": time,
            "keywords": keywords,
            "tags": tags,
            "context": context,
            "category": category,
            "metadata": metadata,
            "importance": importance,
            "memory_type": memory_type,
            "id": id,
        }
        note = validation.new_note(item)
        if enqueue_evolution is not None:
            validation.evolution_job(enqueue_evolution)
        in_same_transaction = validation.connection_callback(in_same_transaction)
        if links is not None:
            from cortex_pg.store import links as note_links

            note_links.parse_links(note.id, links)  # bad links refuse the note before anything
        if not to_ltm:
            if not to_stm:
                raise ValidationError("to_stm", "a note must go to at least one tier (to_ltm or to_stm)")
            if links is not None:
                raise ValidationError("links", "only long-term notes have links (to_ltm=False)")
            return (yield from self._store_stm_only(note, stm_capacity, in_same_transaction))
        ids = yield from self._store(
            [note],
            to_stm=to_stm,
            enqueue=enqueue_evolution,
            stm_capacity=stm_capacity,
            links=links,
            in_same_transaction=in_same_transaction,
        )
        return ids[0]

    @retry_transient
    @operation
    def add_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        to_stm: bool = True,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        enqueue_evolution: bool | str | None = None,
        bulk: bool = False,
    ) -> Plan[list[str]]:
        """Store many notes: one embedding batch and one multi-row insert per ``batch_size`` notes.

        Args:
            items: mappings with the keyword arguments of :meth:`add` (``content`` required;
                ``time`` may be spelled ``created_at``).
            user_id, session_id: defaults for items that do not name their own.
            to_stm: also write to STM (only the newest ``stm_capacity`` per scope survive).
            batch_size: notes per round trip.
            progress: called with the number of notes finished after each batch.
            enqueue_evolution: queue one evolution job per new note in the same transaction
                (None: the store's ``enqueue_evolution``); a job kind as in :meth:`add`.
            bulk: an import: one transaction per ``batch_size`` notes instead of one for the
                call (a failure keeps the batches committed before it), and, when the store
                holds no embedding of the model yet, the model's HNSW index is dropped for the
                load and built once after it (a bulk build is many times faster than
                inserting into the graph note by note), partition by partition, side by side
                (see ``_build_index_after_load``). Searches meanwhile scan exactly; they are
                not blocked. A load interrupted before the build leaves the index to the next
                :meth:`open`, which builds it. The planner's statistics of the notes are
                refreshed (ANALYZE) each time the load has doubled the notes they knew of.

        Returns:
            One id per item, in order (existing ids for duplicates).

        Raises:
            ValidationError: an item is invalid; the field is named ``items[i].<field>`` and
                nothing from the call is stored.
        """
        if enqueue_evolution is not None:
            validation.evolution_job(enqueue_evolution)
        notes = [
            validation.new_note(
                item, default_user_id=user_id, default_session_id=session_id, prefix=f"items[{i}]."
            )
            for i, item in enumerate(_as_list(items))
        ]
        first_with_id: dict[uuid.UUID, int] = {}
        for i, note in enumerate(notes):
            if note.explicit_id:
                j = first_with_id.setdefault(note.id, i)
                if j != i:
                    raise ValidationError(f"items[{i}].id", f"{note.id} is also the id of items[{j}]")
        if self.isolation == "rls" and notes:
            tenants = {n.user_id for n in notes}
            if len(tenants) > 1:
                raise ValidationError("items", "with isolation='rls' one add_many call writes one user_id")
            with tenancy.tenant_scope(tenants.pop()):
                return (
                    yield from self._store(
                        notes,
                        to_stm=to_stm,
                        batch_size=batch_size,
                        progress=progress,
                        enqueue=enqueue_evolution,
                    )
                )
        if bulk:
            return (
                yield Blocking(
                    lambda: self._bulk_store(
                        notes,
                        to_stm=to_stm,
                        batch_size=batch_size,
                        progress=progress,
                        enqueue=enqueue_evolution,
                    )
                )
            )
        return (
            yield from self._store(
                notes, to_stm=to_stm, batch_size=batch_size, progress=progress, enqueue=enqueue_evolution
            )
        )

    def _bulk_store(
        self,
        notes: list[validation.NewNote],
        *,
        to_stm: bool,
        batch_size: int,
        progress: Callable[[int], None] | None,
        enqueue: bool | None,
    ) -> list[str]:
        """``add_many(bulk=True)``: a transaction per batch; the HNSW index built after the load
        when the model had no embeddings (one bulk load at a time, under an advisory lock). Runs
        on the synchronous engine (an async store runs it in a worker thread)."""
        batch_size = validation.limit(batch_size, "batch_size")
        model, dim = self.embedder.name, self.embedder.dim
        with translate_db_errors(), self.engine.connect() as lock_conn:
            lock_conn.execute(text(sql.LOCK_BULK_LOAD))
            lock_conn.commit()
            try:
                with self.engine.begin() as conn:
                    empty = (
                        conn.execute(text(sql.MODEL_HAS_EMBEDDINGS), {"model": model}).scalar_one_or_none()
                        is None
                    )
                    index = conn.execute(text(sql.MODEL_INDEX), {"model": model}).scalar_one_or_none()
                    if empty and index:
                        quoted = conn.dialect.identifier_preparer.quote(index)
                        conn.execute(text(f"DROP INDEX IF EXISTS cortex.{quoted}"))
                    stored = conn.execute(text(sql.NOTES_ESTIMATE)).scalar_one()
                ids: list[str] = []
                # the planner's statistics of cortex.notes, refreshed each time the load has
                # doubled the notes they knew of: a table that grew from (nearly) nothing
                # without them gets index choices made for an empty table (a probe of the
                # content-hash index done through a scan of the tenant's whole session)
                analyze_at = max(stored, batch_size)
                try:
                    for start in range(0, len(notes), batch_size):
                        ids += run(
                            self.engine,
                            self._store(
                                notes[start : start + batch_size],
                                to_stm=to_stm,
                                batch_size=batch_size,
                                progress=progress,
                                enqueue=enqueue,
                            ),
                        )
                        loaded = min(start + batch_size, len(notes))
                        if loaded >= analyze_at and loaded < len(notes):
                            with self.engine.begin() as conn:
                                conn.execute(text("ANALYZE cortex.notes"))
                            analyze_at = 2 * (stored + loaded)
                finally:
                    if empty:
                        self._build_index_after_load(model, dim)
                return ids
            finally:
                lock_conn.execute(text(sql.UNLOCK_BULK_LOAD))
                lock_conn.commit()

    def _build_index_after_load(self, model: str, dim: int) -> None:
        """Build the HNSW index of ``model`` after a bulk load (``_bulk_store``).

        The indexes of the partitions of ``cortex.embeddings`` come first, built side by side
        on connections of their own, as many as the server's ``max_parallel_maintenance_workers``
        (its bound for parallel maintenance work; at least 1, at most 4, which leaves the
        store's pool connections to spare), each in a transaction of its own: a partition
        refuses writes only while its own index is built, and searches read on meanwhile.
        ``cortex.register_embedding_model`` then creates the parent index and attaches them in
        one short transaction (about 10 ms after 100,000 notes; a search of a partition waits
        for it, as attaching locks the partition's index). An interruption leaves the
        partition indexes already built, which the next build (the next :meth:`open`, or the
        next bulk load) attaches instead of building again.

        Raises:
            DatabaseError (and subclasses): a build failed.
        """
        from concurrent.futures import ThreadPoolExecutor

        with translate_db_errors(), self.engine.connect() as conn:
            steps = (
                conn.execute(
                    text("SELECT cortex.embedding_index_steps(:m, :d, false)"), {"m": model, "d": dim}
                )
                .scalars()
                .all()
            )
            workers = int(conn.execute(text("SHOW max_parallel_maintenance_workers")).scalar_one())
            sizes = conn.execute(text(sql.PARTITION_SIZES)).all()
        # the partitions' builds (not the parent's ON ONLY index), largest partition first (the
        # tenants of a hash partition differ in size); with leftovers of an interrupted
        # concurrent build to drop first, the single transaction below does it all
        size_of = {f" ON {r.nspname}.{r.relname} ": r.bytes for r in sizes}
        builds = sorted(
            (s for s in steps if s.startswith("CREATE INDEX") and " ON ONLY " not in s),
            key=lambda s: -max((b for k, b in size_of.items() if k in s), default=0),
        )
        if builds and not any(s.startswith("DROP INDEX") for s in steps):

            def build(step: str) -> None:
                with translate_db_errors(), self.engine.begin() as conn:
                    conn.execute(text(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'"))
                    conn.exec_driver_sql(step)

            with ThreadPoolExecutor(max_workers=max(1, min(workers, 4, len(builds)))) as pool:
                list(pool.map(build, builds))
        with translate_db_errors(), self.engine.begin() as conn:
            conn.execute(text(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'"))
            conn.execute(
                text("SELECT cortex.register_embedding_model(:m, :d, false)"), {"m": model, "d": dim}
            )

    def _store(
        self,
        notes: list[validation.NewNote],
        *,
        to_stm: bool,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        enqueue: bool | str | None = None,
        stm_capacity: int | None = None,
        links: Mapping[Any, Any] | None = None,
        in_same_transaction: Callable[[Connection], Any] | None = None,
    ) -> Plan[list[str]]:
        """Insert ``notes`` in one transaction, in batches; with ``links`` (one note), its
        outgoing links are written in the same transaction, and so is ``in_same_transaction``'s
        work, last (see :meth:`add`)."""
        batch_size = validation.limit(batch_size, "batch_size")
        # (checked where given: add and add_many check theirs, the store its default)
        enqueue = self.enqueue_evolution if enqueue is None else enqueue
        capacity = (
            self.stm_capacity if stm_capacity is None else validation.limit(stm_capacity, "stm_capacity")
        )

        def batches() -> Plan[list[str]]:
            ids: list[str] = []
            stm_written: dict[tuple[str, str], list[str]] = {}  # inserted into STM so far, per scope
            if len(notes) > batch_size:  # every batch's scope locks at once, in one sorted pass (batch
                # by batch, two writes could take two scopes in opposite orders)
                scopes = {"users": [n.user_id for n in notes], "sessions": [n.session_id for n in notes]}
                yield Query(sql.LOCK_SCOPES, scopes, "none")
            for start in range(0, len(notes), batch_size):
                batch = notes[start : start + batch_size]
                ids.extend((yield from self._insert_batch(batch, to_stm, enqueue, capacity, stm_written)))
                if progress:
                    progress(len(batch))
            if stm_written:  # one eviction for all the batches: its row locks in one pass, in id order
                yield Query(
                    sql.TRIM_STM,
                    {
                        "users": [u for u, _ in stm_written],
                        "sessions": [s for _, s in stm_written],
                        "capacity": capacity,
                        "written": [nid for scope in stm_written.values() for nid in scope],
                    },
                    "none",
                )
            if links is not None:  # the stored id (a duplicate's is the existing note's)
                from cortex_pg.store import links as note_links

                source = uuid.UUID(ids[0])
                forward = note_links.parse_links(source, links)
                yield WithConnection(
                    lambda conn: note_links.replace_links(conn, notes[0].user_id, source, forward)
                )
            if in_same_transaction is not None:
                yield WithConnection(in_same_transaction)
            return ids

        return (yield Transaction(batches()))

    def _store_stm_only(
        self,
        note: validation.NewNote,
        stm_capacity: int | None,
        in_same_transaction: Callable[[Connection], Any] | None = None,
    ) -> Plan[str]:
        """Insert one note into STM only (see ``add(to_ltm=False)``), trimming its scope to capacity."""
        capacity = (
            self.stm_capacity if stm_capacity is None else validation.limit(stm_capacity, "stm_capacity")
        )
        scopes = {"users": [note.user_id], "sessions": [note.session_id]}

        def body(note: validation.NewNote) -> Plan[str]:
            yield Query(sql.LOCK_SCOPES, scopes, "none")
            found = yield Query(sql.FIND_EXISTING, {**scopes, "hashes": [note.content_hash]})
            by_tier = {r.tier: str(r.id) for r in found if r.tier != "merged"}  # (STM holds the text itself)
            if not by_tier and note.explicit_id:
                yield from self._check_ids_free([note])
                # (the long-term path's insert meets the id's primary key; STM's upsert would
                # keep the stored text, or put a second text under a long-term note's id)
                if (yield Query(sql.NOTE_ID_STORED, {"user_id": note.user_id, "id": str(note.id)})):
                    raise ConflictError(f"a note with id {note.id} already exists", "23505", field="id")
            if "stm" in by_tier:
                if in_same_transaction is not None:
                    yield WithConnection(in_same_transaction)
                return by_tier["stm"]
            if "ltm" in by_tier:
                note = _with_id(note, uuid.UUID(by_tier["ltm"]))
            windows = yield Blocking(embed_windows, (self.embedder, [note.content]))
            vectors = [windows[0][0]]  # STM keeps one embedding: the first window
            row = dict(note.row(), embedding=vector_literal(vectors[0]))
            added = yield Query(sql.INSERT_STM, {"rows": json.dumps([row]), "model": self.embedder.name})
            written = [str(r.id) for r in added]
            yield Query(sql.TRIM_STM, {**scopes, "capacity": capacity, "written": written}, "none")
            if in_same_transaction is not None:
                yield WithConnection(in_same_transaction)
            return str(note.id)

        return (yield Transaction(body(note)))

    def _insert_batch(
        self,
        batch: list[validation.NewNote],
        to_stm: bool,
        enqueue: bool | str = False,
        stm_capacity: int | None = None,
        stm_written: dict[tuple[str, str], list[str]] | None = None,
    ) -> Plan[list[str]]:
        """Insert one batch in the caller's transaction. ``stm_written`` collects, per (user, session),
        the newest ``capacity`` ids inserted into STM across the batches of one transaction; the
        caller evicts once after the last batch (``TRIM_STM``), keeping those first, so that no
        eviction drops an earlier batch's notes for notes touched meanwhile."""
        capacity = self.stm_capacity if stm_capacity is None else stm_capacity
        stm_written = {} if stm_written is None else stm_written
        scopes = {"users": [n.user_id for n in batch], "sessions": [n.session_id for n in batch]}
        yield Query(sql.LOCK_SCOPES, scopes, "none")
        existing: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        for row in (yield Query(sql.FIND_EXISTING, {**scopes, "hashes": [n.content_hash for n in batch]})):
            key = (row.user_id, row.session_id, row.content_hash)
            tier = "ltm" if row.tier == "merged" else row.tier
            if key not in existing or _FOUND_RANK[row.tier] > _FOUND_RANK[existing[key][2]]:
                existing[key] = (str(row.id), tier, row.tier)
        # one id per (scope, content): earlier duplicates in the batch win, then stored notes
        chosen: dict[tuple[str, str, str], validation.NewNote] = {}
        ids: list[str] = []
        fresh: list[validation.NewNote] = []
        for note in batch:
            key = (note.user_id, note.session_id, note.content_hash)
            if key in existing and existing[key][1] == "ltm":
                ids.append(existing[key][0])
                continue
            if key not in chosen:
                if key in existing:  # only in STM (LTM was cleared): keep the STM id
                    note = _with_id(note, uuid.UUID(existing[key][0]))
                chosen[key] = note
                fresh.append(note)
            ids.append(str(chosen[key].id))
        if not fresh:
            return ids
        explicit = [n for n in fresh if n.explicit_id]
        yield from self._check_ids_free(explicit)
        if explicit:  # an STM-only note under the id, with another text: the long-term note would
            # share its id (the insert meets no primary key: the STM row is in another table)
            clash = yield Query(
                sql.STM_ID_OTHER_TEXT,
                {
                    "users": [n.user_id for n in explicit],
                    "ids": [str(n.id) for n in explicit],
                    "sessions": [n.session_id for n in explicit],
                    "hashes": [n.content_hash for n in explicit],
                },
                "first",
            )
            if clash is not None:
                raise ConflictError(f"a note with id {clash.id} already exists", "23505", field="id")
        windows = yield Blocking(embed_windows, (self.embedder, [n.content for n in fresh]))
        rows = [n.row() for n in fresh]
        inserted = {str(i) for i in (yield Query(sql.INSERT_NOTES, {"rows": json.dumps(rows)}, "scalars"))}
        if len(inserted) < len(rows):
            ids = yield from self._resolve_conflicts(ids, [n for n in fresh if str(n.id) not in inserted])
            rows = [r for r in rows if r["id"] in inserted]
        if enqueue and rows:
            from cortex_pg.store import jobs as queue

            kind = enqueue if isinstance(enqueue, str) else queue.DEFAULT_KIND
            yield WithConnection(
                lambda conn: queue.enqueue(
                    conn, [r["user_id"] for r in rows], [uuid.UUID(r["id"]) for r in rows], kind=kind
                )
            )
        if self.extract_entities and rows:
            yield WithConnection(lambda conn: self._index_entities(conn, rows))
        by_id = {str(n.id): w for n, w in zip(fresh, windows, strict=True)}
        written = [NoteWindows(r["user_id"], r["id"], r["session_id"], by_id[r["id"]]) for r in rows]
        yield WithConnection(
            lambda conn: write_text_embeddings(conn, self.embedder.name, written, replace=False)
        )
        if rows:
            yield from self._write_context_embeddings(
                [r["user_id"] for r in rows], [r["id"] for r in rows], new=True
            )
        if to_stm:
            for n in batch:  # every scope written to is evicted down to capacity after the write
                stm_written.setdefault((n.user_id, n.session_id), [])
            # STM keeps one embedding per note: its first window
            newest = [
                dict(r, embedding=vector_literal(by_id[r["id"]][0]))
                for r in _newest_per_scope(rows, capacity)
            ]
            added = yield Query(sql.INSERT_STM, {"rows": json.dumps(newest), "model": self.embedder.name})
            for r in added:
                scope = stm_written.setdefault((r.user_id, r.session_id), [])
                scope.append(str(r.id))
                del scope[:-capacity]  # older ones would be evicted by the newer anyway
        return ids

    def _write_context_embeddings(self, users: list[str], ids: list[str], *, new: bool = False) -> Plan[None]:
        """The context embeddings of ``ids`` and of the notes that follow them (when the store's
        ``context_embeddings`` is on); see :func:`context_embeddings`."""
        if self.context_embeddings:
            yield from context_embeddings(self.embedder, users, ids, new=new)

    def _check_ids_free(self, notes: list[validation.NewNote]) -> Plan[None]:
        """Caller-given ids must not be registered to another tenant (``cortex.note_ids``; the
        registry's foreign keys enforce it anyway, this names the id first)."""
        if not notes:
            return
        taken = yield Query(
            "SELECT id, user_id FROM cortex.note_ids WHERE id = ANY(CAST(:ids AS uuid[]))",
            {"ids": [str(n.id) for n in notes]},
        )
        owner = {str(n.id): n.user_id for n in notes}
        for row in taken:
            if row.user_id != owner[str(row.id)]:
                raise ConflictError(
                    f"note id {row.id} is already used by another tenant", "23505", field="id"
                )

    def _index_entities(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        from cortex_pg.entities.extract import extract
        from cortex_pg.entities.repository import EntityStore

        entities = EntityStore(self.engine)
        for row in rows:
            entities.index_note(
                row["user_id"],
                row["id"],
                row["content"],
                extract(row["content"]),
                seen_at=row["created_at"],
                conn=conn,
            )

    def _resolve_conflicts(self, ids: list[str], lost: list[validation.NewNote]) -> Plan[list[str]]:
        """Notes whose insert hit a unique index: a concurrent writer stored the same content
        (use its id), or the caller's explicit id is taken by another note (ConflictError)."""
        found = yield Query(
            sql.FIND_EXISTING,
            {
                "users": [n.user_id for n in lost],
                "sessions": [n.session_id for n in lost],
                "hashes": [n.content_hash for n in lost],
            },
        )
        by_key = {(r.user_id, r.session_id, r.content_hash): str(r.id) for r in found if r.tier == "ltm"}
        remap: dict[str, str] = {}
        for note in lost:
            key = (note.user_id, note.session_id, note.content_hash)
            if key not in by_key:
                raise ConflictError(f"a note with id {note.id} already exists", "23505", field="id")
            remap[str(note.id)] = by_key[key]
        return [remap.get(i, i) for i in ids]

    def _check_vectors(self, vectors: list[list[float]], expected: int) -> None:
        check_vectors(self.embedder, vectors, expected)


def _as_list(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(items, (Mapping, str)):
        raise ValidationError("items", "must be an iterable of note mappings")
    out = list(items)
    for i, item in enumerate(out):
        if not isinstance(item, Mapping):
            raise ValidationError(f"items[{i}]", "must be a mapping with at least 'content'")
    return out


def _with_id(note: validation.NewNote, new_id: uuid.UUID) -> validation.NewNote:
    from dataclasses import replace

    return replace(note, id=new_id)


def _newest_per_scope(rows: list[dict[str, Any]], capacity: int) -> list[dict[str, Any]]:
    """The last ``capacity`` rows of each (user_id, session_id), in batch order (the others
    would be evicted by the same transaction anyway)."""
    seen: dict[tuple[str, str], int] = {}
    keep: list[dict[str, Any]] = []
    for row in reversed(rows):
        key = (row["user_id"], row["session_id"])
        if seen.get(key, 0) < capacity:
            seen[key] = seen.get(key, 0) + 1
            keep.append(row)
    keep.reverse()
    return keep


def check_vectors(embedder: Embedder, vectors: list[list[float]], expected: int) -> None:
    """``expected`` vectors of ``embedder.dim`` each, or a typed error.

    Raises:
        EmbeddingModelError: another number of vectors, or a vector without a direction in the
            stored precision (float4, as pgvector keeps it): a component that is NaN or
            infinite, or a squared length of 0 in float4 (all zeros, or components so small
            that their squares underflow). Its cosine to any vector would be NaN: stored, it
            would score NaN in every search of its tenant.
            A model of more than 2,000 dimensions is indexed in half precision (``halfvec``):
            its vectors must also keep a direction there, every component within ±65504 and
            not all of them below half precision's smallest (about 6e-8).
        EmbeddingDimensionError: another size.
    """
    import numpy as np

    if len(vectors) != expected:
        raise EmbeddingModelError(f"embedder returned {len(vectors)} vectors for {expected} texts")
    for v in vectors:
        if len(v) != embedder.dim:
            raise EmbeddingDimensionError(
                embedder.name, embedder.dim, len(v), "the embedder returned a vector of another size"
            )
    if len(vectors) == 0:
        return
    with np.errstate(all="ignore"):  # (overflow and underflow are what is being checked)
        stored = np.asarray(vectors, dtype=np.float64).astype(np.float32)
        squared = np.einsum("ij,ij->i", stored, stored)  # in float4, as pgvector sums
    bad = ~np.isfinite(stored).all(axis=1) | ~np.isfinite(squared) | (squared == 0)
    if bad.any():
        raise EmbeddingModelError(
            f"embedder {embedder.name} returned a vector without a direction (vector {int(np.argmax(bad))} "
            "of the call: zeros, NaN, infinite, or too small for float4): its cosine is undefined"
        )
    if embedder.dim > HALFVEC_ABOVE:
        with np.errstate(all="ignore"):
            half = stored.astype(np.float16).astype(np.float32)
            squared = np.einsum("ij,ij->i", half, half)
        bad = ~np.isfinite(half).all(axis=1) | ~np.isfinite(squared) | (squared == 0)
        if bad.any():
            raise EmbeddingModelError(
                f"embedder {embedder.name} returned a vector without a direction in half precision, "
                f"in which a model of more than {HALFVEC_ABOVE} dimensions is indexed (vector "
                f"{int(np.argmax(bad))} of the call: a component beyond ±65504, or all below about 6e-8)"
            )


#: models of more dimensions than this are indexed as ``halfvec`` (``cortex.embedding_index_type``)
HALFVEC_ABOVE = 2000


def write_context_embeddings(
    conn: Connection,
    embedder: Embedder,
    users: list[str],
    ids: list[str],
    *,
    drop_other_models: bool = True,
    followers: bool = True,
) -> int:
    """:func:`context_embeddings` on the caller's transaction ``conn``."""
    return in_transaction(
        conn,
        context_embeddings(embedder, users, ids, drop_other_models=drop_other_models, followers=followers),
    )


def context_embeddings(
    embedder: Embedder,
    users: list[str],
    ids: list[str],
    *,
    new: bool = False,
    drop_other_models: bool = True,
    followers: bool = True,
) -> Plan[int]:
    """Embed the context texts of the notes ``ids`` (user ids ``users``) and of the stored notes
    that follow them, and write them as ``kind = 'context'`` embeddings of ``embedder``'s model
    (see ``sql.CONTEXT_TEXTS``: predecessor's content, a newline, the note's content). The
    texts are read by one statement per user, or, for notes of several users on a server that
    is not distributed (Citus would send it to every shard), by one statement for all
    (``sql.CONTEXT_TEXTS_MANY``); one ``embedder.embed`` call embeds them.

    Args:
        new: the notes ``ids`` were inserted by the current transaction (they have no
            embedding rows yet): when the connection allows it (:mod:`cortex_pg.store.copying`)
            every row then goes in one binary ``COPY``, after the context rows of the stored
            notes that follow them are deleted; otherwise (or with ``new=False``) rows are
            upserted.
        drop_other_models: the stored notes whose context may change (those given that are not
            new, and those that follow them) lose their rows of every other model
            (``sql.DROP_OTHER_MODEL_ROWS``); off for a back-fill of another model.
        followers: also the notes that follow them (their predecessor is new or changed); off
            for a back-fill, whose notes' texts did not change (a follower is back-filled as a
            note of its own, and is not locked by the batch: it may be deleted meanwhile).

    Returns:
        The number of context embeddings written (notes without a predecessor get none).

    Raises:
        EmbeddingModelError, EmbeddingDimensionError: the embedder returned the wrong shape.
    """
    if not ids:
        return 0
    by_user: dict[str, list[str]] = {}
    for user, nid in zip(users, ids, strict=True):
        by_user.setdefault(user, []).append(str(nid))
    if len(by_user) > 1 and not (yield WithConnection(is_distributed)):
        # a batch of many tenants (a bulk import): one statement for all of them
        targets = yield Query(sql.CONTEXT_TEXTS_MANY, {"users": list(users), "ids": [str(i) for i in ids]})
    else:  # one statement per tenant, which routes to its shard on Citus
        targets = []
        for user, user_ids in sorted(by_user.items()):
            targets += yield Query(sql.CONTEXT_TEXTS, {"user_id": user, "ids": user_ids})
    if not followers:
        given = {(u, str(i)) for u, i in zip(users, ids, strict=True)}
        targets = [t for t in targets if (t.user_id, str(t.id)) in given]
    fresh = {(u, str(i)) for u, i in zip(users, ids, strict=True)} if new else set()
    # stored notes whose context may have changed (given, or following one given) lose their
    # rows of other models (sql.DROP_OTHER_MODEL_ROWS)
    changed = [
        (user, str(nid))
        for user, nid in [*zip(users, ids, strict=True), *((t.user_id, t.id) for t in targets)]
        if (user, str(nid)) not in fresh
    ]
    if changed and drop_other_models:
        yield WithConnection(lambda conn: drop_other_models_rows(conn, embedder.name, changed))
    if not targets:
        return 0
    vectors = yield Blocking(embedder.embed, ([t.context_text for t in targets],))
    check_vectors(embedder, vectors, len(targets))
    if fresh and (yield WithConnection(can_copy)):
        # the stored notes' context rows are replaced, not upserted: deleted, then written by
        # the same binary COPY as the new notes' (an upsert carried each vector as text in
        # jsonb, a tenth of an incremental load whose notes come out of order)
        stale: dict[str, list[str]] = {}
        for t in targets:
            if (t.user_id, str(t.id)) not in fresh:
                stale.setdefault(t.user_id, []).append(str(t.id))
        for user, user_ids in sorted(stale.items()):  # one statement per tenant (one shard on Citus)
            yield Query(
                sql.DELETE_CONTEXT_EMBEDDINGS,
                {"user_id": user, "ids": user_ids, "model": embedder.name},
                "none",
            )
        keys = [(t.user_id, t.id, t.session_id, "context", 0) for t in targets]
        yield WithConnection(lambda conn: copy_embeddings(conn, embedder.name, keys, vectors, embedder.dim))
        rest: list[int] = []
    else:
        rest = list(range(len(targets)))
    if rest:
        rows = [
            {
                "user_id": targets[k].user_id,
                "id": str(targets[k].id),
                "session_id": targets[k].session_id,
                "embedding": vector_literal(vectors[k]),
            }
            for k in rest
        ]
        yield Query(sql.INSERT_CONTEXT_EMBEDDINGS, {"rows": json.dumps(rows), "model": embedder.name}, "none")
    return len(targets)
