"""Query strings are strict too: a parameter the route does not declare is refused (422 naming
it) rather than ignored, so ``?limt=5`` is an error, not a silent default; so is a parameter
given twice (``?limit=1&limit=2``), which would otherwise be read as one of its values."""

from __future__ import annotations

from fastapi import Request

from cortex_pg.errors import ValidationError


def no_unknown_query(request: Request) -> None:
    """Router dependency: raise for the first query parameter the matched route does not take,
    or that is given more than once.

    Raises:
        ValidationError: field = the unknown (or repeated) parameter's name.
    """
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


def _query_names(dependant) -> list[str]:  # noqa: ANN001
    """The query parameter names of a route's dependency tree (FastAPI's ``Dependant``)."""
    names = [p.alias for p in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names
