"""Fixtures of the HTTP service's tests (imported by them): an ``isolation="rls"`` store on a fresh
database, the owner's engine (to create API keys, as ``cortex-pg keys create`` does), the app
and an in-process client."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from cortex_pg.db.engine import create_engine_for
from cortex_pg.server import create_app
from cortex_pg.server.keys import create_key
from cortex_pg.store import MemoryStore


@pytest.fixture
def rls_store(db_url: str) -> Iterator[MemoryStore]:
    s = MemoryStore.open(
        db_url, embedder="hashing", auto_migrate=False, isolation="rls", extract_entities=True
    )
    yield s
    s.close()


@pytest.fixture
def owner_engine(db_url: str):  # noqa: ANN201
    engine = create_engine_for(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def key_for(owner_engine) -> Callable[[str], str]:  # noqa: ANN001
    """``key_for(user)`` -> a new working API key bound to ``user``."""
    return lambda user: create_key(owner_engine, user).key


@pytest.fixture
def app(rls_store: MemoryStore):  # noqa: ANN201
    return create_app(rls_store)


@pytest.fixture
def client(app):  # noqa: ANN001, ANN201
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
