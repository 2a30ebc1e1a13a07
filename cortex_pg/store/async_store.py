"""AsyncMemoryStore: the store's hot paths on asyncio (SQLAlchemy asyncio over psycopg 3).

Every method runs the *same plan* as the :class:`~cortex_pg.store.MemoryStore` method of that
name (:mod:`cortex_pg.db.steps`): the same validation, the same SQL statements, the same typed
errors; only the driver differs. Statements go over psycopg's async connections; the
embedder (CPU-bound) runs in a worker thread (``asyncio.to_thread``), so the event loop is
never blocked by it. Transient conflicts (deadlock, serialization failure) are retried as in
the synchronous store, and under ``isolation="rls"`` every transaction acts for the call's
``user_id`` (each asyncio task has its own tenant).

Example::

    store = await AsyncMemoryStore.open(embedder="hashing")
    nid = await store.add("Alice moved to Berlin", user_id="u1")
    hits = await store.search("where does Alice live?", user_id="u1")
    await store.close()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from functools import wraps
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from cortex_pg.db import steps, tenancy
from cortex_pg.db.engine import check_liveness
from cortex_pg.db.retry import aretry_transient
from cortex_pg.store import links as note_links
from cortex_pg.store import traversal, validation
from cortex_pg.store.memory_store import MemoryStore

__all__ = ["AsyncMemoryStore"]


def _async(method: Callable[..., Any], *, on_store: bool = False, tenant: bool = True) -> Callable[..., Any]:
    """The coroutine method that runs ``method``'s plan (a :func:`~cortex_pg.db.steps.operation`)
    on the async engine: same signature and documentation.

    Args:
        on_store: ``method`` is a module function whose first argument is the store (links,
            traversal) rather than a method of it.
        tenant: act for the call's ``user_id`` under RLS (as ``tenant_scoped`` does).
    """
    plan = method.plan  # type: ignore[attr-defined]

    @aretry_transient
    async def call(self: AsyncMemoryStore, *args: Any, **kwargs: Any) -> Any:
        scope = nullcontext()
        if tenant and self.isolation == "rls":
            scope = tenancy.tenant_scope(validation.scope_id(kwargs.get("user_id"), "user_id"))
        with scope:
            return await steps.arun(self.engine, plan(self.sync, *args, **kwargs))

    wrapper = wraps(method)(call)
    steps.show_result(wrapper, plan)
    if on_store:
        wrapper.__doc__ = (
            f"Async :func:`{method.__module__}.{method.__name__}` of this store.\n\n{method.__doc__}"
        )
    else:
        wrapper.__doc__ = f"Async :meth:`MemoryStore.{method.__name__}`.\n\n{method.__doc__}"
    return wrapper


class AsyncMemoryStore:
    """The async API of the store: ``add``, ``add_many``, ``get``, ``update``, ``delete``,
    ``search``, ``get_links``, ``set_links``, ``linked_notes`` (coroutines; arguments, results
    and errors as :class:`~cortex_pg.store.MemoryStore`'s).

    Open with ``await AsyncMemoryStore.open(...)`` (the arguments of :meth:`MemoryStore.open`);
    close with ``await store.close()`` or ``async with``. ``store.sync`` is the synchronous
    store on the same database and settings, for what has no async form yet (``list_notes``,
    ``count``, ``history``, ``stats``, ``delete_where``, ...).

    Attributes:
        engine: the SQLAlchemy ``AsyncEngine`` (psycopg 3 async connections).
        sync: the :class:`MemoryStore` whose settings (embedder, STM capacity, isolation) and
            plans this store runs.
    """

    def __init__(self, store: MemoryStore, engine: AsyncEngine) -> None:
        self.sync = store
        self.engine = engine
        self._owns_sync = True

    @classmethod
    async def open(cls, url: str | None = None, *, pool_size: int = 10, **kwargs: Any) -> AsyncMemoryStore:
        """Open a store (schema check, migration, model registration and the embedded server's
        start run in a worker thread, as :meth:`MemoryStore.open` does them).

        Args:
            url: database URL; else ``DATABASE_URL``; else the embedded server.
            pool_size: async connections kept open (as many again may be opened under load);
                concurrent calls beyond that wait for a connection.
            **kwargs: the keyword arguments of :meth:`MemoryStore.open`.

        Raises:
            The errors of :meth:`MemoryStore.open`; ValidationError: ``pool_size`` < 1.
        """
        import asyncio

        validation.limit(pool_size, "pool_size")
        store = await asyncio.to_thread(MemoryStore.open, url, **kwargs)
        try:
            twin = cls.over(store, pool_size=pool_size, app_role=kwargs.get("app_role"))
        except BaseException:
            store.close()
            raise
        twin._owns_sync = True
        return twin

    @classmethod
    def over(
        cls, store: MemoryStore, *, pool_size: int = 10, app_role: str | None = None
    ) -> AsyncMemoryStore:
        """An async store on the database of the open ``store`` (same settings and plans); its
        :meth:`close` closes the async connections only, ``store`` stays open.

        Raises:
            ValidationError: ``pool_size`` < 1.
        """
        size = validation.limit(pool_size, "pool_size")
        engine = create_async_engine(
            store.engine.url.render_as_string(hide_password=False),
            pool_size=size,
            max_overflow=size,
            connect_args={"options": "-c timezone=UTC"},
        )
        check_liveness(engine.sync_engine)
        if store.isolation == "rls":
            tenancy.install(engine.sync_engine, app_role or tenancy.DEFAULT_APP_ROLE)
        twin = cls(store, engine)
        twin._owns_sync = False
        return twin

    @property
    def embedder(self) -> Any:
        """The :class:`~cortex_pg.embeddings.Embedder` of notes and queries."""
        return self.sync.embedder

    @property
    def isolation(self) -> str:
        """``"none"`` or ``"rls"`` (see :meth:`MemoryStore.open`)."""
        return self.sync.isolation

    add: Callable[..., Awaitable[str]] = _async(MemoryStore.add)
    add_many: Callable[..., Awaitable[list[str]]] = _async(MemoryStore.add_many, tenant=False)
    get = _async(MemoryStore.get)
    update = _async(MemoryStore.update)
    delete: Callable[..., Awaitable[bool]] = _async(MemoryStore.delete)
    search = _async(MemoryStore.search)
    get_links = _async(note_links.get_links, on_store=True)
    set_links = _async(note_links.set_links, on_store=True)
    linked_notes = _async(traversal.linked_notes, on_store=True)

    async def close(self) -> None:
        """Close the async connections, and the synchronous store unless it came from
        :meth:`over`; a second call does nothing."""
        await self.engine.dispose()
        if self._owns_sync:
            self.sync.close()

    async def __aenter__(self) -> AsyncMemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def loop_store(owner: Any, store: MemoryStore) -> AsyncMemoryStore:
    """The async twin of ``store`` (:meth:`AsyncMemoryStore.over`) for the running event loop,
    kept on ``owner`` (a facade); a call from another loop makes a new one (an async
    connection belongs to the loop that opened it). Call from a coroutine only."""
    import asyncio

    loop = asyncio.get_running_loop()
    cached = owner.__dict__.get("_loop_store")
    if cached is None or cached[0] is not loop:
        cached = owner.__dict__["_loop_store"] = (loop, AsyncMemoryStore.over(store))
    return cached[1]
