"""Who a request acts for: the user bound to its ``Authorization: Bearer KEY`` header.

Every data route depends on :func:`current_user`. The key is resolved in the database on every
request (``cortex.api_key_user``; a revoked key stops working at once) and is never logged,
echoed in an error or kept in memory beyond the request. Without keys (``auth=False``, for a
service on the loopback interface only) every request acts for the one configured user.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cortex_pg.server import keys
from cortex_pg.server.errors import Unauthorized
from cortex_pg.store import MemoryStore

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `cortex-pg keys create --user U`, sent as `Authorization: Bearer KEY`.",
)


@dataclass(frozen=True)
class Service:
    """What the routes share (``app.state.service``): the store (``isolation="rls"``) and, when
    keys are off, the one user every request acts for."""

    store: MemoryStore
    fixed_user: str | None = None


def service(request: Request) -> Service:
    return request.app.state.service


def current_user(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
    """The user_id of the request's key.

    Raises:
        Unauthorized: no bearer header, or a key that is unknown, revoked or malformed (401).
    """
    svc = service(request)
    if svc.fixed_user is not None:
        return svc.fixed_user
    if credentials is None:
        raise Unauthorized("send 'Authorization: Bearer KEY' with a key from `cortex-pg keys create`")
    user = keys.user_for_key(svc.store.engine, credentials.credentials)
    if user is None:
        raise Unauthorized("unknown or revoked API key")
    return user
