"""The HTTP service (``cortex-pg serve``, extra ``server``): a JSON API and the inspector page.

:func:`create_app` builds the FastAPI application (it imports FastAPI, so it is loaded on first
use: ``cortex_pg.server.keys`` works without the extra). Modules: ``app`` (assembly),
``schemas`` (bodies), ``errors`` (the one error boundary), ``auth`` (bearer keys),
``keys`` (the keys' table), ``notes``, ``search``, ``entities``, ``health``, ``ui`` (routes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(*args: Any, **kwargs: Any) -> Any:
    """See :func:`cortex_pg.server.app.create_app`."""
    from cortex_pg.server.app import create_app as build

    return build(*args, **kwargs)
