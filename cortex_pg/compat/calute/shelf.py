"""A shelf: the rows of one calute store in one tier, ``(user_id, session_id, tier, memory_type)``.

Every calute memory class keeps its items on a shelf: ``ShortTermMemory`` in the UNLOGGED
``cortex.stm_notes`` (tier ``stm``), ``LongTermMemory`` in ``cortex.notes`` (tier ``ltm``).
Shelves of one store share tables, embeddings and search; they differ only by the scope test
``user_id = ... AND session_id = ... AND memory_type = ...``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.compat import item_views
from cortex_pg.compat.calute import sql
from cortex_pg.compat.item_views import ROW_COLUMNS, item_statistics, render_context
from cortex_pg.compat.memory_item import check_item_fields, item_from_note
from cortex_pg.db.retry import retry_transient
from cortex_pg.errors import ConflictError, ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore, Note, SearchResult, validation
from cortex_pg.store.filters import clean_filters_given, compile_where, item_filter
from cortex_pg.store.memory_store import note_from_row
from cortex_pg.store.stm_loss import report_unwritten

TABLES = {"stm": "cortex.stm_notes", "ltm": "cortex.notes"}


class Shelf:
    """The items of one store in one tier (see the module doc).

    Args:
        store: the open :class:`MemoryStore`.
        user_id, session_id: the tenant and scope (validated; None = ``"default"``).
        tier: ``"stm"`` or ``"ltm"``.
        memory_type: the label of this store's rows (``short_term``, ``long_term``, ...).
        capacity: STM capacity of the scope, enforced on every insert (LRU); STM only.
    """

    def __init__(
        self,
        store: MemoryStore,
        user_id: str | None,
        session_id: str | None,
        tier: str,
        memory_type: str,
        capacity: int | None = None,
    ) -> None:
        if tier not in TABLES:
            raise ValidationError("tier", "must be 'stm' or 'ltm'")
        self.store = store
        self.user_id = validation.scope_id(user_id, "user_id")
        self.session_id = validation.scope_id(session_id, "session_id")
        self.tier = tier
        self.memory_type = validation.memory_type(memory_type)
        self.capacity = None if capacity is None else validation.limit(capacity, "capacity")

    @property
    def table(self) -> str:
        return TABLES[self.tier]

    @property
    def params(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "session_id": self.session_id, "memory_type": self.memory_type}

    # ------------------------------------------------------------------ writes
    def add(
        self,
        content: str,
        metadata: Mapping[str, Any] | None,
        *,
        importance: float = 0.5,
        time: datetime | str | None = None,
        in_same_transaction: Callable[[Connection], Any] | None = None,
    ) -> Note:
        """Store one item; the same content in the same scope and tier is the same item
        (``in_same_transaction``: as :meth:`MemoryStore.add`'s).

        Raises:
            ValidationError: bad content, metadata or importance (nothing stored).
        """
        # (the add and the read are two transactions: a concurrent clear, delete or eviction
        # may remove the item between them; the save is then taken as made after it, again)
        for _attempt in range(3):
            nid = self.store.add(
                content,
                user_id=self.user_id,
                session_id=self.session_id,
                metadata=metadata,
                importance=importance,
                memory_type=self.memory_type,
                time=time,
                to_stm=self.tier == "stm",
                to_ltm=self.tier == "ltm",
                stm_capacity=self.capacity,
                in_same_transaction=in_same_transaction,
            )
            note = self.get(nid)
            if note is not None:
                return note
            if self._stored_elsewhere(nid):
                # the store deduplicates by (scope, content): this text is already a note of
                # another memory_type or tier in this session
                raise ConflictError.other_kind(self.session_id, nid, self.memory_type)
        raise ConflictError(
            "the item was removed by a concurrent delete, clear or eviction each time it was saved "
            "(3 attempts)",
            field="content",
        )

    def _stored_elsewhere(self, nid: uuid.UUID) -> bool:
        """Whether note ``nid`` of this user exists in either tier (not merged away)."""
        with translate_db_errors(), self.store.engine.begin() as conn:
            return bool(
                conn.execute(text(sql.STORED_ANYWHERE), {"user_id": self.user_id, "id": nid}).scalar()
            )

    def update(self, memory_id: object, updates: Mapping[str, Any]) -> Note | None:
        """Apply calute-style updates: ``content``, ``metadata`` (merged), ``importance``; any
        other key is stored in the metadata. Returns None when the item is not on this shelf.

        Raises:
            ValidationError: ``updates`` not a dict, a bad value, or an item field (``agent_id``,
                ``task_id``, ``conversation_id``, ``user_id``, given or in the metadata) that is
                not a string.
        """
        if not isinstance(updates, Mapping):
            raise ValidationError("updates", f"must be a dict, got {type(updates).__name__}")
        note = self.get(memory_id)
        if note is None:
            return None
        fields: dict[str, Any] = {}
        meta = dict(validation.metadata(updates.get("metadata"), "updates.metadata"))
        for key, value in updates.items():
            if key in ("content", "importance"):
                fields[key] = value
            elif key not in ("metadata", "memory_id", "memory_type", "timestamp", "embedding"):
                meta[key] = value
        check_item_fields(meta, "updates.")
        if meta:
            fields["metadata"] = meta
        if fields:
            self.store.update(note.id, user_id=self.user_id, **fields)
        return self.get(note.id)

    # (a delete takes its scope's lock, then locks its rows in id order, as the touching reads do;
    # each is a transaction of its own, retried on any other transient error)
    @retry_transient
    def delete(self, memory_id: object = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete one item by id, or every item matching ``filters``, or (neither, or filters
        whose keys are all unset) nothing.

        Returns:
            The number of items removed.
        """
        return len(self.delete_ids(memory_id, filters))

    def delete_ids(self, memory_id: object = None, filters: Mapping[str, Any] | None = None) -> list[str]:
        """:meth:`delete`, returning the ids of the items removed."""
        if memory_id is None and not clean_filters_given(filters):
            return []
        nid = self._id(memory_id) if memory_id is not None else None
        if memory_id is not None and nid is None:
            return []
        with translate_db_errors(), self.store.engine.begin() as conn:
            conn.execute(text(sql.LOCK_SCOPE), self.params)  # before any row (store.sql.LOCK_SCOPES)
            where = self._where(conn, filters)
            return self._delete(conn, where, nid)

    @retry_transient
    def clear(self) -> int:
        """Delete every item of the shelf. Returns the number removed."""
        with translate_db_errors(), self.store.engine.begin() as conn:
            conn.execute(text(sql.LOCK_SCOPE), self.params)  # before any row (store.sql.LOCK_SCOPES)
            return len(self._delete(conn, "true", None))

    def _delete(self, conn: Connection, where: str, nid: uuid.UUID | None) -> list[str]:
        """Delete this shelf's items matching ``where`` (and id ``nid`` when given) on ``conn``,
        under the scope lock; on an LTM shelf, the notes that followed them in the session get
        their new context embeddings in the same transaction (as :meth:`MemoryStore.delete`).
        Returns the ids removed."""
        statement = sql.DELETE.format(table=self.table, scope=sql.SCOPE, where=where)
        gone = conn.execute(text(statement), {**self.params, "id": nid}).all()
        if self.tier == "ltm":
            self.store.contexts_after_delete(conn, self.user_id, gone)
        return [r.id for r in gone]

    # ------------------------------------------------------------------ reads
    # (a touching read locks its rows in id order through cortex.touch_notes, as every other
    # touching read does; each is a transaction of its own, retried like the store's reads)
    @retry_transient
    def get(self, memory_id: object, *, touch: bool = False) -> Note | None:
        """The item with this id on this shelf, or None (also for a malformed id)."""
        nid = self._id(memory_id)
        if nid is None:
            return None
        statement = sql.LIST.format(
            cols=sql.COLUMNS,
            tier=self.tier,
            table=self.table,
            scope=sql.SCOPE + " AND n.id = :id",
            where="true",
            live=self._live(),
            order="n.id",
        )
        with translate_db_errors(), self.store.engine.begin() as conn:
            row = conn.execute(text(statement), {**self.params, "id": nid, "limit": 1}).mappings().first()
            if row is None:
                return None
            if touch:
                conn.execute(text(sql.TOUCH), {"user_id": self.user_id, "ids": [nid], "tier": self.tier})
        note = note_from_row(row)
        if touch:
            from dataclasses import replace

            note = replace(note, access_count=note.access_count + 1)
        return note

    @retry_transient
    def list(
        self,
        filters: Mapping[str, Any] | None = None,
        *,
        limit: int | None = None,
        order: str = "newest",
        touch: bool = False,
        retention_days: float = 365.0,
    ) -> list[Note]:
        """Items matching ``filters`` (calute item fields and metadata, see
        :mod:`cortex_pg.store.filters`), in ``order``:
        ``newest`` / ``oldest`` first (insertion order breaks ties) or ``ltm_score`` (the
        LongTermMemory score with relevance 1, see :mod:`~cortex_pg.compat.calute.long_term`).

        Args:
            touch: count the returned items as accessed (access_count + 1; refreshes STM LRU).
                The returned notes show the new count.
        """
        self.say_stm_loss()
        tiebreak = "n.seq" if self.tier == "stm" else "n.id"
        statement_order = sql.ORDERS[order].format(tiebreak=tiebreak)
        params = {**self.params, "limit": None if limit is None else validation.limit(limit)}
        params["retention_days"] = float(retention_days)
        with translate_db_errors(), self.store.engine.begin() as conn:
            where = self._where(conn, filters)
            statement = sql.LIST.format(
                cols=sql.COLUMNS,
                tier=self.tier,
                table=self.table,
                scope=sql.SCOPE,
                where=where,
                live=self._live(),
                order=statement_order,
            )
            rows = conn.execute(text(statement), params).mappings().all()
            if touch and rows:
                ids = [r["id"] for r in rows]
                conn.execute(text(sql.TOUCH), {"user_id": self.user_id, "ids": ids, "tier": self.tier})
        notes = [note_from_row(r) for r in rows]
        if touch:
            from dataclasses import replace

            notes = [replace(n, access_count=n.access_count + 1) for n in notes]
        return notes

    def search(
        self, query: str, *, limit: int, filters: Mapping[str, Any] | None = None
    ) -> list[SearchResult]:
        """Hybrid search (:meth:`MemoryStore.search`) of this shelf; touches the results.

        Raises:
            ValidationError: a bad filter (field ``filters``).
        """
        self.say_stm_loss()
        return self.store.search(
            query,
            user_id=self.user_id,
            session_id=self.session_id,
            limit=limit,
            memory_source=self.tier,
            where_filter=self.where_filter(filters),
        )

    def rows_sql(self) -> str:
        """``SELECT`` of :data:`~cortex_pg.compat.item_views.ROW_COLUMNS` over this shelf's items
        (bound values: :attr:`params`)."""
        return f"SELECT {ROW_COLUMNS} FROM {self.table} n WHERE {sql.SCOPE} {self._live()}"

    def statistics(self) -> dict[str, Any]:
        """:func:`~cortex_pg.compat.item_views.item_statistics` of this shelf."""
        with self.store.engine.connect() as conn:
            return item_statistics(conn, self.rows_sql(), self.params)

    def holds_text(self, content: str) -> bool:
        """Whether this tier of the session already holds ``content`` (any memory_type): a save
        of it then writes nothing (the same item) or is refused (another store's item)."""
        statement = sql.HOLDS_TEXT.format(table=self.table, live=self._live())
        params = {
            "user_id": self.user_id,
            "session_id": self.session_id,
            "h": validation.content_hash(validation.content(content)),
        }
        with translate_db_errors(), self.store.engine.connect() as conn:
            return bool(conn.execute(text(statement), params).scalar_one())

    def count(self, conn: Connection | None = None) -> int:
        """The items of this shelf (on ``conn``, inside its transaction, when given)."""
        statement = text(sql.COUNT.format(table=self.table, scope=sql.SCOPE, live=self._live()))
        if conn is not None:
            return int(conn.execute(statement, self.params).scalar_one())
        with translate_db_errors(), self.store.engine.connect() as own:
            return int(own.execute(statement, self.params).scalar_one())

    # ------------------------------------------------------------------ helpers
    def say_stm_loss(self) -> None:
        """On an STM shelf whose scope crash recovery emptied, with nothing written since: log a
        WARNING and issue :class:`~cortex_pg.errors.STMLostWarning` (once per store and loss;
        see :mod:`cortex_pg.store.stm_loss`). Nothing on an LTM shelf."""
        if self.tier == "stm":
            report_unwritten(self.store, self.user_id, self.session_id)

    def stm_lost_at(self) -> datetime | None:
        """When crash recovery last emptied this scope's short-term memory (UTC), or None."""
        return self.store.stm_lost_at(user_id=self.user_id, session_id=self.session_id)

    def where_filter(self, filters: Mapping[str, Any] | None) -> dict[str, Any]:
        """This shelf's ``memory_type`` AND-ed with the caller's filters, in calute's item field
        names (:func:`~cortex_pg.store.filters.item_filter`), checked by the compiler first so
        that an error names ``filters``.

        Raises:
            ValidationError: a bad filter (field ``filters``).
        """
        flt = item_filter(filters, memory_type=self.memory_type)
        assert flt is not None
        if clean_filters_given(filters):
            with self.store.engine.connect() as conn:
                compile_where(conn, flt)
        return flt

    def _where(self, conn: Connection, filters: Mapping[str, Any] | None) -> str:
        return compile_where(conn, item_filter(filters))

    def _live(self) -> str:
        return "AND n.merged_into IS NULL" if self.tier == "ltm" else ""

    @staticmethod
    def _id(memory_id: object) -> uuid.UUID | None:
        try:
            return validation.note_id(memory_id, "memory_id")
        except ValidationError:
            return None


class ShelfBacked:
    """What ShortTermMemory and LongTermMemory share: a ``shelf`` and a ``max_items``."""

    shelf: Shelf
    max_items: int

    def get_statistics(self) -> dict[str, Any]:
        """calute's statistics, counted in SQL: ``total_items``, ``max_items``, ``memory_types``
        (memory_type -> count), ``unique_agents``, ``unique_users``, ``unique_conversations``
        (distinct non-empty ids among the items; see
        :func:`~cortex_pg.compat.item_views.item_statistics`)."""
        stats = self.shelf.statistics()
        return {"max_items": self.max_items, **stats}

    def get_context(self, limit: int = 10, format_type: str = "text") -> str:
        """The newest ``limit`` items, oldest first, as ``text``, ``json`` or ``markdown``
        (calute's formats, see :func:`~cortex_pg.compat.item_views.render_context`); not
        counted as accesses. ``""`` (``"[]"`` in json) when empty.

        Raises:
            ValidationError: ``limit`` not a positive integer, or an unknown ``format_type``.
        """
        lim = validation.limit(limit)
        fmt = item_views.format_type(format_type)
        notes = self.shelf.list(limit=lim, order="newest")
        return render_context([item_from_note(n) for n in reversed(notes)], fmt)

    def __len__(self) -> int:
        return self.shelf.count()

    def __bool__(self) -> bool:
        return True  # an empty memory is still a memory (calute's `if self.short_term:` skipped writes)
