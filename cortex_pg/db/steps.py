"""Database work written once, run by a synchronous and an asynchronous driver.

A store operation is a *plan*: a generator that yields steps and receives their results,

* :class:`Query` — run one SQL statement in the current transaction; the reply is the result
  fetched as ``fetch`` says (``"all"`` rows, ``"mappings"``, ``"first"``, ``"one"``,
  ``"mapping_one"``, ``"scalar"``, ``"scalar_one"``, ``"scalar_one_or_none"``, ``"scalars"``
  or ``"none"``);
* :class:`Blocking` — call a blocking function (the embedder); the async driver runs it in a
  thread (``asyncio.to_thread``) so the event loop is never blocked; inside a transaction, in
  a pool of its own (:data:`TRANSACTION_THREADS`), so an open transaction, which may hold
  locks, never waits for a thread behind blocking work that waits for those locks;
* :class:`WithConnection` — call ``fn(conn)`` with a synchronous SQLAlchemy ``Connection`` on
  the current transaction (helpers written for one, such as ``links.write_links``); the async
  driver uses ``AsyncConnection.run_sync``, whose database I/O is still asynchronous;
* :class:`Transaction` — run a nested plan in a transaction of its own
  (``engine.begin()``, errors translated by :func:`~cortex_pg.errors.translate_db_errors`);
  the reply is the nested plan's return value;
* :class:`Alone` — one statement that is a whole transaction by itself (a search), outside
  any :class:`Transaction`: sent in autocommit mode, it costs one round trip to the server
  where a transaction costs three (``BEGIN``, the statement, ``COMMIT``). An engine that sets
  something at every transaction's start (``begin`` listeners: ``isolation="rls"`` sets the
  tenant there) runs it in a transaction of its own instead, so the setting holds. Its rows
  come back as dicts, read by psycopg's own cursor (see :func:`driver_rows`);

and returns the operation's result. :func:`run` drives a plan on an ``Engine``;
:func:`arun` on an ``AsyncEngine``. Every statement is defined once, in the plan; the drivers
only execute. :func:`operation` turns a plan method into the synchronous method of
:class:`~cortex_pg.store.MemoryStore` and keeps the plan as its ``plan`` attribute, for
:class:`~cortex_pg.store.async_store.AsyncMemoryStore`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import re
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar

from psycopg.rows import dict_row
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from cortex_pg.errors import translate_db_errors

T = TypeVar("T")
Plan = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Query:
    """One SQL statement (named ``:params``) and how to fetch its result."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)
    fetch: str = "all"


@dataclass(frozen=True, slots=True)
class Blocking:
    """A blocking call, ``fn(*args)``; its return value is the reply."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class WithConnection:
    """``fn(conn)`` on the current transaction's synchronous Connection."""

    fn: Callable[[Connection], Any]


@dataclass(frozen=True, slots=True)
class Transaction:
    """A nested plan run in a transaction of its own."""

    plan: Plan[Any]


@dataclass(frozen=True, slots=True)
class Alone:
    """One statement run as its own transaction (see the module's docstring); SQL as
    :class:`Query`; the reply is its rows, each a ``dict`` of column name to value. For a
    statement whose work is all in one statement: nothing else may need to see its effects in
    the same transaction."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


# the rule of SQLAlchemy 2.1's text() for a parameter: ``:name`` neither after a colon, a word
# character or a backslash (which makes the colon literal) nor before a colon
_NAMED_PARAMETER = re.compile(r"(?<![:\w\\]):(\w+)(?![:\w])")


@functools.lru_cache(maxsize=64)
def driver_sql(sql: str) -> str:
    """``sql`` with its ``:name`` parameters in the driver's ``%(name)s`` style (a literal
    ``%`` doubled, ``\\:`` unescaped), by the rule of SQLAlchemy's ``text()``, for
    ``exec_driver_sql``, which skips ``text()``'s compilation. As with ``text()``, a ``:word``
    inside a string literal is taken for a parameter."""
    return _NAMED_PARAMETER.sub(r"%(\1)s", sql.replace("%", "%%")).replace("\\:", ":")


def _sets_per_transaction(engine: Engine) -> bool:
    """Whether ``engine`` runs listeners at each transaction's start (see :class:`Alone`)."""
    return bool(engine.dispatch.begin)


_FETCH: dict[str, Callable[[Any], Any]] = {
    "all": lambda r: r.all(),
    "mappings": lambda r: r.mappings().all(),
    "first": lambda r: r.first(),
    "one": lambda r: r.one(),
    "mapping_one": lambda r: r.mappings().one(),
    "scalar": lambda r: r.scalar(),
    "scalar_one": lambda r: r.scalar_one(),
    "scalar_one_or_none": lambda r: r.scalar_one_or_none(),
    "scalars": lambda r: r.scalars().all(),
    "none": lambda r: None,
}


def statement(sql: str, params: Mapping[str, Any] | None = None, fetch: str = "all") -> Transaction:
    """A transaction of one statement; the reply is its fetched result."""

    def plan() -> Plan[Any]:
        return (yield Query(sql, params or {}, fetch))

    return Transaction(plan())


