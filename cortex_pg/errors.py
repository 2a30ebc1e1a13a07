"""The cortex_pg exception hierarchy and the one place database errors are translated.

Every error the library raises on purpose derives from :class:`CortexPGError`. Errors about
caller input carry the offending ``field`` and a human ``reason`` so that a caller (or an
agent) can correct the call without parsing messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError


class CortexPGError(Exception):
    """Base class of every error raised by cortex_pg."""


class ValidationError(CortexPGError, ValueError):
    """Bad caller input; nothing was stored.

    Attributes:
        field: name of the argument or field that is wrong (e.g. ``"content"``).
        reason: why it was refused.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class ImmutableFieldError(ValidationError):
    """An update tried to change a field that identifies the note's tenant or scope."""


class NotFoundError(CortexPGError, KeyError):
    """No note (or other object) with that id exists for that tenant."""

    def __init__(self, kind: str, key: object) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"{kind} {key!r} not found")

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class MergedNoteError(ValidationError):
    """The note was merged into another note: it is kept for history only and cannot be
    changed (change the note it was merged into).

    Attributes:
        note_id: the merged-away note; merged_into: the note it was merged into.
    """

    def __init__(self, note_id: str, merged_into: str) -> None:
        self.note_id = note_id
        self.merged_into = merged_into
        super().__init__("id", f"note {note_id} was merged into {merged_into}; update that note instead")


class ReadOnlyError(CortexPGError, TypeError):
    """A write to a read-only view of stored data (a ``TypeError``, as writing to a
    ``types.MappingProxyType`` is).

    Attributes:
        view: what was written to (e.g. ``EntityMemory.entities``).
        use: the method that does write (e.g. ``EntityMemory.save``).
    """

    def __init__(self, view: str, use: str) -> None:
        self.view = view
        self.use = use
        super().__init__(f"{view} is a read-only view of the database; to change it use {use}")


class SchemaError(CortexPGError):
    """The database is missing the schema, the ``vector`` extension, or is not at the Alembic head."""


class EmbeddingModelError(CortexPGError):
    """The embedder does not fit what the database already holds, or returned vectors that cannot
    be stored or searched (another count, a vector of zeros)."""


class EmbeddingDimensionError(EmbeddingModelError):
    """The embedder's dimension differs from the dimension of stored embeddings.

    Attributes:
        model: the embedding model name the database knows.
        stored_dim: dimension already stored for it.
        embedder_dim: dimension of the embedder that was offered.
    """

    def __init__(self, model: str, stored_dim: int, embedder_dim: int, detail: str = "") -> None:
        self.model = model
        self.stored_dim = stored_dim
        self.embedder_dim = embedder_dim
        msg = (
            f"embedding dimension mismatch: the database holds {stored_dim}-dimensional embeddings "
            f"(model {model!r}) but the embedder produces {embedder_dim} dimensions"
        )
        super().__init__(msg + (f"; {detail}" if detail else ""))


class DatabaseError(CortexPGError):
    """A database error that is not the caller's fault (connection lost, deadlock, ...).

    Attributes:
        sqlstate: the five-character SQLSTATE code, when the server sent one.
    """

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class DatabaseUnavailableError(DatabaseError):
    """The database server cannot be reached, refused the connection (too many clients), went
    away mid-operation, or every connection of the pool is in use. Nothing of the failed call
    was committed; the next call connects afresh (connections are checked before use)."""


# SQLSTATEs a transaction can be retried after: serialization failure, deadlock detected
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})
# SQLSTATEs of a server that refuses or drops connections (class 08, too many connections,
# shutdown / crash / cannot connect now)
UNAVAILABLE_SQLSTATES = frozenset({"53300", "57P01", "57P02", "57P03"})
# caller names of columns the server may name in an error
_CALLER_FIELDS = {"created_at": "time", "tsv": "content", "content_hash": "content"}


class ConflictError(DatabaseError):
    """A unique or exclusion constraint refused the write (SQLSTATE 23505 / 23P01).

    Attributes:
        field: the caller's field the conflict is about (``content``: another note of the
            session has that text; ``id``: the note id is taken), or None when unknown.
    """

    def __init__(self, message: str, sqlstate: str | None = None, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message, sqlstate)

    @classmethod
    def other_kind(cls, session_id: str, note_id: object, kind: str) -> ConflictError:
        """A save whose text the session already holds as another kind of note: the store
        deduplicates by (user, session, content), so the save found that note (field ``content``)."""
        return cls(
            f"the text is already stored in session {session_id!r} as note {note_id}, "
            f"which is not a {kind!r} item of this store",
            field="content",
        )


