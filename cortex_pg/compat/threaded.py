"""Coroutine forms of facade methods that run the synchronous method in a worker thread.

Used where a facade call spans several stores and statements (calute's
``build_context_for_task``, ``save_task_result``, the shelves' ``save`` / ``search``): the
coroutine gives the event loop back while the call runs (``asyncio.to_thread``), with the
same arguments, results and errors as the synchronous method.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import wraps
from typing import Any


def threaded(method: Callable[..., Any]) -> Callable[..., Any]:
    """``async def a<name>(self, ...)``: ``method(self, ...)`` in a worker thread."""

    @wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    call.__name__ = call.__qualname__ = f"a{method.__name__}"
    call.__doc__ = (
        f":meth:`{method.__name__}` for asyncio: run in a worker thread, so the event loop is not "
        f"blocked; same arguments, result and errors.\n\n{method.__doc__ or ''}"
    )
    return call
