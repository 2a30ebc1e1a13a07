"""The service's one error boundary: cortex_pg errors and bad requests -> HTTP status + JSON body.

Every error response has the body :class:`~cortex_pg.server.schemas.ErrorBody`::

    {"error": {"type": "validation_error", "field": "limit", "reason": "must be ...",
               "message": "limit: must be ...", "details": [{"field": "limit", "reason": "..."}]}}

``field`` names the request's field in the caller's words (a JSON body key such as ``limit``
or ``metadata.x``, a query parameter, the path's ``id``, or ``Authorization``); ``details``
lists every problem when a request has several. Status codes:

=============================================  =====  ====================
error                                          code   type
=============================================  =====  ====================
request body that cannot be decoded            400    bad_request
request body / query / path does not validate  422    validation_error
:class:`~cortex_pg.errors.ValidationError`     422    validation_error
no or unknown bearer key                       401    unauthorized
:class:`~cortex_pg.errors.NotFoundError`       404    not_found
:class:`~cortex_pg.errors.ConflictError`       409    conflict
:class:`~cortex_pg.errors.ReadOnlyError`       405    read_only
:class:`~cortex_pg.errors.DatabaseUnavailableError`,
:class:`~cortex_pg.errors.SchemaError`         503    unavailable
:class:`~cortex_pg.errors.DatabaseError` of a  503    busy (``Retry-After: 1``)
deadlock or serialization failure that
outlasted the store's retries (40P01, 40001)
any other error                                500    server_error
=============================================  =====  ====================

A 5xx says only that the server or its database failed; the details (and a 500's traceback) go
to the log, never to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cortex_pg.errors import (
    TRANSIENT_SQLSTATES,
    ConflictError,
    CortexPGError,
    DatabaseError,
    DatabaseUnavailableError,
    NotFoundError,
    ReadOnlyError,
    SchemaError,
    ValidationError,
)

log = logging.getLogger("cortex_pg.server")

# cortex_pg error class -> (status, type); the first match in this order wins
STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (ValidationError, 422, "validation_error"),
    (NotFoundError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (ReadOnlyError, 405, "read_only"),
    (DatabaseUnavailableError, 503, "unavailable"),
    (SchemaError, 503, "unavailable"),
)
# HTTP statuses raised by the framework or the routes themselves -> type
HTTP_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    503: "unavailable",
}
# the request part of a pydantic location -> how the caller names it
_LOCATIONS = ("body", "query", "path", "header")


class Unauthorized(Exception):
    """No usable ``Authorization: Bearer KEY`` header (401). ``reason`` says which case."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def error_body(
    kind: str, field: str | None, reason: str, details: Sequence[tuple[str | None, str]] = ()
) -> dict[str, Any]:
    """The JSON error body (see the module doc)."""
    listed = list(details) or [(field, reason)]
    return {
        "error": {
            "type": kind,
            "field": field,
            "reason": reason,
            "message": f"{field}: {reason}" if field else reason,
            "details": [{"field": f, "reason": r} for f, r in listed],
        }
    }


def status_of(exc: CortexPGError) -> tuple[int, str]:
    """HTTP status and error type of a cortex_pg error (500 ``server_error`` when unmapped)."""
    if isinstance(exc, DatabaseError) and exc.sqlstate in TRANSIENT_SQLSTATES:
        return 503, "busy"  # conflicting writes outlasted the retries: the request may be sent again
    for cls, status, kind in STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 500, "server_error"


# body fields that are JSON objects keyed by the caller's values (a note id per link)
_KEYED_FIELDS = {"links"}


