"""Alembic environment: the cortex schema, its version table inside it, and no foreign objects.

A caller may hand over an open connection in ``config.attributes["connection"]`` (the store
and the tests do); otherwise the URL comes from ``sqlalchemy.url``, ``DATABASE_URL``, or the
embedded server.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from cortex_pg.config import SCHEMA
from cortex_pg.db.migrate import include_object
from cortex_pg.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:  # noqa: ANN001
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table_schema=SCHEMA,
        include_schemas=True,
        include_object=include_object,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from cortex_pg.db.engine import create_engine_for, resolve_url

    url = config.get_main_option("sqlalchemy.url") or resolve_url(None)
    engine = create_engine_for(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: the SQL files need a live server")
run_migrations_online()