class ServerError(CortexPGError):
    """The embedded PostgreSQL server could not be started or stopped."""


class CortexPGWarning(UserWarning):
    """Base class of every warning issued by cortex_pg (``warnings.simplefilter("error",
    CortexPGWarning)`` turns them into exceptions)."""


class STMLostWarning(CortexPGWarning):
    """Short-term memory was emptied by the database server's crash recovery.

    ``cortex.stm_notes`` is UNLOGGED: PostgreSQL empties it when it recovers from a crash (a
    clean restart keeps it); long-term memory is never affected. Issued by
    ``MemoryStore.open()`` when it is the first to look after the reset (``user_id`` None,
    ``sessions``/``users`` count every scope that lost STM), and by the facades' short-term
    reads of a scope whose lost STM has not been written to since (one user, its sessions).

    Attributes:
        lost_at: timezone-aware UTC time of the crash recovery that emptied STM (after a
            server crash, or a backend's: the postmaster may not have restarted).
        user_id: the user whose STM was read, or None for the open-time report.
        sessions: the session ids concerned (read) or how many there are (open), as
            ``tuple[str, ...]`` or ``int``.
        users: how many users lost STM (open-time report; 1 for a read).
    """

    def __init__(
        self, message: str, *, lost_at: object, user_id: str | None, sessions: object, users: int
    ) -> None:
        self.lost_at = lost_at
        self.user_id = user_id
        self.sessions = sessions
        self.users = users
        super().__init__(message)


@contextmanager
def translate_db_errors(field: str = "input") -> Iterator[None]:
    """Translate SQLAlchemy/psycopg errors into the cortex_pg hierarchy.

    Keyed on the SQLSTATE the server sends (``exc.orig.sqlstate``), never on message text:
    ``23505``/``23P01`` and a foreign key into the note-id registry (an id that belongs to
    another tenant) -> :class:`ConflictError`; class ``22`` (data exceptions), ``23``
    (other integrity violations) and ``54`` (program limits, e.g. a tsvector over 1 MB) ->
    :class:`ValidationError` naming the caller's field (the column the server names, in the
    API's words, else ``field``); a server that cannot be reached, refuses connections or goes
    away (class ``08``, ``53300``, ``57P01``-``57P03``, or no SQLSTATE on a connection error) and
    an exhausted pool -> :class:`DatabaseUnavailableError`, saying what to do; everything
    else -> :class:`DatabaseError`.
    """
    try:
        yield
    except PoolTimeoutError as exc:
        raise DatabaseUnavailableError(
            f"every connection of the pool is in use ({exc}); close stores, sessions or "
            "iterators you no longer need, or open the store with a larger pool"
        ) from exc
    except DBAPIError as exc:
        sqlstate = getattr(exc.orig, "sqlstate", None)
        diag = getattr(exc.orig, "diag", None)
        primary = getattr(diag, "message_primary", None) or str(exc.orig)
        if (
            sqlstate in UNAVAILABLE_SQLSTATES
            or (sqlstate or "").startswith("08")
            or (sqlstate is None and (isinstance(exc, OperationalError) or exc.connection_invalidated))
        ):
            raise DatabaseUnavailableError(
                f"the database server is unreachable or refused the connection ({primary.strip()}); "
                "check that it runs (`cortex-pg db url` starts the embedded one) and that DATABASE_URL "
                "is right, or, for too many clients, close stores you no longer need (stores opened "
                "on one URL in one process share one pool); the next call reconnects",
                sqlstate,
            ) from exc
        constraint = getattr(diag, "constraint_name", None) or ""
        if sqlstate == "23505" and constraint in ("uq_notes_content_hash", "uq_stm_notes_content_hash"):
            raise ConflictError(
                "content: another note of this user and session already has this content "
                "(notes are deduplicated by content per session)",
                sqlstate,
                field="content",
            ) from exc
        if sqlstate in ("23505", "23P01"):
            raise ConflictError(primary, sqlstate) from exc
        if (
            sqlstate == "23503"
            and constraint.startswith("fk_")
            and constraint.endswith("_user_id_id_note_ids")
        ):
            # the id registry refused: the note id is registered to another tenant
            raise ConflictError(
                f"a note id is already used by another tenant ({primary})", sqlstate, field="id"
            ) from exc
        if sqlstate and sqlstate[:2] in ("22", "23", "54"):
            column = getattr(diag, "column_name", None)
            raise ValidationError(_CALLER_FIELDS.get(column, column) if column else field, primary) from exc
        raise DatabaseError(primary, sqlstate) from exc
