"""The FastAPI application: :func:`create_app` over one ``isolation="rls"`` MemoryStore.

Routes (OpenAPI at ``/openapi.json``): ``/notes``, ``/notes/{id}``, ``/notes/{id}/links``,
``/notes/{id}/history``, ``/search``, ``/entities``, ``/entities/{name}``,
``/entities/{name}/related``, ``/health``; the read-only inspector page at ``/ui``. Handlers
are synchronous (the store is): FastAPI runs them in its thread pool.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from cortex_pg import __version__
from cortex_pg.errors import ValidationError
from cortex_pg.server import entities, errors, health, notes, search, ui
from cortex_pg.server.auth import Service
from cortex_pg.store import MemoryStore

DESCRIPTION = """Long-term memory for AI agents, in PostgreSQL.

Every data route needs `Authorization: Bearer KEY`, a key from `cortex-pg keys create --user U`;
the key's user is the tenant of every note the request reads or writes (enforced by
Row-Level Security). Errors have the body `{"error": {"type", "field", "reason", "message",
"details"}}`; `field` names the request field that is wrong."""


def create_app(store: MemoryStore, *, auth: bool = True, user_id: str | None = None) -> FastAPI:
    """The HTTP service over ``store``.

    Args:
        store: a store opened with ``isolation="rls"`` (each request's transactions act as its
            key's user under Row-Level Security). The caller closes it.
        auth: require an API key on every data route (default). ``auth=False`` serves one
            user, ``user_id``, to whoever can connect: for a service bound to loopback.
        user_id: the user of every request when ``auth=False``; must be None otherwise.

    Raises:
        ValidationError: ``store`` is not under RLS (field ``store``); ``user_id`` missing with
            ``auth=False`` or given with ``auth=True`` (field ``user_id``).
    """
    if getattr(store, "isolation", None) != "rls":
        raise ValidationError("store", "the HTTP service needs a store opened with isolation='rls'")
    if not auth and user_id is None:
        raise ValidationError("user_id", "without API keys every request acts for one user: give user_id")
    if auth and user_id is not None:
        raise ValidationError("user_id", "only with auth=False (with keys, the key names the user)")
    from cortex_pg.store import validation

    fixed = None if auth else validation.scope_id(user_id, "user_id")
    return _build(Service(store=store, fixed_user=fixed))


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document (a JSON-able dict), without a database: the routes and
    bodies alone decide it (``GET /openapi.json`` serves the same)."""
    return _build(None).openapi()


def _build(service: Service | None) -> FastAPI:
    app = FastAPI(
        title="cortex-pg",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # Swagger UI and ReDoc load their scripts from a CDN; the spec is enough
        redoc_url=None,
    )
    app.state.service = service
    errors.install(app)
    for module in (notes, search, entities, health, ui):
        app.include_router(module.router)
    ui.mount_static(app)
    app.add_api_route("/", lambda: RedirectResponse("/ui"), include_in_schema=False)
    return app
