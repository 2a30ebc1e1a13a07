"""MemoryStore: the repository layer over the cortex schema.

Every public method validates its input first (raising
:class:`~cortex_pg.errors.ValidationError` before anything is written), runs in one
transaction, and filters every statement on ``user_id``. Database errors leave through
:func:`~cortex_pg.errors.translate_db_errors`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text

from cortex_pg.config import Settings
from cortex_pg.db import migrate, tenancy
from cortex_pg.db.engine import create_engine_for, resolve_url
from cortex_pg.embeddings.base import Embedder, embedder_from_name
from cortex_pg.errors import (
    ConflictError,
    EmbeddingDimensionError,
    EmbeddingModelError,
    ImmutableFieldError,
    NotFoundError,
    SchemaError,
    ValidationError,
    translate_db_errors,
)
from cortex_pg.store import sql, validation
from cortex_pg.store.records import Note, SearchResult
from cortex_pg.temporal import parse_instant, without_temporal_keywords

# every note field but the identity and scope ones (see validation.NOTE_FIELDS)
UPDATABLE_FIELDS = tuple(f for f in validation.NOTE_FIELDS if f not in ("id", "user_id", "session_id"))


def _tenant_scoped(fn):  # noqa: ANN001, ANN202
    """Under ``isolation="rls"``, run the method's transactions as its ``user_id`` (default tenant)."""

    @wraps(fn)
    def wrapper(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        if self.isolation != "rls":
            return fn(self, *args, **kwargs)
        uid = validation.scope_id(kwargs.get("user_id"), "user_id")
        with tenancy.tenant_scope(uid):
            return fn(self, *args, **kwargs)

    return wrapper


def vector_literal(vec: Sequence[float]) -> str:
    """pgvector text form, ``[x1,x2,...]``."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


class MemoryStore:
    """Notes (LTM + STM), their embeddings and hybrid search, on one PostgreSQL database.

    Open with :meth:`open`; close with :meth:`close` (or use as a context manager).

    Attributes:
        engine: the SQLAlchemy engine.
        embedder: the :class:`~cortex_pg.embeddings.Embedder` for notes and queries.
        stm_capacity: notes kept in STM per (user_id, session_id), LRU-evicted.
        enqueue_evolution: queue an evolution job (``cortex.evolution_jobs``) for every new LTM
            note, in the insert's transaction (default of :meth:`add` / :meth:`add_many`).
        extract_entities: record every new note's entities and relations (offline heuristics,
            ``cortex_pg.entities.extract``) in the insert's transaction, for the entity signal
            of :meth:`search`.
    """

    def __init__(
        self,
        engine: Engine,
        embedder: Embedder,
        *,
        stm_capacity: int = 20,
        enqueue_evolution: bool = False,
        extract_entities: bool = False,
    ) -> None:
        self.engine = engine
        self.embedder = embedder
        self.stm_capacity = validation.limit(stm_capacity, "stm_capacity")
        self.enqueue_evolution = enqueue_evolution
        self.extract_entities = extract_entities
        self.isolation = "none"

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        path: str | Path | None = None,
        embedder: Embedder | str | None = None,
        auto_migrate: bool | None = None,
        stm_capacity: int | None = None,
        settings: Settings | None = None,
        enqueue_evolution: bool = False,
        extract_entities: bool = False,
        isolation: str = "none",
        app_role: str = "cortex_app",
    ) -> MemoryStore:
        """Open a store.

        Args:
            url: database URL; else ``DATABASE_URL``; else the embedded server.
            path: data directory of the embedded server (else ``CORTEX_PG_HOME``, else the
                platform user-data dir). Ignored when a URL is used.
            embedder: an Embedder or a name for :func:`embedder_from_name`; default from
                ``CORTEX_PG_EMBEDDER`` (``minilm``).
            auto_migrate: upgrade the schema to the Alembic head when it is behind. Default:
                True for the embedded server, False for an external database.
            stm_capacity: STM notes per (user_id, session_id); default ``CORTEX_PG_STM_CAPACITY`` (20).
            enqueue_evolution: queue an evolution job for every new LTM note (see the class doc).
            extract_entities: record entities of every new note (see the class doc).
            isolation: ``"none"`` (queries filter on user_id) or ``"rls"``: in addition,
                Row-Level Security through the non-owner role ``app_role`` (created and granted
                here when missing; needs CREATEROLE), with ``cortex.user_id`` set per
                transaction, so even an unfiltered query sees one tenant. Under RLS, calls
                without a user_id act for ``"default"``, and one ``add_many`` writes one tenant.
            app_role: the role used with ``isolation="rls"``.

        Raises:
            SchemaError: the ``vector`` extension is missing or the schema is not at the head
                (and ``auto_migrate`` is off); the message says to run ``cortex-pg db upgrade``.
            EmbeddingDimensionError: the embedder's dimension differs from the stored embeddings'.
            EmbeddingModelError: the database holds embeddings of another model.
            ServerError: the embedded server could not start.
        """
        settings = settings or Settings()
        external = bool(url or settings.database_url)
        resolved = resolve_url(url, path=path, settings=settings)
        engine = create_engine_for(resolved)
        if auto_migrate is None:
            auto_migrate = not external
        if isolation not in ("none", "rls"):
            engine.dispose()
            raise ValidationError("isolation", f"must be 'none' or 'rls', got {isolation!r}")
        try:
            ensure_schema(engine, auto_migrate=auto_migrate)
            if embedder is None:
                embedder = embedder_from_name(settings.embedder)
            elif isinstance(embedder, str):
                embedder = embedder_from_name(embedder)
            store = cls(
                engine,
                embedder,
                stm_capacity=settings.stm_capacity if stm_capacity is None else stm_capacity,
                enqueue_evolution=enqueue_evolution,
                extract_entities=extract_entities,
            )
            store._register_model()
            if isolation == "rls":
                with translate_db_errors(), engine.begin() as conn:
                    tenancy.ensure_app_role(conn, app_role)
                engine.dispose()
                store.engine = engine = create_engine_for(resolved)
                tenancy.install(engine, app_role)
                store.isolation = "rls"
        except BaseException:
            engine.dispose()
            raise
        return store

    def require_owner(self, user: str) -> None:
        """Refuse an ``isolation="rls"`` store for ``user`` (a facade or worker that reads across
        tenants, e.g. its job queue, and so needs the owner role).

        Raises:
            ValidationError: the store runs under RLS.
        """
        if self.isolation == "rls":
            raise ValidationError(
                "store", f"{user} needs the owner role; isolation='rls' stores serve the MemoryStore API only"
            )

    def close(self) -> None:
        """Release the connection pool (the embedded server keeps running for other processes)."""
        self.engine.dispose()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _register_model(self) -> None:
        """Make the embedder's model the active one, refusing a silent mismatch (see open())."""
        name, dim = self.embedder.name, self.embedder.dim
        with translate_db_errors(), self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('cortex.embedding_models', 0))"))
            rows = conn.execute(text("SELECT model, dim, active FROM cortex.embedding_models")).all()
            known = {r.model: r for r in rows}
            active = next((r for r in rows if r.active), None)
            if name in known and known[name].dim != dim:
                raise EmbeddingDimensionError(name, known[name].dim, dim)
            if active is not None and active.model != name:
                stored = conn.execute(
                    text("SELECT count(*) FROM cortex.embeddings WHERE model = :m"), {"m": active.model}
                ).scalar_one()
                if stored:
                    if active.dim != dim:
                        raise EmbeddingDimensionError(
                            active.model, active.dim, dim, f"embedder {name!r}; re-embed first"
                        )
                    raise EmbeddingModelError(
                        f"the database holds {stored} embeddings of model {active.model!r}; embedder "
                        f"{name!r} produces vectors that are not comparable with them; use "
                        f"{active.model!r} or re-embed the notes first"
                    )
            conn.execute(text("SELECT cortex.register_embedding_model(:m, :d, true)"), {"m": name, "d": dim})

    # ------------------------------------------------------------------ writes
    @_tenant_scoped
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
        enqueue_evolution: bool | None = None,
        to_ltm: bool = True,
        stm_capacity: int | None = None,
    ) -> str:
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
                (None: the store's ``enqueue_evolution``).
            to_ltm: write the note to long-term memory. ``to_ltm=False, to_stm=True`` stores it
                in STM only (the calute ``ShortTermMemory``): no LTM row, no evolution job; it
                takes the id of an LTM note of the same scope and content when there is one.
            stm_capacity: the STM capacity enforced by this insert (None: ``store.stm_capacity``).

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
        if not to_ltm:
            if not to_stm:
                raise ValidationError("to_stm", "a note must go to at least one tier (to_ltm or to_stm)")
            return self._store_stm_only(note, stm_capacity)
        return self._store([note], to_stm=to_stm, enqueue=enqueue_evolution, stm_capacity=stm_capacity)[0]

    def add_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        to_stm: bool = True,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        enqueue_evolution: bool | None = None,
    ) -> list[str]:
        """Store many notes: one embedding batch and one multi-row insert per ``batch_size`` notes.

        Args:
            items: mappings with the keyword arguments of :meth:`add` (``content`` required;
                ``time`` may be spelled ``created_at``).
            user_id, session_id: defaults for items that do not name their own.
            to_stm: also write to STM (only the newest ``stm_capacity`` per scope survive).
            batch_size: notes per round trip.
            progress: called with the number of notes finished after each batch.
            enqueue_evolution: queue one evolution job per new note in the same transaction
                (None: the store's ``enqueue_evolution``).

        Returns:
            One id per item, in order (existing ids for duplicates).

        Raises:
            ValidationError: an item is invalid; the field is named ``items[i].<field>`` and
                nothing from the call is stored.
        """
        notes = [
            validation.new_note(
                item, default_user_id=user_id, default_session_id=session_id, prefix=f"items[{i}]."
            )
            for i, item in enumerate(_as_list(items))
        ]
        if self.isolation == "rls" and notes:
            tenants = {n.user_id for n in notes}
            if len(tenants) > 1:
                raise ValidationError("items", "with isolation='rls' one add_many call writes one user_id")
            with tenancy.tenant_scope(tenants.pop()):
                return self._store(
                    notes, to_stm=to_stm, batch_size=batch_size, progress=progress, enqueue=enqueue_evolution
                )
        return self._store(
            notes, to_stm=to_stm, batch_size=batch_size, progress=progress, enqueue=enqueue_evolution
        )

    def _store(
        self,
        notes: list[validation.NewNote],
        *,
        to_stm: bool,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        enqueue: bool | None = None,
        stm_capacity: int | None = None,
    ) -> list[str]:
        batch_size = validation.limit(batch_size, "batch_size")
        enqueue = self.enqueue_evolution if enqueue is None else enqueue
        capacity = (
            self.stm_capacity if stm_capacity is None else validation.limit(stm_capacity, "stm_capacity")
        )
        ids: list[str] = []
        with translate_db_errors(), self.engine.begin() as conn:
            for start in range(0, len(notes), batch_size):
                batch = notes[start : start + batch_size]
                ids.extend(self._insert_batch(conn, batch, to_stm, enqueue, capacity))
                if progress:
                    progress(len(batch))
        return ids

    def _store_stm_only(self, note: validation.NewNote, stm_capacity: int | None) -> str:
        """Insert one note into STM only (see ``add(to_ltm=False)``), trimming its scope to capacity."""
        capacity = (
            self.stm_capacity if stm_capacity is None else validation.limit(stm_capacity, "stm_capacity")
        )
        scopes = {"users": [note.user_id], "sessions": [note.session_id]}
        with translate_db_errors(), self.engine.begin() as conn:
            conn.execute(text(sql.LOCK_SCOPES), scopes)
            found = conn.execute(text(sql.FIND_EXISTING), {**scopes, "hashes": [note.content_hash]}).all()
            by_tier = {r.tier: str(r.id) for r in found}
            if not by_tier:
                self._check_ids_free(conn, [note] if note.explicit_id else [])
            if "stm" in by_tier:
                return by_tier["stm"]
            if "ltm" in by_tier:
                note = _with_id(note, uuid.UUID(by_tier["ltm"]))
            vectors = self.embedder.embed([note.content])
            self._check_vectors(vectors, 1)
            row = dict(note.row(), embedding=vector_literal(vectors[0]))
            conn.execute(text(sql.INSERT_STM), {"rows": json.dumps([row]), "model": self.embedder.name})
            conn.execute(text(sql.TRIM_STM), {**scopes, "capacity": capacity})
        return str(note.id)

    def _insert_batch(
        self,
        conn: Connection,
        batch: list[validation.NewNote],
        to_stm: bool,
        enqueue: bool = False,
        stm_capacity: int | None = None,
    ) -> list[str]:
        capacity = self.stm_capacity if stm_capacity is None else stm_capacity
        scopes = {"users": [n.user_id for n in batch], "sessions": [n.session_id for n in batch]}
        conn.execute(text(sql.LOCK_SCOPES), scopes)
        existing: dict[tuple[str, str, str], tuple[str, str]] = {}
        for row in conn.execute(
            text(sql.FIND_EXISTING), {**scopes, "hashes": [n.content_hash for n in batch]}
        ):
            key = (row.user_id, row.session_id, row.content_hash)
            if key not in existing or row.tier == "ltm":
                existing[key] = (str(row.id), row.tier)
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
        self._check_ids_free(conn, [n for n in fresh if n.explicit_id])
        vectors = self.embedder.embed([n.content for n in fresh])
        self._check_vectors(vectors, len(fresh))
        rows = [dict(n.row(), embedding=vector_literal(v)) for n, v in zip(fresh, vectors, strict=True)]
        inserted = {
            str(i) for i in conn.execute(text(sql.INSERT_NOTES), {"rows": json.dumps(rows)}).scalars()
        }
        if len(inserted) < len(rows):
            ids = self._resolve_conflicts(conn, batch, ids, [n for n in fresh if str(n.id) not in inserted])
            rows = [r for r in rows if r["id"] in inserted]
        payload = {"rows": json.dumps(rows)}
        if enqueue and rows:
            from cortex_pg.evolution import queue

            queue.enqueue(conn, [r["user_id"] for r in rows], [uuid.UUID(r["id"]) for r in rows])
        if self.extract_entities and rows:
            self._index_entities(conn, rows)
        conn.execute(text(sql.INSERT_EMBEDDINGS), {**payload, "model": self.embedder.name})
        if to_stm:
            newest = _newest_per_scope(rows, capacity)
            conn.execute(text(sql.INSERT_STM), {"rows": json.dumps(newest), "model": self.embedder.name})
            conn.execute(text(sql.TRIM_STM), {**scopes, "capacity": capacity})
        return ids

    def _check_ids_free(self, conn: Connection, notes: list[validation.NewNote]) -> None:
        """Caller-given ids must not belong to a note of another tenant (ids are global)."""
        if not notes:
            return
        taken = conn.execute(
            text(
                "SELECT id, user_id FROM cortex.notes WHERE id = ANY(CAST(:ids AS uuid[])) "
                "UNION ALL SELECT id, user_id FROM cortex.stm_notes WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": [str(n.id) for n in notes]},
        ).all()
        owner = {str(n.id): n.user_id for n in notes}
        for row in taken:
            if row.user_id != owner[str(row.id)]:
                raise ConflictError(f"note id {row.id} is already used by another tenant", "23505")

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

    def _resolve_conflicts(
        self,
        conn: Connection,
        batch: list[validation.NewNote],
        ids: list[str],
        lost: list[validation.NewNote],
    ) -> list[str]:
        """Notes whose insert hit a unique index: a concurrent writer stored the same content
        (use its id), or the caller's explicit id is taken by another note (ConflictError)."""
        found = conn.execute(
            text(sql.FIND_EXISTING),
            {
                "users": [n.user_id for n in lost],
                "sessions": [n.session_id for n in lost],
                "hashes": [n.content_hash for n in lost],
            },
        ).all()
        by_key = {(r.user_id, r.session_id, r.content_hash): str(r.id) for r in found if r.tier == "ltm"}
        remap: dict[str, str] = {}
        for note in lost:
            key = (note.user_id, note.session_id, note.content_hash)
            if key not in by_key:
                raise ConflictError(f"a note with id {note.id} already exists", "23505")
            remap[str(note.id)] = by_key[key]
        return [remap.get(i, i) for i in ids]

    def _check_vectors(self, vectors: list[list[float]], expected: int) -> None:
        if len(vectors) != expected:
            raise EmbeddingModelError(f"embedder returned {len(vectors)} vectors for {expected} texts")
        for v in vectors:
            if len(v) != self.embedder.dim:
                raise EmbeddingDimensionError(
                    self.embedder.name,
                    self.embedder.dim,
                    len(v),
                    "the embedder returned a vector of another size",
                )

    @_tenant_scoped
    def update(self, id: str | uuid.UUID, *, user_id: str | None = None, **fields: Any) -> Note:
        """Change fields of a note (both tiers); returns the updated note.

        Updatable: content (re-embedded), keywords, tags, context, category, importance,
        memory_type, time (the memory's own time), metadata (merged into the stored dict:
        keys given replace, other keys stay; a value of None deletes the key), links
        (``{target_id: {type, strength, reason}}``, written with their reciprocals by
        :func:`cortex_pg.evolution.links.write_links`, in the same transaction).

        Args:
            id: the note id.
            user_id: the owning tenant (routes the lookup; None looks in every tenant).

        Raises:
            ImmutableFieldError: ``session_id`` (or ``user_id`` in ``fields``) differs from the stored value.
            ValidationError: unknown field or bad value. NotFoundError: no such note.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        given_session = fields.pop("session_id", None)
        new_links = None
        if "links" in fields:
            from cortex_pg.evolution import links as note_links

            new_links = note_links.parse_links(nid, fields.pop("links"))
        unknown = set(fields) - set(UPDATABLE_FIELDS)
        if unknown:
            raise ValidationError(
                sorted(unknown)[0], f"not an updatable field; use one of {', '.join(UPDATABLE_FIELDS)}"
            )
        sets: dict[str, Any] = {}
        if "content" in fields:
            sets["content"] = validation.content(fields["content"])
        if "keywords" in fields:
            sets["keywords"] = validation.string_list(fields["keywords"], "keywords")
        if "tags" in fields:
            sets["tags"] = validation.string_list(fields["tags"], "tags")
        if "context" in fields:
            sets["context"] = validation.short_text(fields["context"], "context")
        if "category" in fields:
            sets["category"] = validation.category(fields["category"])
        if "importance" in fields:
            sets["importance"] = validation.importance(fields["importance"])
        if "memory_type" in fields:
            sets["memory_type"] = validation.memory_type(fields["memory_type"])
        if "time" in fields:
            sets["created_at"] = parse_instant(fields["time"], "time")
            if sets["created_at"] is None:
                raise ValidationError("time", "must not be None")
        meta_patch = validation.metadata(fields.get("metadata")) if "metadata" in fields else None
        current = self.get(nid, user_id=uid)
        if given_session is not None and given_session != current.session_id:
            raise ImmutableFieldError("session_id", "cannot be changed after a note is stored")
        uid = current.user_id
        vector = None
        if "content" in sets and sets["content"] != current.content:
            vector = self.embedder.embed([sets["content"]])
            self._check_vectors(vector, 1)
        assignments = [f"{col} = :{col}" for col in sets]
        params: dict[str, Any] = {**sets, "id": nid, "user_id": uid}
        if meta_patch is not None:
            drop = [k for k, v in meta_patch.items() if v is None]
            keep = {k: v for k, v in meta_patch.items() if v is not None}
            assignments.append(
                "metadata = (metadata || CAST(:meta_patch AS jsonb)) - CAST(:meta_drop AS text[])"
            )
            params["meta_patch"] = json.dumps(keep)
            params["meta_drop"] = drop
        if assignments or new_links:
            assignments.append("updated_at = now()")
            set_sql = ", ".join(assignments)
            with translate_db_errors(), self.engine.begin() as conn:
                for table in ("cortex.notes", "cortex.stm_notes"):
                    conn.execute(
                        text(f"UPDATE {table} SET {set_sql} WHERE user_id = :user_id AND id = :id"), params
                    )
                if new_links:
                    note_links.write_links(conn, uid, new_links)
                if vector is not None:
                    lit = vector_literal(vector[0])
                    conn.execute(
                        text(
                            "UPDATE cortex.embeddings SET embedding = CAST(:v AS vector), created_at = now() "
                            "WHERE user_id = :user_id AND note_id = :id AND model = :m"
                        ),
                        {"v": lit, "user_id": uid, "id": nid, "m": self.embedder.name},
                    )
                    conn.execute(
                        text(
                            "UPDATE cortex.stm_notes SET embedding = CAST(:v AS vector), model = :m "
                            "WHERE user_id = :user_id AND id = :id"
                        ),
                        {"v": lit, "user_id": uid, "id": nid, "m": self.embedder.name},
                    )
        return self.get(nid, user_id=uid)

    @_tenant_scoped
    def delete(self, id: str | uuid.UUID, *, user_id: str | None = None, memory_source: str = "all") -> bool:
        """Delete a note from both tiers, or one (``memory_source`` ``ltm`` / ``stm``); its
        embeddings and links go with its LTM row; history stays.

        Returns:
            True when a note was deleted, False when none had that id.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        source = validation.memory_source(memory_source)
        with translate_db_errors(), self.engine.begin() as conn:
            n = conn.execute(
                text(
                    "WITH l AS (DELETE FROM cortex.notes WHERE :src IN ('all','ltm') AND id = :id "
                    "  AND (CAST(:u AS text) IS NULL OR user_id = :u) RETURNING id), "
                    "s AS (DELETE FROM cortex.stm_notes WHERE :src IN ('all','stm') AND id = :id "
                    "  AND (CAST(:u AS text) IS NULL OR user_id = :u) RETURNING id) "
                    "SELECT count(*) FROM (SELECT id FROM l UNION SELECT id FROM s) x"
                ),
                {"id": nid, "u": uid, "src": source},
            ).scalar_one()
        return n > 0

    @_tenant_scoped
    def delete_where(
        self, *, user_id: str | None = None, session_id: str | None = None, memory_source: str = "all"
    ) -> int:
        """Delete every note of a user (and session, when given) in the chosen tiers.

        Args:
            user_id: the tenant (None = ``"default"``; never "everyone").
            session_id: restrict to one session; None = all of the user's sessions.
            memory_source: ``all``, ``ltm`` or ``stm``.

        Returns:
            The number of distinct notes removed (a note in both tiers counts once).
        """
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        with translate_db_errors(), self.engine.begin() as conn:
            return conn.execute(
                text(
                    "WITH l AS (DELETE FROM cortex.notes WHERE :src IN ('all','ltm') AND user_id = :u "
                    "  AND (CAST(:s AS text) IS NULL OR session_id = :s) RETURNING id), "
                    "st AS (DELETE FROM cortex.stm_notes WHERE :src IN ('all','stm') AND user_id = :u "
                    "  AND (CAST(:s AS text) IS NULL OR session_id = :s) RETURNING id) "
                    "SELECT count(*) FROM (SELECT id FROM l UNION SELECT id FROM st) x"
                ),
                {"u": uid, "s": sid, "src": source},
            ).scalar_one()

    # ------------------------------------------------------------------ reads
    @_tenant_scoped
    def get(self, id: str | uuid.UUID, *, user_id: str | None = None, touch: bool = False) -> Note:
        """The note with this id: its LTM row, or its STM copy when it is only in STM.

        Args:
            id: note id. user_id: restrict to a tenant (None = any).
            touch: count this as an access (access_count + 1, last_accessed_at = now) in both tiers.

        Raises:
            NotFoundError: no such note. ValidationError: id is not a UUID.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        with translate_db_errors(), self.engine.begin() as conn:
            rows = conn.execute(text(sql.GET_NOTE), {"id": nid, "user_id": uid}).mappings().all()
            if not rows:
                raise NotFoundError("note", str(nid))
            row = next((r for r in rows if r["memory_tier"] == "ltm"), rows[0])
            if touch:
                conn.execute(text(sql.TOUCH), {"user_id": row["user_id"], "ids": [nid]})
        return note_from_row(row)

    @_tenant_scoped
    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 10,
        temporal_weight: float = 0.0,
        date_from: datetime | str | None = None,
        date_to: datetime | str | None = None,
        now: datetime | str | None = None,
        memory_source: str = "all",
        where_filter: Mapping[str, Any] | None = None,
        context: str | None = None,
        touch: bool = True,
        include_links: bool = False,
        link_depth: int = 1,
        entities: bool = False,
        expand_entities: bool = False,
        entity_weight: float = 0.5,
    ) -> list[SearchResult]:
        """Hybrid search of one user's notes, in one SQL statement (``cortex.search_notes``).

        Vector candidates (HNSW, cosine) and BM25 full-text candidates (GIN) are fused by
        coverage-weighted reciprocal rank fusion (k = 60; see ``search_notes`` v3), then blended
        with recency:
        ``score = (1 - temporal_weight) * relevance + temporal_weight * exp(-age_days / 7)``.
        Temporal keywords (yesterday, last, recent, ...) are left out of the full-text query:
        they ask for recency, which ``temporal_weight`` and the date window express.

        Args:
            query: the question or text to match; not blank.
            user_id: the tenant searched (None = ``"default"``). Never widened to other users.
            session_id: restrict to one session; None = all the user's sessions.
            limit: results wanted, 1..10000.
            temporal_weight: recency weight in [0, 1].
            date_from, date_to: window on the note's time, ``date_from <= created_at < date_to``
                (ISO 8601 or datetime; naive = UTC).
            now: the instant ages are measured from (default: the current time).
            memory_source: ``all`` (a note in both tiers is returned once, as STM), ``ltm`` or ``stm``.
            where_filter: Chroma-style filter on columns and metadata (``$eq $ne $gt $gte $lt $lte
                $in $nin $contains $and $or $not``), compiled in SQL by ``cortex.compile_filter``;
                the same on both tiers.
            context: text describing the current situation; re-ranks the candidates with
                ``score = 0.3 * score + 0.7 * cos(context, note)`` (``context_score``).
            touch: count returned notes as accessed (access_count, last_accessed_at; drives STM LRU).
            include_links: append the notes the results link to (``cortex.linked_notes``, up to
                ``link_depth`` hops, best result's links first), not already returned, at most
                ``limit`` of them, marked ``is_linked=True`` with ``relationship_type`` /
                ``relationship_strength`` / ``relationship_reason`` (Prem Cortex shape); linked
                notes are not touched.
            link_depth: hops followed from each result when ``include_links``, 1..10.
            entities: use the entity signal: the query's entities (offline extraction) make notes
                that mention them a third RRF candidate list, weighted ``entity_weight`` (0.5)
                against 1 for the vector and the full-text lists (see ``search_notes`` v3).
            expand_entities: also notes mentioning entities one relationship away (half weight).
            entity_weight: weight of the entity list in the fusion, in [0, 10].

        Returns:
            Up to ``limit`` results, best first; with ``include_links`` up to ``limit`` linked
            notes after them.

        Raises:
            ValidationError: bad argument (blank query, limit <= 0, weight outside [0, 1], ...).
        """
        query = validation.query(query)
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        lim = validation.limit(limit)
        weight = validation.unit_interval(temporal_weight, "temporal_weight")
        source = validation.memory_source(memory_source)
        d_from = parse_instant(date_from, "date_from")
        d_to = parse_instant(date_to, "date_to")
        if d_from and d_to and d_from >= d_to:
            raise ValidationError("date_to", "must be later than date_from")
        at = parse_instant(now, "now") or datetime.now(UTC)
        wf = validation.where_filter(where_filter)
        query_entities: list[str] | None = None
        ent_weight = 0.0
        if entities or expand_entities:
            from cortex_pg.entities.extract import extract_entities

            query_entities = extract_entities(query) or None
            if (
                isinstance(entity_weight, bool)
                or not isinstance(entity_weight, int | float)
                or not (0 <= entity_weight <= 10)
            ):
                raise ValidationError("entity_weight", f"must be a number in [0, 10], got {entity_weight!r}")
            ent_weight = float(entity_weight)
        ctx = validation.short_text(context, "context")
        if ctx is not None and not ctx.strip():
            ctx = None
        vectors = self.embedder.embed([query] if ctx is None else [query, ctx])
        self._check_vectors(vectors, 1 if ctx is None else 2)
        vector = vectors[:1]
        params = {
            "where_filter": None if wf is None else json.dumps(wf),
            "context_embedding": None if ctx is None else vector_literal(vectors[1]),
            "user_id": uid,
            "embedding": vector_literal(vector[0]),
            "query": without_temporal_keywords(query),
            "limit": lim,
            "temporal_weight": weight,
            "date_from": d_from,
            "date_to": d_to,
            "now": at,
            "session_id": sid,
            "memory_source": source,
            "model": self.embedder.name,
            "touch": touch,
            "query_entities": query_entities,
            "entity_weight": ent_weight,
            "expand_entities": bool(expand_entities),
        }
        depth = validation.limit(link_depth, "link_depth")
        with translate_db_errors(), self.engine.begin() as conn:
            rows = conn.execute(text(sql.SEARCH), params).mappings().all()
            results = [result_from_row(r) for r in rows]
            if include_links and results:
                from cortex_pg.evolution.traversal import expand_results

                results += expand_results(conn, uid, results, extra=lim, depth=depth, session_id=sid)
        return results

    @_tenant_scoped
    def list_notes(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        memory_source: str = "ltm",
        limit: int | None = None,
    ) -> list[Note]:
        """Notes of a user (and session) in one tier (``ltm`` or ``stm``), oldest first.

        Merged-away LTM notes are left out. ``limit`` caps the count (None = all).
        """
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        if source == "all":
            raise ValidationError("memory_source", "list one tier at a time: ltm or stm")
        cap = None if limit is None else validation.limit(limit)
        if source == "ltm":
            q = (
                f"SELECT {sql.NOTE_COLUMNS}, 'ltm' AS memory_tier, merged_into, evolution_history "
                "FROM cortex.notes WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                "AND merged_into IS NULL ORDER BY created_at, id LIMIT :n"
            )
        else:
            q = (
                f"SELECT {sql.NOTE_COLUMNS}, 'stm' AS memory_tier FROM cortex.stm_notes "
                "WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                "ORDER BY created_at, seq LIMIT :n"
            )
        with translate_db_errors(), self.engine.connect() as conn:
            rows = conn.execute(text(q), {"u": uid, "s": sid, "n": cap}).mappings().all()
        return [note_from_row(r) for r in rows]

    @_tenant_scoped
    def count(
        self, *, user_id: str | None = None, session_id: str | None = None, memory_source: str = "ltm"
    ) -> int:
        """Number of current (not merged) notes of a user (and session) in one tier."""
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        table = {"ltm": "cortex.notes", "stm": "cortex.stm_notes"}
        sources = ["ltm", "stm"] if source == "all" else [source]
        parts = [
            f"SELECT id FROM {table[s]} WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s)"
            + (" AND merged_into IS NULL" if s == "ltm" else "")
            for s in sources
        ]
        with translate_db_errors(), self.engine.connect() as conn:
            return conn.execute(
                text(f"SELECT count(*) FROM ({' UNION '.join(parts)}) x"), {"u": uid, "s": sid}
            ).scalar_one()

    @_tenant_scoped
    def history(self, id: str | uuid.UUID, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """The ``note_history`` rows of a note, oldest first (op, old, new, changed_at)."""
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        with translate_db_errors(), self.engine.connect() as conn:
            rows = (
                conn.execute(
                    text(
                        "SELECT op, old, new, changed_at FROM cortex.note_history WHERE note_id = :id "
                        "AND (CAST(:u AS text) IS NULL OR user_id = :u) ORDER BY id"
                    ),
                    {"id": nid, "u": uid},
                )
                .mappings()
                .all()
            )
        return [dict(r) for r in rows]

    @_tenant_scoped
    def stats(self, *, user_id: str | None = None) -> dict[str, Any]:
        """Counts for the whole store, or for one user: notes per tier, users, sessions, embeddings."""
        uid = validation.optional_scope_id(user_id, "user_id")
        mine = "(CAST(:u AS text) IS NULL OR user_id = :u)"
        q = f"""
        SELECT
          (SELECT count(*) FROM cortex.notes WHERE merged_into IS NULL AND {mine}) AS ltm_notes,
          (SELECT count(*) FROM cortex.stm_notes WHERE {mine}) AS stm_notes,
          (SELECT count(DISTINCT user_id) FROM cortex.notes WHERE {mine}) AS users,
          (SELECT count(*) FROM (SELECT DISTINCT user_id, session_id FROM cortex.notes
                                 WHERE {mine}) s) AS sessions,
          (SELECT count(*) FROM cortex.note_links WHERE {mine}) AS links,
          (SELECT count(*) FROM cortex.note_history WHERE {mine}) AS history_rows,
          (SELECT coalesce(jsonb_object_agg(model, n), '{{}}') FROM (
              SELECT model, count(*) AS n FROM cortex.embeddings
              WHERE {mine} GROUP BY model) e) AS embeddings,
          (SELECT model FROM cortex.embedding_models WHERE active) AS active_model,
          pg_database_size(current_database()) AS database_bytes
        """
        with translate_db_errors(), self.engine.connect() as conn:
            row = conn.execute(text(q), {"u": uid}).mappings().one()
        return dict(row)


# ---------------------------------------------------------------------- helpers
def ensure_schema(engine: Engine, *, auto_migrate: bool) -> None:
    """Check the vector extension and the Alembic revision; migrate when allowed.

    Raises:
        SchemaError: behind the head (or unknown revision) with ``auto_migrate`` off.
    """
    head = migrate.head_revision()
    with translate_db_errors():
        current = migrate.current_revision(engine)
        if current == head:
            with engine.connect() as conn:
                if not migrate.has_vector_extension(conn):
                    raise SchemaError(
                        "the vector extension is missing from this database; run `cortex-pg db upgrade`"
                    )
            return
        known = _known_revisions()
        if current is not None and current not in known:
            raise SchemaError(
                f"the database is at revision {current!r}, which this version of cortex-pg does not "
                f"know (newest known: {head}); upgrade the cortex-pg package"
            )
        if not auto_migrate:
            raise SchemaError(
                f"the database schema is at revision {current or 'none (empty)'}, cortex-pg needs {head}; "
                "run `cortex-pg db upgrade` (or open with auto_migrate=True)"
            )
        migrate.upgrade(engine)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


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


def note_from_row(row: Mapping[str, Any]) -> Note:
    merged = row.get("merged_into")
    return Note(
        id=str(row["id"]),
        user_id=row["user_id"],
        session_id=row["session_id"],
        content=row["content"],
        keywords=list(row["keywords"] or []),
        tags=list(row["tags"] or []),
        context=row["context"],
        category=row["category"],
        memory_type=row["memory_type"],
        metadata=dict(row["metadata"] or {}),
        importance=float(row["importance"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_accessed_at=row["last_accessed_at"],
        access_count=int(row["access_count"]),
        memory_tier=row.get("memory_tier", "ltm"),
        merged_into=str(merged) if merged else None,
        evolution_history=list(row.get("evolution_history") or []),
    )


def result_from_row(row: Mapping[str, Any]) -> SearchResult:
    return SearchResult(
        note=note_from_row(row),
        score=float(row["score"]),
        relevance_score=float(row["relevance_score"]),
        semantic_score=None if row["semantic_score"] is None else float(row["semantic_score"]),
        distance=None if row["distance"] is None else float(row["distance"]),
        text_score=float(row["text_score"]),
        recency_score=float(row["recency_score"]),
        vector_rank=row["vector_rank"],
        text_rank=row["text_rank"],
        context_score=None if row.get("context_score") is None else float(row["context_score"]),
        entity_score=None if row.get("entity_score") is None else float(row["entity_score"]),
        entity_rank=row.get("entity_rank"),
    )


def facade_store(store: MemoryStore | None, user: str) -> MemoryStore:
    """The store a facade (calute, EntityMemory) works on: ``store``, else ``MemoryStore.open()``;
    refused under RLS (see :meth:`MemoryStore.require_owner`)."""
    chosen = store if store is not None else MemoryStore.open()
    chosen.require_owner(user)
    return chosen
