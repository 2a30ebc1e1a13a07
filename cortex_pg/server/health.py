"""``GET /health``: the service is up and reaches its database (no key needed)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import text

from cortex_pg import __version__
from cortex_pg.errors import translate_db_errors
from cortex_pg.server.auth import Service, service
from cortex_pg.server.errors import documented
from cortex_pg.server.params import no_unknown_query
from cortex_pg.server.schemas import Health

router = APIRouter(tags=["service"], dependencies=[Depends(no_unknown_query)])


@router.get("/health", response_model=Health, responses=documented(503))
def health(svc: Service = Depends(service)) -> Health:
    """200 when a query runs on the database; 503 (``unavailable``) when it cannot be reached."""
    with translate_db_errors(), svc.store.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    return Health(status="ok", database="ok", version=__version__)