def field_of(loc: Sequence[Any]) -> str:
    """A pydantic error location as the caller's field name: ``("body", "tags", 0)`` -> ``tags[0]``,
    ``("body", "links", "<id>", "strength")`` -> ``links['<id>'].strength``, ``("query", "limit")``
    -> ``limit``; the body itself (missing or not JSON) -> ``body``."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        head = parts.pop(0)
        if not parts or (head == "body" and isinstance(parts[0], int)):
            return "body"  # the body is missing, or not JSON (the int is a position)
    out = ""
    for i, p in enumerate(parts):
        if isinstance(p, int):
            out += f"[{p}]"
        elif i > 0 and parts[i - 1] in _KEYED_FIELDS and isinstance(parts[i - 1], str):
            out += f"[{p!r}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "body"


# what a missing object was named by in the request: a note by the path's id, an entity by name
_NOT_FOUND_FIELDS = {"note": "id", "entity": "name"}


def _field_of_cortex(exc: CortexPGError) -> tuple[str | None, str]:
    if isinstance(exc, ValidationError):
        return exc.field, exc.reason
    if isinstance(exc, NotFoundError):
        return _NOT_FOUND_FIELDS.get(exc.kind), str(exc)
    if isinstance(exc, ConflictError):
        # (the library's message may start with the field already: "content: another note ...")
        reason = str(exc)
        if exc.field and reason.startswith(f"{exc.field}: "):
            reason = reason[len(exc.field) + 2 :]
        return exc.field, reason
    return None, str(exc)


async def _cortex_error(request: Request, exc: CortexPGError) -> JSONResponse:
    status, kind = status_of(exc)
    if status >= 500:
        # the details (server names, SQL states) are for the operator's log, not the client
        if kind == "busy":
            log.warning(
                "%s %s: conflicting writes outlasted the retries: %s", request.method, request.url.path, exc
            )
            reason = "conflicting writes outlasted the retries; nothing was written, send the request again"
            return JSONResponse(
                error_body(kind, None, reason), status_code=status, headers={"Retry-After": "1"}
            )
        if status == 503:
            log.error("%s %s: database unavailable: %s", request.method, request.url.path, exc)
            reason = "the database is unavailable; try again later (details in the server's log)"
        else:
            log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
            reason = "the server failed; see its log"
        return JSONResponse(error_body(kind, None, reason), status_code=status)
    field, reason = _field_of_cortex(exc)
    return JSONResponse(error_body(kind, field, reason), status_code=status)


async def _request_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    details = []
    for error in exc.errors():
        field = field_of(error.get("loc", ()))
        details.append((field, _reason(error, field)))
    field, reason = details[0] if details else ("body", "invalid request")
    return JSONResponse(error_body("validation_error", field, reason, details), status_code=422)


def _reason(error: dict[str, Any], field: str) -> str:
    kind = error.get("type")
    if kind == "json_invalid":
        return "is not valid JSON"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        if field == "user_id":
            return "is not accepted: the user is the one the API key is bound to"
        return "is not a field of this request"
    return str(error.get("msg", "is invalid"))


async def _unauthorized(request: Request, exc: Unauthorized) -> JSONResponse:
    return JSONResponse(
        error_body("unauthorized", "Authorization", exc.reason),
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    kind = HTTP_TYPES.get(exc.status_code, "http_error")
    reason = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    field = "body" if exc.status_code == 400 else None  # FastAPI's 400: a body it cannot decode
    return JSONResponse(
        error_body(kind, field, reason), status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body("server_error", None, "the server failed; see its log"), status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (the only place errors become responses)."""
    app.add_exception_handler(CortexPGError, _cortex_error)
    app.add_exception_handler(RequestValidationError, _request_error)
    app.add_exception_handler(Unauthorized, _unauthorized)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


_DESCRIPTIONS = {
    400: "The body cannot be decoded (e.g. not UTF-8).",
    401: "No API key, or an unknown or revoked one.",
    404: "No such object for this user.",
    409: "The change conflicts with a stored note (e.g. the same content in the same session).",
    422: "A field of the request is wrong; the body names it.",
    503: "The database is unreachable or not migrated.",
}


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, all with the error body."""
    from cortex_pg.server.schemas import ErrorBody

    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}
