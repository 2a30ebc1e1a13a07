"""Query strings are strict too: a parameter the route does not declare is refused (422 naming
it) rather than ignored, so ``?limt=5`` is an error, not a silent default; so is a parameter
given twice (``?limit=1&limit=2``), which would otherwise be read as one of its values; and so
is a parameter or a path whose percent-encoded bytes are not UTF-8 (``?session_id=%FF``,
``/entities/%FF``), which would otherwise be read with U+FFFD in place of those bytes. An
integer parameter is decimal digits, optionally after a minus sign (so ``?offset=-1`` gets the
route's range message), but not a minus before zero: ``?limit=5_0``, ``?limit=%2B5``,
``?limit=5.0``, ``?limit=%205`` or ``?offset=-0`` is refused, not read as Python's ``int()`` or
pydantic's lax parsing would read it."""

from __future__ import annotations

import re
import types
import typing
from urllib.parse import unquote_to_bytes

from fastapi import Request

from cortex_pg.errors import ValidationError


def no_unknown_query(request: Request) -> None:
    """Router dependency: raise for the first query parameter the matched route does not take,
    or that is given more than once.

    Raises:
        ValidationError: field = the unknown (or repeated) parameter's name, or an integer
            parameter's whose value is not decimal digits (``-`` allowed first, not before a
            zero value such as ``-0``); or the parameter
            (``query string`` when its name is the bad part), or the path parameter (else
            ``path``), whose bytes are not UTF-8.
    """
    _check_utf8(request)
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    allowed = set(_query_names(dependant))
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise ValidationError(unknown[0], f"is not a query parameter of this route (it takes: {known})")
    for name in sorted(allowed & set(request.query_params)):
        given = request.query_params.getlist(name)
        if len(given) > 1:
            raise ValidationError(name, f"is given {len(given)} times ({', '.join(given)}); give it once")
    for name in _integer_names(dependant):
        value = request.query_params.get(name)
        if value is not None and not _DECIMAL.fullmatch(value):
            raise ValidationError(
                name,
                f"must be an integer written in decimal digits, optionally after a minus sign "
                f"(not before zero), got {value!r}",
            )


_DECIMAL = re.compile(r"[0-9]+|-0*[1-9][0-9]*")  # (no minus before zero: -0 is not zero's spelling)


def _query_names(dependant) -> list[str]:  # noqa: ANN001
    """The query parameter names of a route's dependency tree (FastAPI's ``Dependant``)."""
    names = [p.alias for p in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names


def _integer_names(dependant) -> list[str]:  # noqa: ANN001
    """The names of the integer query parameters (``int`` or ``int | None``) of a route's
    dependency tree."""
    names = [p.alias for p in dependant.query_params if _is_int(p.field_info.annotation)]
    for sub in dependant.dependencies:
        names += _integer_names(sub)
    return names


def _is_int(annotation: object) -> bool:
    if annotation is int:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(a is int for a in args)
    return False


_NOT_UTF8 = "is not valid UTF-8 once percent-decoded"


def _decoded(raw: bytes | str) -> str | None:
    """The text of percent-encoded ``raw``, or None when its bytes are not UTF-8."""
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:  # (a lone surrogate, %ED%A0%80, included)
        return None


def _check_utf8(request: Request) -> None:
    """Refuse what Starlette would decode with replacement characters: query parameters and
    path parameters are read from the raw bytes of the request line."""
    for pair in request.scope.get("query_string", b"").split(b"&"):
        name, _, value = pair.partition(b"=")
        key = _decoded(name.replace(b"+", b" "))
        if key is None:
            raise ValidationError("query string", f"a parameter name {_NOT_UTF8}")
        if _decoded(value.replace(b"+", b" ")) is None:
            raise ValidationError(key, _NOT_UTF8)
    raw_path = request.scope.get("raw_path")
    if raw_path is not None and _decoded(raw_path) is None:
        bad = (n for n, v in request.path_params.items() if isinstance(v, str) and "\ufffd" in v)
        raise ValidationError(next(bad, "path"), _NOT_UTF8)
