"""Engines: resolving the database URL (external or embedded) and creating SQLAlchemy engines."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from cortex_pg.config import Settings
from cortex_pg.db import embedded
from cortex_pg.errors import ValidationError

# engines shared by the stores of this process, per URL: url -> [engine, number of users]
_shared: dict[tuple[int, str], list] = {}
_shared_lock = threading.Lock()


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver for ``postgres://`` / ``postgresql://`` URLs; keep others as given.

    Raises:
        ValidationError: not a database URL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValidationError(
            "url", f"{url!r} is not a database URL (postgresql://user:pw@host/db)"
        ) from None
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def resolve_url(url: str | None, *, path: str | Path | None = None, settings: Settings | None = None) -> str:
    """The database to use: ``url``, else ``DATABASE_URL``, else the embedded server.

    Args:
        url: explicit SQLAlchemy or libpq URL.
        path: data directory of the embedded server (else ``CORTEX_PG_HOME``, else the user-data dir).
        settings: settings to read; read from the environment when omitted.

    Raises:
        ServerError: the embedded server could not be started.
    """
    settings = settings or Settings()
    chosen = url or settings.database_url
    if chosen:
        return normalize_url(chosen)
    return embedded.start(settings.data_dir(path))


def create_engine_for(url: str, *, pool_size: int = 5) -> Engine:
    """A SQLAlchemy engine with pre-ping, UTC sessions and a bounded pool."""
    return create_engine(
        normalize_url(url),
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"options": "-c timezone=UTC"},
    )


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
