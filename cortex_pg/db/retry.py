"""Retrying a transaction that lost a serialization conflict or a deadlock.

PostgreSQL aborts one of two transactions that wait on each other (SQLSTATE ``40P01``) or
that cannot be serialized (``40001``); the aborted one left nothing behind, so running it
again is safe. :func:`retry_transient` wraps a public method whose call is one or more
complete transactions (it opens and commits its own) and runs it again, up to
:data:`ATTEMPTS` times, with exponential backoff and jitter. Nested wrapped calls retry only
at the outermost level (an inner transaction may be part of the outer one). Each retry is
logged at INFO on the ``cortex_pg.db.retry`` logger (what was retried, the SQLSTATE, the
attempt and the wait), so an operator (or the standing program) can count them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from functools import wraps
from typing import Any, TypeVar

from cortex_pg.errors import TRANSIENT_SQLSTATES, DatabaseError

ATTEMPTS = 8
BASE_DELAY = 0.01  # seconds; attempt k waits BASE_DELAY * 2**k * uniform(0.5, 1.5), at most MAX_DELAY
MAX_DELAY = 1.0

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

log = logging.getLogger(__name__)

_active: ContextVar[bool] = ContextVar("cortex_pg_retry_active", default=False)


def retry_transient(fn: F) -> F:
    """Run ``fn`` again when it raised a :class:`DatabaseError` with a transient SQLSTATE.

    Raises:
        DatabaseError: the last attempt's error (after :data:`ATTEMPTS` attempts), or any
            non-transient error at once.
    """

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _active.get():
            return fn(*args, **kwargs)
        token = _active.set(True)
        try:
            for attempt in range(ATTEMPTS):
                try:
                    return fn(*args, **kwargs)
                except DatabaseError as exc:
                    delay = _retry_delay(fn, exc, attempt)
                    if delay is None:
                        raise
                    time.sleep(delay)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            _active.reset(token)

    return wrapper  # type: ignore[return-value]


def aretry_transient(fn: F) -> F:
    """:func:`retry_transient` for a coroutine function (waits with ``asyncio.sleep``)."""

    @wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _active.get():
            return await fn(*args, **kwargs)
        token = _active.set(True)
        try:
            for attempt in range(ATTEMPTS):
                try:
                    return await fn(*args, **kwargs)
                except DatabaseError as exc:
                    delay = _retry_delay(fn, exc, attempt)
                    if delay is None:
                        raise
                    await asyncio.sleep(delay)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            _active.reset(token)

    return wrapper  # type: ignore[return-value]


def call_retrying(fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)`` (a complete transaction of its own) and run it again on a transient error,
    as :func:`retry_transient` does, also inside a wrapped call: for a transaction that is not
    part of the caller's (a job an ``add_note`` runs inline after its own commit).

    Raises:
        DatabaseError: the last attempt's error, or any non-transient error at once.
    """
    for attempt in range(ATTEMPTS):
        try:
            return fn(*args)
        except DatabaseError as exc:
            delay = _retry_delay(fn, exc, attempt)
            if delay is None:
                raise
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def _retry_delay(fn: Callable[..., Any], exc: DatabaseError, attempt: int) -> float | None:
    """Seconds to wait before running ``fn`` again after ``exc`` (logged), or None: give up."""
    if exc.sqlstate not in TRANSIENT_SQLSTATES or attempt == ATTEMPTS - 1:
        return None
    delay = min(MAX_DELAY, BASE_DELAY * 2**attempt * random.uniform(0.5, 1.5))
    log.info(
        "%s: SQLSTATE %s, running it again (attempt %d of %d) in %.0f ms",
        fn.__qualname__,
        exc.sqlstate,
        attempt + 2,
        ATTEMPTS,
        delay * 1000,
    )
    return delay
