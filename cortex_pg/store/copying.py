"""Embedding rows written with binary ``COPY`` instead of an ``INSERT`` of text literals.

Formatting a vector as text in Python and parsing it again in the server (``[x1,x2,...]``,
then ``jsonb``, then ``vector``) took most of the time of a bulk load; here each vector goes
as its float32 values (pgvector's binary form), turned into bytes by numpy in one call per
batch, and the rows go in one ``COPY ... FROM STDIN (FORMAT BINARY)``.

``COPY`` has no ``ON CONFLICT``, so it only writes rows that cannot exist yet: the embeddings
of notes inserted by the same transaction (their earlier rows, if the id was used before,
went with the note by ``ON DELETE CASCADE``). It is used when :func:`can_copy` says the
connection allows it (psycopg 3, and no row-level security on ``cortex.embeddings`` for the
role: PostgreSQL refuses ``COPY FROM`` into such a table); callers keep their ``INSERT`` path
for the other cases.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection

COPY_EMBEDDINGS = (
    "COPY cortex.embeddings (user_id, note_id, model, kind, window_no, session_id, embedding) "
    "FROM STDIN (FORMAT BINARY)"
)

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_TRAILER = struct.pack("!h", -1)
_INFO_KEY = "cortex_pg.copy_embeddings"


def can_copy(conn: Connection) -> bool:
    """Whether :func:`copy_embeddings` may run on ``conn``: its driver is psycopg 3 (sync or
    async) and row-level security is not active for ``cortex.embeddings`` (asked once per
    pooled connection, kept in ``conn.info``)."""
    import psycopg

    if not isinstance(conn.connection.driver_connection, (psycopg.Connection, psycopg.AsyncConnection)):
        return False
    allowed = conn.info.get(_INFO_KEY)
    if allowed is None:
        active = conn.exec_driver_sql("SELECT row_security_active('cortex.embeddings')").scalar()
        allowed = conn.info[_INFO_KEY] = not active
    return bool(allowed)


def vector_bytes(vectors: Sequence[Sequence[float]] | np.ndarray, dim: int) -> list[bytes]:
    """pgvector's binary form of each vector: ``int16 dim, int16 0, dim x float32``, big-endian.

    Args:
        vectors: n vectors of ``dim`` numbers each (lists or an ``(n, dim)`` array).

    Raises:
        ValueError: a vector of another length.
    """
    if len(vectors) == 0:
        return []
    block = np.asarray(vectors, dtype=">f4")
    if block.ndim != 2 or block.shape[1] != dim:
        raise ValueError(f"expected vectors of {dim} numbers, got an array of shape {block.shape}")
    head = struct.pack("!ihh", 4 + 4 * dim, dim, 0)  # field length, then the vector's header
    return [head + row.tobytes() for row in block]


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack("!i", len(data)) + data


def embedding_copy_data(
    model: str,
    rows: Sequence[tuple[str, str | uuid.UUID, str, str, int]],
    vectors: Sequence[Sequence[float]] | np.ndarray,
    dim: int,
) -> bytes:
    """The binary ``COPY`` stream of :data:`COPY_EMBEDDINGS` for ``rows``.

    Args:
        model: the embedding model (every row's ``model``).
        rows: ``(user_id, note_id, session_id, kind, window_no)`` per row; ``kind`` ``text`` or
            ``context``, ``window_no`` in 0..32767.
        vectors: one vector of ``dim`` numbers per row, in order.

    Raises:
        ValueError: as many vectors as rows are needed, each of ``dim`` numbers.
    """
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors")
    model_field = _text(model)
    kinds = {"text": _text("text"), "context": _text("context")}
    parts = [_HEADER]
    for (user_id, note_id, session_id, kind, window_no), vec in zip(
        rows, vector_bytes(vectors, dim), strict=True
    ):
        nid = note_id if isinstance(note_id, uuid.UUID) else uuid.UUID(note_id)
        parts.append(
            b"".join(
                (
                    b"\x00\x07",
                    _text(user_id),
                    b"\x00\x00\x00\x10",
                    nid.bytes,
                    model_field,
                    kinds[kind],
                    struct.pack("!ih", 2, window_no),
                    _text(session_id),
                    vec,
                )
            )
        )
    parts.append(_TRAILER)
    return b"".join(parts)


def copy_embeddings(
    conn: Connection,
    model: str,
    rows: Sequence[tuple[str, str | uuid.UUID, str, str, int]],
    vectors: Sequence[Sequence[float]] | np.ndarray,
    dim: int,
) -> int:
    """Write ``rows`` (see :func:`embedding_copy_data`) into ``cortex.embeddings`` with one
    binary ``COPY`` on the transaction of ``conn`` (check :func:`can_copy` first).

    Returns:
        The number of rows written.

    Raises:
        sqlalchemy.exc.DBAPIError: a row exists already (23505), its note does not (23503),
            or another database error; the transaction is then aborted.
    """
    if not rows:
        return 0
    data = embedding_copy_data(model, rows, vectors, dim)
    _copy(conn, COPY_EMBEDDINGS, data)
    return len(rows)


def _copy(conn: Connection, statement: str, data: bytes) -> None:
    """Run ``statement`` (a ``COPY ... FROM STDIN``) with ``data`` on the driver connection of
    ``conn``; psycopg errors are re-raised as SQLAlchemy's (as ``conn.execute`` would)."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    raw: Any = conn.connection.driver_connection
    try:
        if isinstance(raw, psycopg.AsyncConnection):
            from sqlalchemy.util import await_only

            async def run() -> None:
                async with raw.cursor() as cur, cur.copy(statement) as copy:
                    await copy.write(data)

            await_only(run())
        else:
            with raw.cursor() as cur, cur.copy(statement) as copy:
                copy.write(data)
    except psycopg.Error as exc:
        raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
