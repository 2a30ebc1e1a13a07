"""Engines: resolving the database URL (external or embedded) and creating SQLAlchemy engines."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from cortex_pg.config import Settings
from cortex_pg.db import embedded
from cortex_pg.errors import ValidationError


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
