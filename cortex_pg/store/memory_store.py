"""MemoryStore: the repository layer over the cortex schema.

The class is assembled from three mixins, one module each: writing (``writing.py``),
reading (``reading.py``) and search (``searching.py``); this module holds its lifecycle
(open, schema check, model registration, close). Every public method validates its input first (raising
:class:`~cortex_pg.errors.ValidationError` before anything is written), runs in one
transaction, and filters every statement on ``user_id``. Database errors leave through
:func:`~cortex_pg.errors.translate_db_errors`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, Engine, text

from cortex_pg.config import Settings
from cortex_pg.db import migrate, tenancy
from cortex_pg.db.engine import acquire_engine, create_engine_for, release_engine, resolve_url
from cortex_pg.embeddings.base import Embedder, embedder_from_name
from cortex_pg.errors import (
    EmbeddingDimensionError,
    EmbeddingModelError,
    SchemaError,
    ValidationError,
    translate_db_errors,
)
from cortex_pg.store import links as note_links
from cortex_pg.store import sql, traversal, validation
from cortex_pg.store.changing import UPDATABLE_FIELDS, NoteChanger
from cortex_pg.store.reading import NoteReader
from cortex_pg.store.rows import note_from_row, result_from_row, vector_literal
from cortex_pg.store.searching import NoteSearch, QueryVectorCache
from cortex_pg.store.stm_loss import STMLossReader, check_on_open
from cortex_pg.store.writing import NoteWriter

# re-exported for the facades and the evolution worker
__all__ = [
    "UPDATABLE_FIELDS",
    "MemoryStore",
    "ensure_schema",
    "facade_store",
    "note_from_row",
    "result_from_row",
    "validation",
    "vector_literal",
]


class MemoryStore(NoteWriter, NoteChanger, NoteReader, NoteSearch, STMLossReader):
    """Notes (LTM + STM), their embeddings and hybrid search, on one PostgreSQL database.

    Open with :meth:`open`; close with :meth:`close` (or use as a context manager).
    Short-term memory lost to a crash of the server is reported, never silent: see
    :meth:`stm_losses` and :mod:`cortex_pg.store.stm_loss`.

    Attributes:
        engine: the SQLAlchemy engine.
        embedder: the :class:`~cortex_pg.embeddings.Embedder` for notes and queries.
        stm_capacity: notes kept in STM per (user_id, session_id), LRU-evicted.
        enqueue_evolution: queue an evolution job (``cortex.evolution_jobs``) for every new LTM
            note, in the insert's transaction (default of :meth:`add` / :meth:`add_many`): a
            bool, or the job's kind (``evolve`` or ``prem``, see :mod:`cortex_pg.store.jobs`).
        extract_entities: record every new note's entities and relations (offline heuristics,
            ``cortex_pg.entities.extract``) in the insert's transaction, for the entity signal
            of :meth:`search`.
    """

    # a note's links, by hand, and the notes reachable along them (cortex_pg.store.links and
    # cortex_pg.store.traversal; the module functions take the store first)
    get_links = note_links.get_links
    set_links = note_links.set_links
    linked_notes = traversal.linked_notes

    def __init__(
        self,
        engine: Engine,
        embedder: Embedder,
        *,
        stm_capacity: int = 20,
        enqueue_evolution: bool | str = False,
        extract_entities: bool = False,
        query_cache_size: int = 256,
        context_embeddings: bool = True,
    ) -> None:
        self.engine = engine
        self.embedder = embedder
        self.stm_capacity = validation.limit(stm_capacity, "stm_capacity")
        if (
            isinstance(query_cache_size, bool)
            or not isinstance(query_cache_size, int)
            or query_cache_size < 0
        ):
            raise ValidationError("query_cache_size", f"must be an integer >= 0, got {query_cache_size!r}")
        self.query_cache = QueryVectorCache(query_cache_size)
        self.context_embeddings = bool(context_embeddings)
        self.enqueue_evolution = validation.evolution_job(enqueue_evolution)
        self.extract_entities = extract_entities
        self.isolation = "none"
        # how close() gives the engine back: dispose it, or release it when open() shares it
        self._release: Callable[[Engine], None] | None = _dispose

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
        enqueue_evolution: bool | str = False,
        extract_entities: bool = False,
        isolation: str = "none",
        app_role: str = "cortex_app",
        query_cache_size: int = 256,
        context_embeddings: bool = True,
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
            query_cache_size: query embeddings kept in an LRU (query text -> vector) so a
                repeated query is not embedded again; 0 turns it off.
            context_embeddings: give every LTM note a second embedding, of its text read after
                its predecessor in the session (``kind = 'context'``; the predecessor is the
                previous note by time, then insertion order), kept up to date when notes are
                inserted out of order, changed or deleted. Search scores a note by the mean of
                the query's cosine with both, so a reply ("Yes! It was amazing.") is found by
                what it answers. Costs a second embedding per note at write time.
            isolation: ``"none"`` (queries filter on user_id) or ``"rls"``: in addition,
                Row-Level Security through the non-owner role ``app_role`` (created and granted
                here when missing; needs CREATEROLE), with ``cortex.user_id`` set per
                transaction, so even an unfiltered query sees one tenant. Under RLS, calls
                without a user_id act for ``"default"``, and one ``add_many`` writes one tenant.
            app_role: the role used with ``isolation="rls"``.

        Warns:
            STMLostWarning: this is the first store opened since crash recovery emptied
                short-term memory (also logged at WARNING; see :mod:`cortex_pg.store.stm_loss`).

        Raises:
            SchemaError: the ``vector`` extension is missing or the schema is not at the head
                (and ``auto_migrate`` is off); the message says to run ``cortex-pg db upgrade``.
            EmbeddingDimensionError: the embedder's dimension differs from the stored embeddings'.
            EmbeddingModelError: the database holds embeddings of another model.
            ServerError: the embedded server could not start.
        """
        settings = settings or Settings()
        external = bool(url or settings.database_url)
        if isolation not in ("none", "rls"):
            raise ValidationError("isolation", f"must be 'none' or 'rls', got {isolation!r}")
        validation.evolution_job(enqueue_evolution)  # (before any server starts)
        resolved = resolve_url(url, path=path, settings=settings)
        # stores on one URL share one engine (one pool) per process; an RLS store installs
        # per-connection hooks (SET ROLE, the tenant per transaction), so it gets its own below
        engine = acquire_engine(resolved)
        release = release_engine
        if auto_migrate is None:
            auto_migrate = not external
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
                query_cache_size=query_cache_size,
                context_embeddings=context_embeddings,
            )
            store._register_model()
            check_on_open(store)
            if isolation == "rls":
                with translate_db_errors(), engine.begin() as conn:
                    tenancy.ensure_app_role(conn, app_role)
                release_engine(engine)
                release = _dispose
                store.engine = engine = create_engine_for(resolved)
                tenancy.install(engine, app_role)
                store.isolation = "rls"
        except BaseException:
            release(engine)
            raise
        store._release = release
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
        """Give back the connection pool: a pool shared with other stores of this process on the
        same URL is disposed when the last of them closes; a second close does nothing. (The
        embedded server keeps running for other processes.)"""
        release, self._release = self._release, None
        if release is not None:
            release(self.engine)

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
            if active is not None and active.model == name and self._bulk_load_running(conn):
                # a bulk load dropped the model's index for its load and builds it after; building
                # it now would make the rest of the load insert into the graph note by note
                return
            conn.execute(text("SELECT cortex.register_embedding_model(:m, :d, true)"), {"m": name, "d": dim})

    @staticmethod
    def _bulk_load_running(conn: Connection) -> bool:
        """Whether another session holds the bulk-load lock (``add_many(bulk=True)``)."""
        if conn.execute(text(sql.TRY_LOCK_BULK_LOAD)).scalar_one():
            conn.execute(text(sql.UNLOCK_BULK_LOAD))
            return False
        return True


def _dispose(engine: Engine) -> None:
    engine.dispose()


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


def facade_store(store: MemoryStore | None, user: str) -> MemoryStore:
    """The store a facade (calute, EntityMemory) works on: ``store``, else ``MemoryStore.open()``;
    refused under RLS (see :meth:`MemoryStore.require_owner`)."""
    chosen = store if store is not None else MemoryStore.open()
    chosen.require_owner(user)
    return chosen
