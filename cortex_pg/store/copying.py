"""Embedding rows written with binary ``COPY`` instead of an ``INSERT`` of text literals.

Formatting a vector as text in Python and parsing it again in the server (``[x1,x2,...]``,
then ``jsonb``, then ``vector``) took most of the time of a bulk load; here each vector goes
as its float32 values (pgvector's binary form, written by the ``pgvector`` package's psycopg
dumper), and the rows go in one ``COPY ... FROM STDIN (FORMAT BINARY)`` framed by psycopg.

``COPY`` has no ``ON CONFLICT``, so it only writes rows that cannot exist yet: the embeddings
of notes inserted by the same transaction (their earlier rows, if the id was used before,
went with the note by ``ON DELETE CASCADE``). It is used when :func:`can_copy` says the
connection allows it (psycopg 3, and no row-level security on ``cortex.embeddings`` for the
role: PostgreSQL refuses ``COPY FROM`` into such a table); callers keep their ``INSERT`` path
for the other cases.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection

COPY_EMBEDDINGS = (
    "COPY cortex.embeddings (user_id, note_id, model, kind, window_no, session_id, embedding) "
    "FROM STDIN (FORMAT BINARY)"
)

_INFO_KEY = "cortex_pg.copy_embeddings"
_OID_KEY = "cortex_pg.vector_oid"


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


def vector_block(vectors: Sequence[Sequence[float]] | np.ndarray, dim: int) -> np.ndarray:
    """The vectors as one ``(n, dim)`` float32 array (what pgvector's binary dumper writes).

    Args:
        vectors: n vectors of ``dim`` numbers each (lists or an ``(n, dim)`` array).

    Raises:
        ValueError: a vector of another length.
    """
    block = np.asarray(vectors, dtype=np.float32)
    if len(vectors) and (block.ndim != 2 or block.shape[1] != dim):
        raise ValueError(f"expected vectors of {dim} numbers, got an array of shape {block.shape}")
    return block


def vector_bytes(vectors: Sequence[Sequence[float]] | np.ndarray, dim: int) -> list[bytes]:
    """pgvector's binary form of each vector (``int16 dim, int16 0, dim x float32``), as its
    own ``Vector.to_binary`` writes it.

    Raises:
        ValueError: a vector of another length.
    """
    from pgvector import Vector

    return [Vector(row).to_binary() for row in vector_block(vectors, dim)]


def copy_embeddings(
    conn: Connection,
    model: str,
    rows: Sequence[tuple[str, str | uuid.UUID, str, str, int]],
    vectors: Sequence[Sequence[float]] | np.ndarray,
    dim: int,
) -> int:
    """Write ``rows`` into ``cortex.embeddings`` with one binary ``COPY`` on the transaction of
    ``conn`` (check :func:`can_copy` first). psycopg frames the rows; pgvector's binary dumper
    writes the vectors.

    Args:
        model: the embedding model (every row's ``model``).
        rows: ``(user_id, note_id, session_id, kind, window_no)`` per row; ``kind`` ``text`` or
            ``context``, ``window_no`` in 0..32767.
        vectors: one vector of ``dim`` numbers per row, in order.

    Returns:
        The number of rows written.

    Raises:
        sqlalchemy.exc.DBAPIError: a row exists already (23505), its note does not (23503),
            or another database error; the transaction is then aborted.
    """
    if not rows:
        return 0
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors")
    block = vector_block(vectors, dim)
    records = [
        (user_id, note_id if isinstance(note_id, uuid.UUID) else uuid.UUID(note_id), model, kind, window_no,
         session_id, vec)
        for (user_id, note_id, session_id, kind, window_no), vec in zip(rows, block, strict=True)
    ]  # fmt: skip
    _copy(conn, COPY_EMBEDDINGS, records)
    return len(rows)


def _vector_oid(conn: Connection) -> int:
    """The OID of the ``vector`` type (asked once per pooled connection, kept in ``conn.info``)."""
    oid = conn.info.get(_OID_KEY)
    if oid is None:
        oid = conn.info[_OID_KEY] = conn.exec_driver_sql("SELECT 'vector'::regtype::oid").scalar_one()
    return int(oid)


def _copy(conn: Connection, statement: str, records: list[tuple[Any, ...]]) -> None:
    """Run ``statement`` (a ``COPY ... FROM STDIN (FORMAT BINARY)`` of the embeddings' seven
    columns) with ``records`` on the driver connection of ``conn``; psycopg errors are
    re-raised as SQLAlchemy's (as ``conn.execute`` would). The vector dumper is registered on
    the cursor only, so the pooled connection reads vectors as before."""
    import psycopg
    from pgvector.psycopg.vector import VectorBinaryDumper
    from sqlalchemy.exc import DBAPIError

    oid = _vector_oid(conn)
    dumper = type("EmbeddingDumper", (VectorBinaryDumper,), {"oid": oid})
    types = ["text", "uuid", "text", "text", "int2", "text", oid]
    raw: Any = conn.connection.driver_connection
    try:
        if isinstance(raw, psycopg.AsyncConnection):
            from sqlalchemy.util import await_only

            async def run() -> None:
                async with raw.cursor() as cur:
                    cur.adapters.register_dumper(np.ndarray, dumper)
                    async with cur.copy(statement) as copy:
                        copy.set_types(types)
                        for record in records:
                            await copy.write_row(record)

            await_only(run())
        else:
            with raw.cursor() as cur:
                cur.adapters.register_dumper(np.ndarray, dumper)
                with cur.copy(statement) as copy:
                    copy.set_types(types)
                    for record in records:
                        copy.write_row(record)
    except psycopg.Error as exc:
        raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