def on_connection(fn: Callable[[Connection], Any]) -> Transaction:
    """A transaction that calls ``fn(conn)`` (see :class:`WithConnection`); the reply is its result."""

    def plan() -> Plan[Any]:
        return (yield WithConnection(fn))

    return Transaction(plan())


def _fetch(result: Any, how: str) -> Any:
    return _FETCH[how](result)


def run(engine: Engine, plan: Plan[T], conn: Connection | None = None) -> T:
    """Drive ``plan`` synchronously; ``conn`` is the current transaction (None outside one).

    Raises:
        RuntimeError: a ``Query`` or ``WithConnection`` outside a transaction, or a nested
            ``Transaction``.
        Whatever the plan raises (database errors translated at each transaction's end).
    """
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(reply)
        except StopIteration as stop:
            return stop.value
        reply, error = None, None
        try:
            if isinstance(step, Blocking):
                reply = step.fn(*step.args)
            elif isinstance(step, Transaction):
                _check_outside(conn)
                with translate_db_errors(), engine.begin() as tx:
                    reply = run(engine, step.plan, tx)
            elif isinstance(step, Alone):
                _check_outside(conn)
                reply = _run_alone(engine, step)
            else:
                reply = _execute(_inside(conn, step), step)
        except Exception as exc:  # handed to the plan, which may catch it or let it leave
            error = exc


def in_transaction(conn: Connection, plan: Plan[T]) -> T:
    """Drive ``plan`` (no nested transactions) on the caller's transaction ``conn``."""
    return run(conn.engine, plan, conn)


#: threads of :func:`arun`'s blocking steps inside a transaction (the embedding of the notes it
#: writes): apart from the event loop's default pool, which also runs blocking work done outside
#: any transaction (a facade's inline processing) that may wait for the locks such a transaction
#: holds; sharing one pool, concurrent writers of one session could each wait for the other.
TRANSACTION_THREADS = ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="cortex-pg-transaction"
)


async def arun(engine: AsyncEngine, plan: Plan[T], conn: AsyncConnection | None = None) -> T:
    """Drive ``plan`` on the event loop: SQL on ``engine``'s async connections, blocking calls
    in a worker thread. Same contract as :func:`run`."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(reply)
        except StopIteration as stop:
            return stop.value
        reply, error = None, None
        try:
            if isinstance(step, Blocking) and conn is None:
                reply = await asyncio.to_thread(step.fn, *step.args)
            elif isinstance(step, Blocking):
                call = functools.partial(contextvars.copy_context().run, step.fn, *step.args)
                reply = await asyncio.get_running_loop().run_in_executor(TRANSACTION_THREADS, call)
            elif isinstance(step, Transaction):
                _check_outside(conn)
                with translate_db_errors():
                    async with engine.begin() as tx:
                        reply = await arun(engine, step.plan, tx)
            elif isinstance(step, Alone):
                _check_outside(conn)
                reply = await _arun_alone(engine, step)
            elif isinstance(step, WithConnection):
                reply = await _inside(conn, step).run_sync(step.fn)
            else:
                result = await _inside(conn, step).execute(text(step.sql), dict(step.params))
                reply = _fetch(result, step.fetch)
        except Exception as exc:
            error = exc


def _run_alone(engine: Engine, step: Alone) -> list[dict[str, Any]]:
    statement, params = driver_sql(step.sql), dict(step.params)
    with translate_db_errors():
        if _sets_per_transaction(engine):
            with engine.begin() as conn:
                return driver_rows(conn, statement, params)
        with engine.connect() as conn:
            return driver_rows(conn.execution_options(isolation_level="AUTOCOMMIT"), statement, params)


async def _arun_alone(engine: AsyncEngine, step: Alone) -> list[dict[str, Any]]:
    statement, params = driver_sql(step.sql), dict(step.params)
    with translate_db_errors():
        if _sets_per_transaction(engine.sync_engine):
            async with engine.begin() as conn:
                return await _adriver_rows(conn, statement, params)
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return await _adriver_rows(conn, statement, params)


def driver_rows(conn: Connection, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run ``statement`` (in the driver's ``%(name)s`` style, see :func:`driver_sql`) on
    ``conn``'s psycopg connection itself; its rows as dicts.

    For the statement on every agent turn's path (a search): SQLAlchemy's result objects cost
    about 0.5 ms of a 4 ms vector-only search (27 columns, 10 rows; ``benchmarks/perf.py``),
    which this skips. The rows are read in text format, as SQLAlchemy reads them (in binary, a
    ``real`` such as an importance of 0.7 would come back as the float32 0.699999988...). What
    SQLAlchemy's execution does besides is kept: a driver error is raised as SQLAlchemy's
    ``DBAPIError`` (so :func:`~cortex_pg.errors.translate_db_errors` types it), and an error that
    shows the connection broken invalidates it and every connection the pool held before it
    (:func:`_invalidate`), so that the pool replaces them.
    """
    driver = conn.connection.driver_connection
    try:
        with driver.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, params)
            return cur.fetchall()
    except conn.dialect.loaded_dbapi.Error as exc:
        broken = conn.dialect.is_disconnect(exc, driver, None)
        if broken:
            _invalidate(conn, exc)
        raise _dbapi_error(conn.dialect, statement, params, exc, broken) from exc


