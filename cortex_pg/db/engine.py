"""Engines: resolving the database URL (external or embedded) and creating SQLAlchemy engines."""

from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from cortex_pg.config import Settings
from cortex_pg.db import embedded
from cortex_pg.errors import ValidationError

# engines shared by the stores of this process, per URL: url -> [engine, number of users]
_shared: dict[tuple[int, str], list] = {}
_shared_lock = threading.Lock()


#: the drivers a URL may name: PostgreSQL through psycopg 3 (``postgres://`` and
#: ``postgresql://`` are given it)
SUPPORTED_DRIVERS = ("postgres", "postgresql", "postgresql+psycopg")


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver for ``postgres://`` / ``postgresql://`` URLs.

    Raises:
        ValidationError: ``url``: not a database URL, a database other than PostgreSQL or a
            driver other than psycopg 3, or a port that is not a number from 1 to 65535.
    """
    example = "postgresql://user:pw@host/db"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValidationError(
            "url", f"{_without_credentials(url)!r} is not a database URL ({example})"
        ) from None
    except ValueError:  # the port is not a number (SQLAlchemy's int())
        raise ValidationError("url", "its port is not a number from 1 to 65535") from None
    # (the messages below do not repeat the URL: it may hold a password)
    if parsed.drivername not in SUPPORTED_DRIVERS:
        raise ValidationError(
            "url",
            f"{parsed.drivername!r} is not PostgreSQL with a supported driver "
            f"(postgresql:// or postgresql+psycopg://, e.g. {example})",
        )
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ValidationError("url", f"its port {parsed.port} is not from 1 to 65535")
    parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _without_credentials(url: str) -> str:
    """``url`` for a message: what stands before its last ``@`` (a user and password) shown as
    ``…`` (``" postgresql://u:pw@host/db"`` -> ``" postgresql://…@host/db"``)."""
    if "@" not in url:
        return url
    scheme = url.find("//")
    head = url[: scheme + 2] if 0 <= scheme < url.rfind("@") else ""
    return f"{head}…@{url.rsplit('@', 1)[1]}"


def resolve_url(url: str | None, *, path: str | Path | None = None, settings: Settings | None = None) -> str:
    """The database to use: ``url``, else ``DATABASE_URL``, else the embedded server.

    Args:
        url: explicit SQLAlchemy or libpq URL.
        path: data directory of the embedded server (else ``CORTEX_PG_HOME``, else the user-data dir).
        settings: settings to read; read from the environment when omitted.

    Raises:
        ServerError: the embedded server could not be started.
        ValidationError: ``url`` (see :func:`normalize_url`); the data directory is a file or
            cannot be created (field ``path`` when given, else ``home``).
    """
    settings = settings or Settings()
    chosen = url or settings.database_url
    if chosen:
        return normalize_url(chosen)
    # (a bad directory names where it came from: path=, else the home setting, CORTEX_PG_HOME)
    return embedded.start(settings.data_dir(path), field="path" if path is not None else "home")


def create_engine_for(url: str, *, pool_size: int = 5) -> Engine:
    """A SQLAlchemy engine with UTC sessions, a bounded pool and :func:`check_liveness`."""
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"options": "-c timezone=UTC"},
    )
    check_liveness(engine)
    return engine


#: seconds a pooled connection may sit unused and still be taken without a ping
PING_AFTER_IDLE = 30.0


def check_liveness(engine: Engine) -> None:
    """Make sure each connection the pool hands out still reaches the server, mostly without
    asking it.

    SQLAlchemy's ``pool_pre_ping`` sends a query before every use: a round trip, 0.3 ms of a
    5 ms search on a 2-core machine. A server that ends a connection (restart, crash, a
    terminated backend) closes its socket, often after a last error message, so the socket of
    a dead idle connection has something to read; a live idle one has nothing. The check
    polls the socket (no round trip) and pings only when it has data, or when the connection
    has been idle for :data:`PING_AFTER_IDLE` seconds or more (a firewall or load balancer
    drops idle connections without a word); a failed ping makes the pool replace the
    connection (``DisconnectionError``, SQLAlchemy's disconnect handling). A driver without
    a socket to poll is pinged every time. ``engine`` may be the ``sync_engine`` of an
    ``AsyncEngine``.
    """

    @event.listens_for(engine.pool, "checkin")
    def _idle_from(_dbapi_conn: Any, record: Any) -> None:
        record.info["cortex_pg_idle_since"] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def _check(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("cortex_pg_idle_since", None)
        if since is None:  # just connected (no check-in yet)
            return
        if time.monotonic() - since < PING_AFTER_IDLE and _quiet(record.driver_connection):
            return
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except Exception:  # noqa: BLE001 - any failure of the ping means a dead connection
            alive = False
        if not alive:
            raise DisconnectionError("the server closed this pooled connection")


def _quiet(driver_conn: Any) -> bool:
    """Whether an idle connection's socket has nothing to read (False when it cannot tell)."""
    try:
        fd = driver_conn.pgconn.socket
        if hasattr(select, "poll"):  # any descriptor (select() takes none above 1023)
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)  # hang-up and error come anyway
            return not poller.poll(0)
        readable, _, _ = select.select([fd], [], [], 0)  # Windows: no poll(), no such limit
    except Exception:  # noqa: BLE001 - no socket (closed, or another driver): ping
        return False
    return not readable


def acquire_engine(url: str, *, pool_size: int = 5) -> Engine:
    """The engine shared by every store of this process on ``url`` (created on first use).

    Each ``MemoryStore.open`` on one URL would otherwise add a pool of its own, and a process
    opening many stores would run the server out of connections. Call :func:`release_engine`
    once per acquire; the engine is disposed when its last user releases it. Keyed by process
    id as well, so a forked child never uses its parent's connections.
    """
    key = (os.getpid(), normalize_url(url))
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None:
            entry = _shared[key] = [create_engine_for(url, pool_size=pool_size), 0]
        entry[1] += 1
        return entry[0]


def release_engine(engine: Engine) -> None:
    """Give back an engine from :func:`acquire_engine`; the last user's release disposes it."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is engine:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _shared[key]
                    engine.dispose()
                return
    engine.dispose()  # not shared (or already released by every user)


def shared_users(engine: Engine) -> int:
    """How many stores of this process hold ``engine`` (0 when it is not shared)."""
    with _shared_lock:
        return next((entry[1] for entry in _shared.values() if entry[0] is engine), 0)
