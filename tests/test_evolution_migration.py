"""Revision 0004 (evolution_jobs, cortex.linked_notes): upgrade, downgrade, no drift."""

from __future__ import annotations

from sqlalchemy import text

from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for
from tests.test_schema import _diff as schema_drift


def test_upgrade_downgrade_upgrade_and_no_drift(empty_db_url):
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine)
        assert schema_drift(engine) == []
        migrate.downgrade(engine, "0003")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('cortex.evolution_jobs')")).scalar() is None
            assert conn.execute(text("SELECT to_regproc('cortex.linked_notes')")).scalar() is None
        migrate.downgrade(engine, "base")
        migrate.upgrade(engine)
        assert schema_drift(engine) == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('cortex.evolution_jobs')")).scalar() is not None
    finally:
        engine.dispose()
