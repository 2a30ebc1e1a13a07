"""Alembic environment: the cortex schema, its version table inside it, and no foreign objects.

A caller may hand over an open connection in ``config.attributes["connection"]`` (the store
and the tests do); otherwise the URL comes from ``sqlalchemy.url``, ``DATABASE_URL``, or the
embedded server.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from cortex_pg.config import SCHEMA
from cortex_pg.db.models import Base

config = context.config
target_metadata = Base.metadata


def include_object(obj, name, type_, reflected, compare_to):  # noqa: ANN001
    """Compare only objects of the cortex schema that the models declare.

    Per-model HNSW indexes (``ix_embeddings_hnsw_*``) and objects created by the SQL files
    (functions, triggers) are not models; a reflected object with no model counterpart is
    one of those and is skipped.
    """
    if type_ == "table":
        return getattr(obj, "schema", None) == SCHEMA and name != "alembic_version"
    if type_ == "index" and name and name.startswith("ix_embeddings_hnsw_"):
        return False
    return not (reflected and compare_to is None and type_ in ("index", "unique_constraint"))


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
