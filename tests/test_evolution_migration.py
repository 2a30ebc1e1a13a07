"""Revision 0003 (evolution_jobs, cortex.linked_notes): upgrade, downgrade, no drift."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from cortex_pg.config import SCHEMA
from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for
from cortex_pg.db.models import Base


def _drift(engine) -> list:

    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "include_object": _include,
                "compare_type": True,
                "version_table_schema": SCHEMA,
            },
        )
        return compare_metadata(ctx, Base.metadata)


def _include(obj, name, type_, reflected, compare_to):  # noqa: ANN001
    if type_ == "table":
        return getattr(obj, "schema", None) == SCHEMA and name != "alembic_version"
    if type_ == "index" and name and name.startswith("ix_embeddings_hnsw_"):
        return False
    return not (reflected and compare_to is None and type_ in ("index", "unique_constraint"))


def test_upgrade_downgrade_upgrade_and_no_drift(empty_db_url):
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine)
        assert _drift(engine) == []
        migrate.downgrade(engine, "0001")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('cortex.evolution_jobs')")).scalar() is None
            assert conn.execute(text("SELECT to_regproc('cortex.linked_notes')")).scalar() is None
        migrate.downgrade(engine, "base")
        migrate.upgrade(engine)
        assert _drift(engine) == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('cortex.evolution_jobs')")).scalar() is not None
    finally:
        engine.dispose()
