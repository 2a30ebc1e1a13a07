"""calute's ``ShortTermMemory`` on the UNLOGGED ``cortex.stm_notes`` table.

Items are STM-only notes with ``memory_type = "short_term"`` in one (user_id, session_id)
scope, which holds at most ``capacity`` of them: the insert's transaction evicts the least
recently used (``last_accessed_at``, then insertion order). An UNLOGGED table survives a
clean restart and is emptied after a crash — the promise of short-term memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cortex_pg.compat.calute.shelf import Shelf, ShelfBacked
from cortex_pg.compat.memory_item import MemoryItem, check_item_fields, item_from_note
from cortex_pg.compat.threaded import threaded
from cortex_pg.store import MemoryStore
from cortex_pg.store.memory_store import facade_store, validation

MEMORY_TYPE = "short_term"


def item_metadata(
    metadata: Mapping[str, Any] | None, fields: Mapping[str, Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A fresh metadata dict: the caller's (copied, never mutated), extra keyword arguments,
    and the item fields ``agent_id`` / ``task_id`` / ``conversation_id`` / ``user_id`` that are set.

    Raises:
        ValidationError: not JSON-serialisable, or an item field that is not a string (named
            by the field: an ``agent_id`` of 7 broke every later summary of the scope).
    """
    meta = dict(validation.metadata(metadata))
    check_item_fields(meta, "metadata.")
    meta.update(validation.metadata(dict(kwargs), "kwargs"))
    check_item_fields(meta, "kwargs.")
    given = {k: v for k, v in fields.items() if v is not None}
    check_item_fields(given)
    meta.update({k: validation.short_text(v, k) for k, v in given.items()})
    return meta


