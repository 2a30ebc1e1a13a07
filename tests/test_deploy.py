"""Deployments: `alembic upgrade head` from the repository and `cortex-pg db upgrade` build the
same schema; the docker-compose file is valid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import text

from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for

ROOT = Path(__file__).resolve().parents[1]

CATALOG = """
SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
FROM information_schema.columns WHERE table_schema = 'cortex'
UNION ALL
SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'cortex'
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'cortex' AND p.prokind = 'f'
UNION ALL
SELECT 'trigger ' || tgname || ' ' || tgrelid::regclass::text FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'cortex' AND NOT t.tgisinternal
UNION ALL
SELECT 'policy ' || tablename || '.' || policyname || ' ' || qual FROM pg_policies WHERE schemaname = 'cortex'
UNION ALL
SELECT 'view ' || viewname || ' ' || md5(definition) FROM pg_views WHERE schemaname = 'cortex'
UNION ALL
SELECT 'persistence ' || relname || ' ' || relpersistence::text FROM pg_class c JOIN pg_namespace n
ON n.oid = c.relnamespace WHERE n.nspname = 'cortex' AND c.relkind = 'r'
ORDER BY 1
"""


def _catalog(url: str) -> list[str]:
    engine = create_engine_for(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(CATALOG)).scalars())
    finally:
        engine.dispose()


def test_alembic_cli_and_cortex_pg_db_upgrade_build_the_same_schema(server_url, empty_db_url):
    from tests.conftest import create_database, drop_database

    env = {**os.environ, "DATABASE_URL": empty_db_url}
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    other = create_database(server_url, "cortex_t_cli_upgrade")
    try:
        env2 = {**os.environ, "DATABASE_URL": other}
        out = subprocess.run(
            [sys.executable, "-m", "cortex_pg", "db", "upgrade"],
            cwd="/",
            env=env2,
            check=True,
            capture_output=True,
            text=True,
        )
        assert migrate.head_revision() in out.stdout
        a, b = _catalog(empty_db_url), _catalog(other)
        assert a == b
        assert any(x.startswith("policy notes.tenant_isolation") for x in a)
        assert "persistence stm_notes u" in a
    finally:
        drop_database(server_url, "cortex_t_cli_upgrade")


def test_a_database_upgraded_step_by_step_equals_a_fresh_one(server_url, empty_db_url, db_url):
    from alembic.script import ScriptDirectory

    engine = create_engine_for(empty_db_url)
    try:
        revisions = [
            r.revision for r in ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()
        ]
        for rev in reversed(revisions):
            migrate.upgrade(engine, rev)
    finally:
        engine.dispose()
    assert _catalog(empty_db_url) == _catalog(db_url)


def test_compose_file_is_valid():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    db = compose["services"]["db"]
    assert db["image"].startswith("pgvector/pgvector:pg17")
    assert "healthcheck" in db and "pg_isready" in " ".join(db["healthcheck"]["test"])
    volume = db["volumes"][0].split(":")[0]
    assert volume in compose["volumes"]
    migrate_svc = compose["services"]["migrate"]
    assert migrate_svc["depends_on"]["db"]["condition"] == "service_healthy"
    assert "cortex-pg db upgrade" in " ".join(migrate_svc["command"])
    assert migrate_svc["environment"]["DATABASE_URL"].startswith("postgresql://")
    assert migrate_svc["restart"] == "no"