async def _adriver_rows(
    conn: AsyncConnection, statement: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """:func:`driver_rows` on an async connection (psycopg's ``AsyncConnection``)."""
    driver = (await conn.get_raw_connection()).driver_connection
    try:
        async with driver.cursor(row_factory=dict_row) as cur:
            await cur.execute(statement, params)
            return await cur.fetchall()
    except conn.dialect.loaded_dbapi.Error as exc:
        broken = conn.dialect.is_disconnect(exc, driver, None)
        if broken:  # in SQLAlchemy's greenlet, where closing the driver's connection can await
            await conn.run_sync(_invalidate, exc)
        raise _dbapi_error(conn.dialect, statement, params, exc, broken) from exc


def _invalidate(conn: Connection, exc: Exception) -> None:
    """What SQLAlchemy does when its own execution meets a disconnect
    (``Connection._handle_dbapi_exception``): the pool counts every connection it handed out
    before now as stale and replaces each at its next checkout (a server that went away took
    them all with it; ``Pool._invalidate``, which also invalidates ``conn``'s connection), and
    ``conn`` is marked invalid."""
    if not conn.invalidated:
        conn.engine.pool._invalidate(conn.connection, exc)
        conn.invalidate(exc)


def _dbapi_error(
    dialect: Any, statement: str, params: dict[str, Any], exc: Exception, broken: bool
) -> DBAPIError:
    """``exc``, a driver error, as SQLAlchemy raises it from its own execution."""
    return DBAPIError.instance(
        statement, params, exc, dialect.loaded_dbapi.Error, connection_invalidated=broken, dialect=dialect
    )


def _execute(conn: Connection, step: Any) -> Any:
    if isinstance(step, WithConnection):
        return step.fn(conn)
    if isinstance(step, Query):
        return _fetch(conn.execute(text(step.sql), dict(step.params)), step.fetch)
    raise RuntimeError(f"a plan yielded {step!r}, which is not a step")


def _inside(conn: Any, step: Any) -> Any:
    if conn is None:
        raise RuntimeError(f"{type(step).__name__} outside a Transaction")
    return conn


def _check_outside(conn: Any) -> None:
    if conn is not None:
        raise RuntimeError("a Transaction inside a Transaction")


def operation(
    plan_fn: Callable[..., Plan[T]] | None = None, *, engine: Callable[[Any], Engine] | None = None
) -> Any:
    """A method that runs the plan ``plan_fn(self, ...)`` synchronously, on ``self.engine``
    (or ``engine(self)``); the plan stays reachable as ``method.plan``. Use as ``@operation``
    or ``@operation(engine=...)``."""
    if plan_fn is None:
        return lambda fn: operation(fn, engine=engine)
    engine_of = engine or _engine_attribute

    @wraps(plan_fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> T:
        return run(engine_of(self), plan_fn(self, *args, **kwargs))

    method.plan = plan_fn  # type: ignore[attr-defined]
    show_result(method, plan_fn)
    return method


def async_operation(
    method: Callable[..., Any], *, engine: Callable[[Any], AsyncEngine]
) -> Callable[..., Any]:
    """The coroutine method that runs ``method``'s plan (an :func:`operation`) on
    ``engine(self)``, an ``AsyncEngine``; same signature, documentation introduced as its async form."""
    plan = method.plan  # type: ignore[attr-defined]

    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await arun(engine(self), plan(self, *args, **kwargs))

    wrapped = wraps(method)(call)
    wrapped.__name__ = wrapped.__qualname__ = f"a{method.__name__}"
    wrapped.__doc__ = f":meth:`{method.__name__}` on asyncio (async connections).\n\n{method.__doc__}"
    show_result(wrapped, plan)
    return wrapped


def _engine_attribute(owner: Any) -> Any:
    return owner.engine


def show_result(method: Callable[..., Any], plan_fn: Callable[..., Any]) -> None:
    """Give ``method`` (which runs ``plan_fn``'s plan) ``plan_fn``'s signature and annotations
    with the return type ``Plan[T]`` read as ``T``, what the method returns."""
    annotations = dict(plan_fn.__annotations__)
    ret = annotations.get("return")
    if isinstance(ret, str) and ret.startswith("Plan[") and ret.endswith("]"):
        annotations["return"] = ret = ret[len("Plan[") : -1]
    method.__annotations__ = annotations
    method.__signature__ = inspect.signature(plan_fn).replace(return_annotation=ret)  # type: ignore[attr-defined]


def plan_of(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Plan[Any]:
    """The plan of a bound :func:`operation` method called with these arguments (for a plan
    that runs another operation: ``note = yield from plan_of(self.get, id)``)."""
    return method.plan(method.__self__, *args, **kwargs)  # type: ignore[attr-defined]