class ShortTermMemory(ShelfBacked):
    """A bounded, LRU-evicted memory of recent items, shared by every process on the database.

    A crash of the database server empties short-term memory (UNLOGGED table); the reads
    (``search``, ``retrieve``, ``get_recent``, ``get_context``, ...) then say so: a WARNING log
    line and :class:`~cortex_pg.errors.STMLostWarning` while nothing has been saved to the scope
    since; :attr:`stm_lost_at` tells when it last happened.

    Args:
        capacity: items kept in this scope (default 20, as calute).
        storage, enable_embeddings: accepted for calute compatibility, not used (the rows are
            the storage; every item is embedded for hybrid search).
        store: the :class:`MemoryStore` (default ``MemoryStore.open()``).
        user_id, session_id: the scope (None = ``"default"``).
        memory_type: the rows' label (default ``"short_term"``).
    """

    def __init__(
        self,
        capacity: int = 20,
        storage: Any = None,
        enable_embeddings: bool = False,
        *,
        store: MemoryStore | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        memory_type: str = MEMORY_TYPE,
    ) -> None:
        self.store = facade_store(store, type(self).__name__)
        self.capacity = validation.limit(capacity, "capacity")
        self.max_items = self.capacity
        self.enable_embeddings = enable_embeddings
        self.shelf = Shelf(self.store, user_id, session_id, "stm", memory_type, capacity=self.capacity)

    def save(
        self,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> MemoryItem:
        """Store an item; other keyword arguments go into its metadata (as calute);
        ``importance`` (in [0, 1]) also sets the note's importance, ``time`` its own time.
        The caller's ``metadata`` dict is copied, never changed.

        The same content saved again in this scope is the same item (its id is returned).

        Raises:
            ValidationError: blank content, bad metadata or importance.
        """
        time = kwargs.pop("time", None)
        importance = kwargs.get("importance", (metadata or {}).get("importance", 0.5))
        fields = {"agent_id": agent_id, "user_id": user_id, "conversation_id": conversation_id}
        fields["task_id"] = kwargs.pop("task_id", None)
        meta = item_metadata(metadata, fields, kwargs)
        note = self.shelf.add(content, meta, importance=importance, time=time)
        return item_from_note(note)

    def search(
        self,
        query: str,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        min_relevance: float = 0.0,
        **kwargs: Any,
    ) -> list[MemoryItem]:
        """Hybrid search (vector + BM25, :meth:`MemoryStore.search`) of this scope, best first.

        ``relevance_score`` is the store's relevance in [0, 1] (``search_notes``: the vector
        and BM25 scores normalised over the query's candidates and fused, then smoothed with
        the item's neighbours, see README "How search scores"). The scale is relative to the
        candidates: the best scores near 1 and the weakest 0, so with few items (two that both
        match, say) the second scores 0 however close it is, and any ``min_relevance`` above 0
        leaves it out. Items below ``min_relevance`` are left out (calute returned them). A
        blank query returns the newest items, each with relevance 1.0 (as calute, where ""
        matches everything). Returned items count as accessed (``access_count`` + 1; they
        become most recently used).

        Args:
            filters: where_filter on item fields and metadata keys (``{"agent_id": "x"}``);
                keys with a None value are ignored.

        Raises:
            ValidationError: ``query`` not a string, or longer than 10,000 characters, holding
                NUL or not valid Unicode (field ``query``); limit <= 0, a bad filter or
                min_relevance outside [0, 1].
        """
        lim = validation.limit(limit)
        floor = validation.unit_interval(min_relevance, "min_relevance")
        query = validation.query_or_blank(query)
        if not query:
            return [item_from_note(n) for n in self.shelf.list(filters, limit=lim, touch=True)]
        results = self.shelf.search(query, limit=lim, filters=filters)
        return [item_from_note(r.note, r.score, access_bump=1) for r in results if r.score >= floor]

    def retrieve(
        self,
        memory_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 10,
    ) -> MemoryItem | list[MemoryItem] | None:
        """One item by id (counted as an access; None when absent or evicted), or up to
        ``limit`` items matching ``filters``, newest first (each counted as accessed)."""
        if memory_id is not None:
            note = self.shelf.get(memory_id, touch=True)
            return None if note is None else item_from_note(note)
        return [item_from_note(n) for n in self.shelf.list(filters, limit=limit, touch=True)]

    def update(self, memory_id: str, updates: Mapping[str, Any]) -> bool:
        """Change ``content`` (re-embedded), ``metadata`` (merged), ``importance``; any other
        key is stored in the metadata. Returns False when the item is not here.

        Raises:
            ValidationError: a bad value.
        """
        return self.shelf.update(memory_id, updates) is not None

    def delete(self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete by id or by filters (where_filter); returns the number removed."""
        return self.shelf.delete(memory_id, filters)

    def clear(self) -> None:
        """Remove every item of this scope."""
        self.shelf.clear()

    def get_recent(self, n: int = 5) -> list[MemoryItem]:
        """The last ``n`` items saved, oldest first (not counted as accesses)."""
        notes = self.shelf.list(limit=validation.limit(n, "n"), order="newest")
        return [item_from_note(x) for x in reversed(notes)]

    def summarize(self) -> str:
        """calute's summary: ``"Recent activity:"``, then per conversation (items without one
        first, with no heading; others under ``"\\nConversation <id>:"``) its last 3 items as
        ``"  [<agent_id or System>]: <content[:100]>"``; ``"No recent memories."`` when empty."""
        items = [item_from_note(n) for n in self.shelf.list(order="oldest")]
        if not items:
            return "No recent memories."
        groups: dict[str, list[MemoryItem]] = {}
        for item in items:
            groups.setdefault(item.conversation_id or "default", []).append(item)
        lines = ["Recent activity:"]
        for conv, members in groups.items():
            if conv != "default":
                lines.append(f"\nConversation {conv}:")
            lines.extend(f"  [{m.agent_id or 'System'}]: {m.content[:100]}" for m in members[-3:])
        return "\n".join(lines)

    @property
    def stm_lost_at(self) -> datetime | None:
        """When crash recovery of the database server last emptied this scope (timezone-aware
        UTC: the time of the crash recovery that emptied it), or None if it never did. Read
        from the database on every access."""
        return self.shelf.stm_lost_at()

    def __repr__(self) -> str:
        return f"ShortTermMemory(items={len(self)}, max={self.max_items})"

    asave = threaded(save)  # asyncio forms: a worker thread each
    asearch = threaded(search)
