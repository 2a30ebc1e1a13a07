"""calute's ``ContextualMemory``: a short-term and a long-term shelf and a context stack.

The stack is rows of ``cortex.context_frames`` keyed (user_id, scope) — by default the
session id — pushed and popped by the SQL functions ``cortex.context_push`` /
``cortex.context_pop`` (an advisory lock per stack; pop is ``DELETE ... RETURNING`` of the
top frame), so a stack pushed by one process is seen, and popped once, by any other.

Routing: an item with ``to_long_term`` or ``importance >= importance_threshold`` goes to
long-term memory only; any other to short-term memory. Promotion: reading a short-term item
by id counts an access; when its access count reaches ``promotion_threshold`` it is copied to
long-term memory exactly once (the copy is one item per text and scope, and keeps the item's id;
then ``metadata["promoted"]`` is claimed in one ``UPDATE``, so a process killed between the two
leaves the next promotion to find its copy) — calute copied it again on every later read.

Context boost of :meth:`ContextualMemory.search` (calute's ``_rerank_by_context``)::

    ctx_match = 0.5 * [item frame type == current frame type]
              + 0.5 * |common words| / max(|item data words|, |current data words|)
    relevance = 0.7 * relevance + 0.3 * ctx_match

(words: lowercased letters/digits runs of the frames' ``data`` values); applied when a frame
is current, to every result (items saved without a frame get ctx_match 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from cortex_pg.compat import item_views
from cortex_pg.compat.calute import sql
from cortex_pg.compat.calute.long_term import LongTermMemory
from cortex_pg.compat.calute.short_term import ShortTermMemory
from cortex_pg.compat.item_views import item_statistics
from cortex_pg.compat.memory_item import MemoryItem, item_from_note, item_importance
from cortex_pg.db.retry import retry_transient
from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore
from cortex_pg.store.memory_store import facade_store, validation

CONTEXT_TYPE_WEIGHT = 0.5
CONTEXT_WORDS_WEIGHT = 0.5
SCORE_WEIGHT = 0.7
CONTEXT_WEIGHT = 0.3
#: characters of a context frame's type, and of its data's JSON (a frame is copied into the
#: metadata of each item saved under it, whose limit is validation.MAX_METADATA_LENGTH)
MAX_FRAME_TYPE_LENGTH = 255
MAX_FRAME_DATA_LENGTH = 50_000

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _frame(row: Any) -> dict[str, Any]:
    return {"type": row.type, "data": dict(row.data or {}), "timestamp": row.pushed_at}


def _words(data: Any) -> set[str]:
    return set(_WORD.findall(json.dumps(data, ensure_ascii=False, default=str).lower())) - {
        "null",
        "true",
        "false",
    }


def context_match(item_context: Mapping[str, Any] | None, current: Mapping[str, Any]) -> float:
    """calute's context match in [0, 1] between an item's stored frame and the current one."""
    if not isinstance(item_context, Mapping):
        return 0.0
    score = CONTEXT_TYPE_WEIGHT if item_context.get("type") == current.get("type") else 0.0
    mine, cur = _words(item_context.get("data")), _words(current.get("data"))
    if mine and cur:
        score += CONTEXT_WORDS_WEIGHT * len(mine & cur) / max(len(mine), len(cur))
    return score


class ContextualMemory:
    """Short- and long-term memory routed by importance, with a shared context stack.

    Args:
        short_term_capacity: short-term items kept in the scope (default 20).
        long_term_storage: accepted for calute compatibility, not used.
        promotion_threshold: accesses (reads by id) that promote a short-term item (default 3).
        importance_threshold: importance from which an item goes straight to long-term (0.7).
        store: the :class:`MemoryStore` (default ``MemoryStore.open()``).
        user_id, session_id: the scope of both shelves (None = ``"default"``).
        stack_scope: the context stack's key (default: ``session_id``).
        long_term_max_items: capacity of the long-term shelf (default 10000, as calute).
    """

    def __init__(
        self,
        short_term_capacity: int = 20,
        long_term_storage: Any = None,
        promotion_threshold: int = 3,
        importance_threshold: float = 0.7,
        *,
        store: MemoryStore | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        stack_scope: str | None = None,
        long_term_max_items: int = 10000,
    ) -> None:
        self.store = facade_store(store, type(self).__name__)
        self.promotion_threshold = validation.limit(promotion_threshold, "promotion_threshold")
        self.importance_threshold = validation.unit_interval(importance_threshold, "importance_threshold")
        self.short_term = ShortTermMemory(
            capacity=short_term_capacity, store=self.store, user_id=user_id, session_id=session_id
        )
        self.long_term = LongTermMemory(
            max_items=long_term_max_items, store=self.store, user_id=user_id, session_id=session_id
        )
        self.user_id = self.short_term.shelf.user_id
        self.stack_scope = validation.scope_id(stack_scope or self.short_term.shelf.session_id, "stack_scope")

    # ------------------------------------------------------------------ context stack
    @retry_transient
    def push_context(self, context_type: str, context_data: Mapping[str, Any] | None = None) -> None:
        """Push a frame ``{type, data, timestamp}`` on the stack (visible to every process).

        The frame is copied into the metadata of every item saved while it is on top, so it is
        bounded: the type at most 255 characters, the data at most 50,000 characters of JSON
        (half of an item's metadata, leaving the rest to the item's own).

        Raises:
            ValidationError: a blank type (no visible character:
                :func:`~cortex_pg.store.validation.invisible`), one holding NUL or a lone
                surrogate, or a longer one (field ``context_type``); data that is not a JSON
                object or is longer (``context_data``).
        """
        if not isinstance(context_type, str) or validation.invisible(context_type):
            raise ValidationError("context_type", "must be a string with a visible character")
        validation.short_text(context_type, "context_type")
        if len(context_type) > MAX_FRAME_TYPE_LENGTH:
            raise ValidationError(
                "context_type", f"longer than {MAX_FRAME_TYPE_LENGTH} characters ({len(context_type)})"
            )
        data = validation.metadata(context_data, "context_data", max_length=MAX_FRAME_DATA_LENGTH)
        self._stack(sql.CONTEXT_PUSH, type=context_type, data=json.dumps(data))

    @retry_transient
    def pop_context(self) -> dict[str, Any] | None:
        """Remove and return the top frame (``type``, ``data``, ``timestamp`` aware UTC), or None."""
        rows = self._stack(sql.CONTEXT_POP)
        return _frame(rows[0]) if rows else None

    def get_current_context(self) -> dict[str, Any] | None:
        """The top frame without removing it, or None."""
        rows = self._stack(sql.CONTEXT_PEEK)
        return _frame(rows[0]) if rows else None

    @property
    def context_stack(self) -> list[dict[str, Any]]:
        """The whole stack, bottom first (a snapshot)."""
        return [_frame(r) for r in self._stack(sql.CONTEXT_FRAMES)]

    def _stack(self, statement: str, **params: Any) -> list[Any]:
        with translate_db_errors(), self.store.engine.begin() as conn:
            return conn.execute(
                text(statement), {"user_id": self.user_id, "scope": self.stack_scope, **params}
            ).all()

    # ------------------------------------------------------------------ memory API
    def save(
        self,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        importance: float = 0.5,
        to_long_term: bool = False,
        **kwargs: Any,
    ) -> MemoryItem:
        """Store an item: long-term when ``to_long_term`` or ``importance >= importance_threshold``,
        else short-term. With a current frame, ``metadata["context"]`` is that frame (its
        timestamp as ISO 8601). ``metadata["importance"]`` is set. The caller's dict is copied.

        Raises:
            ValidationError: blank content, bad metadata or importance.
        """
        imp = validation.importance(importance)
        meta = dict(validation.metadata(metadata))
        current = self.get_current_context()
        if current is not None:
            meta["context"] = {**current, "timestamp": current["timestamp"].isoformat()}
        if to_long_term or imp >= self.importance_threshold:
            return self.long_term.save(content, meta, importance=imp, **kwargs)
        meta["importance"] = imp
        return self.short_term.save(content, meta, **kwargs)

    def retrieve(
        self,
        memory_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 10,
    ) -> MemoryItem | list[MemoryItem] | None:
        """By id: the short-term item (an access; promotes it once, see the module doc), else
        the long-term one, else None. Otherwise: short-term matches newest first, then
        long-term ones up to ``limit``, one per id (a promoted item is on both shelves)."""
        if memory_id is not None:
            note = self.short_term.shelf.get(memory_id, touch=True)
            if note is not None:
                if note.access_count >= self.promotion_threshold:
                    note = self._promote(note) or note
                return item_from_note(note)
            return self.long_term.retrieve(memory_id)
        lim = validation.limit(limit)
        found = self.short_term.retrieve(filters=filters, limit=lim)
        assert isinstance(found, list)
        if len(found) < lim:
            seen = {i.memory_id for i in found}
            more = self.long_term.retrieve(filters=filters, limit=lim)
            assert isinstance(more, list)
            found += [i for i in more if i.memory_id not in seen][: lim - len(found)]
        return found

    def _promote(self, note: Any) -> Any:
        """Copy to long-term, then claim the promotion (one UPDATE; only one caller wins).

        The copy comes first: a text is one item per scope and shelf, so callers racing here
        write one copy between them, and a process killed between the copy and the claim
        leaves an unclaimed item whose next promotion finds its copy (claimed first, the claim
        of a killed process stayed with no copy, and no later read promoted the item again)."""
        if note.metadata.get("promoted"):
            return None
        shelf = self.short_term.shelf
        meta = {**note.metadata, "promoted": True}
        self.long_term.save(note.content, meta, importance=item_importance(note.metadata, 0.6))
        claim = (
            "UPDATE cortex.stm_notes SET metadata = metadata || jsonb_build_object('promoted', true) "
            "WHERE user_id = :user_id AND id = :id AND NOT coalesce((metadata->>'promoted')::boolean, false) "
            "RETURNING id"
        )
        with translate_db_errors(), self.store.engine.begin() as conn:
            won = conn.execute(text(claim), {"user_id": shelf.user_id, "id": note.id}).first()
        if won is None:
            return None
        return shelf.get(note.id)

    def search(
        self,
        query: str,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        search_long_term: bool = True,
        **kwargs: Any,
    ) -> list[MemoryItem]:
        """Short-term (and long-term) results, ``metadata["source"]`` set to ``short_term`` /
        ``long_term``, boosted by the current frame (module doc), best first, one per id. A
        blank query lists the newest items of each shelf (see their ``search``).

        Raises:
            ValidationError: ``query`` not a string, or longer than 10,000 characters, holding
                NUL or not valid Unicode (field ``query``); limit <= 0 or a bad filter.
        """
        lim = validation.limit(limit)
        query = validation.query_or_blank(query)
        results = self.short_term.search(query, limit=lim, filters=filters, **kwargs)
        for item in results:
            item.metadata["source"] = "short_term"
        if search_long_term:
            for item in self.long_term.search(query, limit=lim, filters=filters):
                item.metadata["source"] = "long_term"
                results.append(item)
        current = self.get_current_context()
        if current is not None:
            for item in results:
                match = context_match(item.metadata.get("context"), current)
                item.relevance_score = SCORE_WEIGHT * item.relevance_score + CONTEXT_WEIGHT * match
        best: dict[str, MemoryItem] = {}
        for item in results:
            if item.memory_id not in best or item.relevance_score > best[item.memory_id].relevance_score:
                best[item.memory_id] = item
        ranked = sorted(best.values(), key=lambda i: (i.relevance_score, i.timestamp), reverse=True)
        return ranked[:lim]

    def update(self, memory_id: str, updates: Mapping[str, Any]) -> bool:
        """Update the short-term item, else the long-term one; False when neither exists."""
        return self.short_term.update(memory_id, updates) or self.long_term.update(memory_id, updates)

    def delete(self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete from both shelves; returns the number of items removed (a promoted item, on
        both shelves under one id, counts once)."""
        gone = self.short_term.shelf.delete_ids(memory_id, filters)
        return len(set(gone) | set(self.long_term.shelf.delete_ids(memory_id, filters)))

    def clear(self) -> None:
        """Empty both shelves and the context stack."""
        self.short_term.clear()
        self.long_term.clear()
        with translate_db_errors(), self.store.engine.begin() as conn:
            conn.execute(text(sql.CONTEXT_CLEAR), {"user_id": self.user_id, "scope": self.stack_scope})

    def get_context_summary(self) -> str:
        """calute's summary: ``"Current context:"`` (last 3 frames, ``"  - <type>: <data[:100]>"``),
        ``"\\nRecent activity:"`` (5 newest short-term items, ``"  - <content[:100]>"``),
        ``"\\nImportant memories:"`` (3 long-term items with importance >= 0.8); sections
        without lines are left out; ``"No context available."`` when all are empty."""
        parts: list[str] = []
        frames = self.context_stack
        if frames:
            parts.append("Current context:")
            parts.extend(f"  - {f['type']}: {str(f['data'])[:100]}" for f in frames[-3:])
        recent = self.short_term.get_recent(5)
        if recent:
            parts.append("\nRecent activity:")
            parts.extend(f"  - {m.content[:100]}" for m in recent)
        important = self.long_term.shelf.list(
            {"importance": {"$gte": 0.8}},
            limit=3,
            order="ltm_score",
            retention_days=self.long_term.retention_days,
        )
        if important:
            parts.append("\nImportant memories:")
            parts.extend(f"  - {n.content[:100]}" for n in important)
        return "\n".join(parts) if parts else "No context available."

    def get_statistics(self) -> dict[str, Any]:
        """calute's statistics over both shelves, counted in SQL: ``total_items``, ``max_items``
        (short-term capacity + long-term ``max_items``), ``memory_types``, ``unique_agents``,
        ``unique_users``, ``unique_conversations`` (see
        :func:`~cortex_pg.compat.item_views.item_statistics`); and ``short_term_items``,
        ``long_term_items``, ``context_depth`` (frames on the stack). A promoted item is on
        both shelves and counted on each (as ``len``)."""
        st, lt = self.short_term.shelf, self.long_term.shelf
        rows = (
            st.rows_sql().replace(":session_id", ":st_session").replace(":memory_type", ":st_type")
            + " UNION ALL "
            + lt.rows_sql()
        )
        params = {**lt.params, "st_session": st.session_id, "st_type": st.memory_type}
        with self.store.engine.connect() as conn:
            stats = item_statistics(conn, rows, params)
        stats["max_items"] = self.short_term.max_items + self.long_term.max_items
        stats["short_term_items"] = stats["memory_types"].get(st.memory_type, 0)
        stats["long_term_items"] = stats["memory_types"].get(lt.memory_type, 0)
        stats["context_depth"] = len(self.context_stack)
        return stats

    def get_context(self, limit: int = 10, format_type: str = "text") -> str:
        """The newest ``limit`` items of both shelves (one per id), oldest first, in calute's
        formats (``text``, ``json``, ``markdown``; see
        :func:`~cortex_pg.compat.item_views.render_context`); not counted as accesses.

        Raises:
            ValidationError: ``limit`` not a positive integer, or an unknown ``format_type``.
        """
        lim = validation.limit(limit)
        fmt = item_views.format_type(format_type)
        newest: dict[str, Any] = {}
        for shelf in (self.short_term.shelf, self.long_term.shelf):
            for note in shelf.list(limit=lim, order="newest"):
                newest.setdefault(str(note.id), note)
        notes = sorted(newest.values(), key=lambda n: (n.created_at, str(n.id)))[-lim:]
        return item_views.render_context([item_from_note(n) for n in notes], fmt)

    def __len__(self) -> int:
        return len(self.short_term) + len(self.long_term)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"ContextualMemory(user_id={self.user_id!r}, scope={self.stack_scope!r})"
