"""Short-term memory lost to crash recovery: found in SQL, said to the caller.

``cortex.stm_notes`` is UNLOGGED, so PostgreSQL empties it when it recovers from a crash; a
clean restart keeps it. Which sessions lost their STM is known exactly from the database
(``sql/functions/stm_loss/v1.sql``: a logged row and an unlogged mark per session that had
STM; recovery empties the marks with the notes; ``v3.sql``: each loss is counted once and
dated at the crash recovery that emptied it, also when only a backend crashed and the
postmaster stayed). This module says so:

* :meth:`STMLossReader.stm_losses` / :meth:`~STMLossReader.stm_lost_at` (and the
  ``stm_lost_at`` / ``stm_lost_sessions`` fields of ``MemoryStore.stats()``) report it any time;
* :func:`check_on_open` (run by ``MemoryStore.open()``): the first store opened after a reset
  logs a WARNING and issues :class:`~cortex_pg.errors.STMLostWarning` with the counts;
* :func:`report_unwritten` (the facades' short-term reads): a read of a scope whose lost STM
  has not been written to since logs and warns, once per store, user, sessions and loss.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from cortex_pg.db.retry import retry_transient
from cortex_pg.errors import STMLostWarning, translate_db_errors
from cortex_pg.store import validation
from cortex_pg.store.rows import tenant_scoped

log = logging.getLogger(__name__)

LOSSES = "SELECT user_id, session_id, lost_at, written_since FROM cortex.stm_losses(:u, :s)"


@dataclass(frozen=True)
class STMLoss:
    """One session whose short-term memory crash recovery emptied.

    Attributes:
        user_id, session_id: the scope.
        lost_at: timezone-aware UTC time of the crash recovery that emptied the STM (the
            server's last one when several happened before anything looked; never before
            the session's STM began). The latest loss when there were several.
        written_since: STM was written to the scope after the loss (False: what it held is
            gone and nothing has replaced it).
    """

    user_id: str
    session_id: str
    lost_at: datetime
    written_since: bool


class STMLossReader:
    """The STM-loss methods of :class:`~cortex_pg.store.MemoryStore` (a mixin over its ``engine``)."""

    @tenant_scoped
    def stm_losses(self, *, user_id: str | None = None, session_id: str | None = None) -> list[STMLoss]:
        """Sessions whose short-term memory was emptied by crash recovery, by user then session.

        Args:
            user_id: one user (None: every user; under ``isolation="rls"`` the ``"default"`` tenant).
            session_id: one session of that user (None: all).

        Raises:
            ValidationError: a bad user or session id.
        """
        uid = validation.optional_scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        with translate_db_errors(), self.engine.connect() as conn:  # type: ignore[attr-defined]
            rows = conn.execute(text(LOSSES), {"u": uid, "s": sid}).all()
        return [STMLoss(r.user_id, r.session_id, r.lost_at, r.written_since) for r in rows]

    def stm_lost_at(self, *, user_id: str | None = None, session_id: str | None = None) -> datetime | None:
        """When crash recovery last emptied the user's (session's; anyone's with no user) short-term
        memory: the time of the crash recovery that emptied it, timezone-aware UTC;
        None when it never happened. Long-term memory is never lost this way.

        Raises:
            ValidationError: a bad user or session id.
        """
        losses = self.stm_losses(user_id=user_id, session_id=session_id)
        return max((x.lost_at for x in losses), default=None)


@retry_transient  # (its row locks may meet a writer's in another order: a deadlock is retried)
def check_on_open(store: Any) -> STMLostWarning | None:
    """Run ``cortex.stm_check()`` (one read unless the server was reset since the last check);
    when this call is the first to look after a reset that emptied STM, log a WARNING and
    issue :class:`STMLostWarning` (``user_id`` None, ``sessions`` and ``users`` counts).

    Returns:
        The warning issued, or None.
    """
    with translate_db_errors(), store.engine.begin() as conn:
        row = conn.execute(text("SELECT lost_at, sessions, users FROM cortex.stm_check()")).first()
    if row is None:
        return None
    message = (
        f"short-term memory was emptied by the database server's crash recovery (at "
        f"{_when(row.lost_at)}): {row.sessions} session(s) of {row.users} user(s) lost what STM "
        "held; long-term memory is intact and STM fills again as notes are added "
        "(MemoryStore.stm_losses() or SELECT * FROM cortex.stm_losses() lists them)"
    )
    return _issue(message, lost_at=row.lost_at, user_id=None, sessions=row.sessions, users=row.users)


def report_unwritten(store: Any, user_id: str, session_id: str | None = None) -> STMLostWarning | None:
    """Say so when a short-term read of ``user_id`` (one session, or all) reaches sessions whose
    STM crash recovery emptied and that nothing was written to since: log a WARNING and issue
    :class:`STMLostWarning`, once per store, user, set of sessions and loss time.

    Returns:
        The warning issued, or None (nothing lost, or already said by this store).
    """
    lost = [x for x in store.stm_losses(user_id=user_id, session_id=session_id) if not x.written_since]
    if not lost:
        return None
    sessions = tuple(x.session_id for x in lost)
    lost_at = max(x.lost_at for x in lost)
    said: set[tuple[str, tuple[str, ...], datetime]] = store.__dict__.setdefault("_stm_losses_said", set())
    key = (user_id, sessions, lost_at)
    if key in said:
        return None
    said.add(key)
    message = (
        f"short-term memory of user {user_id!r} ({_sessions(sessions)}) was emptied by the "
        f"database server's crash recovery (at {_when(lost_at)}) and nothing has been "
        "written to it since: what it held before is gone (long-term memory is intact)"
    )
    return _issue(message, lost_at=lost_at, user_id=user_id, sessions=sessions, users=1)


def _issue(message: str, **fields: Any) -> STMLostWarning:
    warning = STMLostWarning(message, **fields)
    log.warning("%s", message)
    warnings.warn(warning, stacklevel=3)
    return warning


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def _sessions(sessions: Iterable[str]) -> str:
    listed = [repr(s) for s in sessions]
    shown = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
    return f"session{'s' if len(listed) != 1 else ''} {shown}"
