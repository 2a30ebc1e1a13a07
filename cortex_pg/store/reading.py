"""Reading notes: get, list, count, history, stats (the read half of :class:`MemoryStore`)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text

from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import Plan, Query, Transaction, operation
from cortex_pg.errors import NotFoundError, ValidationError, translate_db_errors
from cortex_pg.store import sql, validation
from cortex_pg.store.records import Note
from cortex_pg.store.rows import note_from_row, tenant_scoped


class NoteReader:
    """The reading methods of :class:`~cortex_pg.store.MemoryStore` (a mixin over its ``engine``)."""

    @retry_transient
    @tenant_scoped
    @operation
    def get(self, id: str | uuid.UUID, *, user_id: str | None = None, touch: bool = False) -> Plan[Note]:
        """The note with this id: its LTM row, or its STM copy when it is only in STM.

        Args:
            id: note id. user_id: restrict to a tenant (None = any).
            touch: count this as an access (access_count + 1, last_accessed_at = now) in both tiers,
                committed without waiting for the disk (as a touching search's, see ``search``).

        Raises:
            NotFoundError: no such note. ValidationError: id is not a UUID.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        touch = validation.flag(touch, "touch")

        def body() -> Plan[Note]:
            rows = yield Query(sql.GET_NOTE, {"id": nid, "user_id": uid}, "mappings")
            if not rows:
                raise NotFoundError("note", str(nid))
            row = next((r for r in rows if r["memory_tier"] == "ltm"), rows[0])
            if touch:
                yield Query(sql.TOUCH, {"user_id": row["user_id"], "ids": [nid]}, "none")
            return note_from_row(row)

        return (yield Transaction(body()))

    @tenant_scoped
    def list_notes(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        memory_source: str = "ltm",
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Note]:
        """Notes of a user (and session) in one tier (``ltm`` or ``stm``), oldest first.

        Merged-away LTM notes are left out. ``limit`` caps the count (None = all); ``offset``
        (an integer >= 0) skips that many first, for paging alongside :meth:`count`.

        Raises:
            ValidationError: bad user_id, session_id, memory_source (``all`` included), limit
                or offset.
        """
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        if source == "all":
            raise ValidationError("memory_source", "list one tier at a time: ltm or stm")
        cap = None if limit is None else validation.limit(limit)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("offset", f"must be an integer >= 0, got {offset!r}")
        if source == "ltm":
            q = (
                f"SELECT {sql.NOTE_COLUMNS}, 'ltm' AS memory_tier, merged_into, evolution_history "
                "FROM cortex.notes WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                "AND merged_into IS NULL ORDER BY created_at, id LIMIT :n OFFSET :o"
            )
        else:
            q = (
                f"SELECT {sql.NOTE_COLUMNS}, 'stm' AS memory_tier FROM cortex.stm_notes "
                "WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                "ORDER BY created_at, seq LIMIT :n OFFSET :o"
            )
        with translate_db_errors(), self.engine.connect() as conn:
            rows = conn.execute(text(q), {"u": uid, "s": sid, "n": cap, "o": offset}).mappings().all()
        return [note_from_row(r) for r in rows]

    @tenant_scoped
    def count(
        self, *, user_id: str | None = None, session_id: str | None = None, memory_source: str = "ltm"
    ) -> int:
        """Number of current (not merged) notes of a user (and session) in one tier."""
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        table = {"ltm": "cortex.notes", "stm": "cortex.stm_notes"}
        sources = ["ltm", "stm"] if source == "all" else [source]
        parts = [
            f"SELECT id FROM {table[s]} WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s)"
            + (" AND merged_into IS NULL" if s == "ltm" else "")
            for s in sources
        ]
        with translate_db_errors(), self.engine.connect() as conn:
            return conn.execute(
                text(f"SELECT count(*) FROM ({' UNION '.join(parts)}) x"), {"u": uid, "s": sid}
            ).scalar_one()

    @tenant_scoped
    def history(self, id: str | uuid.UUID, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """The ``note_history`` rows of a note, oldest first (op, old, new, changed_at)."""
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        with translate_db_errors(), self.engine.connect() as conn:
            rows = (
                conn.execute(
                    text(
                        "SELECT op, old, new, changed_at FROM cortex.note_history WHERE note_id = :id "
                        "AND (CAST(:u AS text) IS NULL OR user_id = :u) ORDER BY id"
                    ),
                    {"id": nid, "u": uid},
                )
                .mappings()
                .all()
            )
        return [dict(r) for r in rows]

    @tenant_scoped
    def stats(self, *, user_id: str | None = None) -> dict[str, Any]:
        """Counts for the whole store, or for one user: notes per tier, users, sessions, embeddings.

        Returns:
            A dict: ``ltm_notes``, ``stm_notes``, ``users``, ``sessions``, ``links``,
            ``history_rows``, ``embeddings`` (model -> rows), ``active_model``,
            ``database_bytes``; ``stm_lost_at`` (datetime, UTC, or None): when crash recovery
            last emptied short-term memory (see :meth:`stm_losses`), ``stm_lost_sessions``: how
            many sessions lost STM that nothing has been written to since.
        """
        uid = validation.optional_scope_id(user_id, "user_id")
        mine = "(CAST(:u AS text) IS NULL OR user_id = :u)"
        q = f"""
        SELECT
          (SELECT count(*) FROM cortex.notes WHERE merged_into IS NULL AND {mine}) AS ltm_notes,
          (SELECT count(*) FROM cortex.stm_notes WHERE {mine}) AS stm_notes,
          (SELECT count(DISTINCT user_id) FROM cortex.notes WHERE {mine}) AS users,
          (SELECT count(*) FROM (SELECT DISTINCT user_id, session_id FROM cortex.notes
                                 WHERE {mine}) s) AS sessions,
          (SELECT count(*) FROM cortex.note_links WHERE {mine}) AS links,
          (SELECT count(*) FROM cortex.note_history WHERE {mine}) AS history_rows,
          (SELECT coalesce(jsonb_object_agg(model, n), '{{}}') FROM (
              SELECT model, count(*) AS n FROM cortex.embeddings
              WHERE {mine} GROUP BY model) e) AS embeddings,
          (SELECT model FROM cortex.embedding_models WHERE active) AS active_model,
          pg_database_size(current_database()) AS database_bytes,
          (SELECT max(lost_at) FROM cortex.stm_losses(CAST(:u AS text))) AS stm_lost_at,
          (SELECT count(*) FROM cortex.stm_losses(CAST(:u AS text)) WHERE NOT written_since)
              AS stm_lost_sessions
        """
        with translate_db_errors(), self.engine.connect() as conn:
            row = conn.execute(text(q), {"u": uid}).mappings().one()
        return dict(row)
