"""calute's ``LongTermMemory`` on ``cortex.notes`` (``memory_type = "long_term"``).

Search score (calute's weights, computed in SQL over the hybrid candidates)::

    score = 0.5 * relevance + 0.3 * min(1, max(0, 1 - age_days / retention_days)) + 0.2 * importance

with ``relevance`` the store's hybrid relevance in [0, 1] (score fusion of the vector and BM25
scores over the query's candidates, smoothed with session neighbours; README "How search
scores"; for a query that names a day or month, ``0.7 * relevance + 0.3`` for an item of that
time and ``0.7 * relevance`` for the others, as the store's named dates) and ``age_days``
measured from the item's own time (an item dated in the future has
recency 1, as one written now).

Cleanup (SQL, under the scope's advisory lock) runs before each save when the scope holds
``max_items`` items, and on :meth:`LongTermMemory.cleanup`: items older than
``retention_days`` go first, then the lowest by calute's cleanup score
``0.3 * importance + 0.3 * access_count / 100 + 0.4 * min(1, 1 - age_days / retention_days)``
(the oldest, least important, least accessed) until the scope has room. Every removal is
logged at WARNING level and kept in :attr:`LongTermMemory.last_cleanup` — never silent.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.compat.calute import sql
from cortex_pg.compat.calute.shelf import Shelf, ShelfBacked
from cortex_pg.compat.calute.short_term import item_metadata
from cortex_pg.compat.memory_item import MemoryItem, item_from_note, item_importance
from cortex_pg.compat.threaded import threaded
from cortex_pg.db.retry import retry_transient
from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore
from cortex_pg.store import sql as store_sql
from cortex_pg.store.memory_store import facade_store, note_from_row, validation, vector_literal
from cortex_pg.store.ranking import Ranking
from cortex_pg.temporal import query_date_window, without_temporal_keywords

MEMORY_TYPE = "long_term"

log = logging.getLogger(__name__)


@dataclass
class CleanupReport:
    """What a cleanup removed: ``expired`` (past retention) and ``over_capacity`` ids."""

    expired: list[str] = field(default_factory=list)
    over_capacity: list[str] = field(default_factory=list)

    @property
    def removed(self) -> int:
        return len(self.expired) + len(self.over_capacity)


#: the longest finite retention, in days (about 2,700 years): its bound, now minus it, stays
#: within PostgreSQL's timestamps (from 4713 BC); past them every cleanup and full save failed
MAX_RETENTION_DAYS = 1_000_000


class LongTermMemory(ShelfBacked):
    """Durable memories with importance, searched by relevance, recency and importance.

    Args:
        storage, enable_embeddings, db_path: accepted for calute compatibility, not used.
        max_items: items kept in this scope (default 10000); see the module doc for cleanup.
        retention_days: items whose own time is older are removed at cleanup (default 365):
            a positive number of days up to 1,000,000 (about 2,700 years), or ``math.inf``
            for never.
        store: the :class:`MemoryStore` (default ``MemoryStore.open()``).
        user_id, session_id: the scope (None = ``"default"``).
        memory_type: the rows' label (default ``"long_term"``).
    """

    def __init__(
        self,
        storage: Any = None,
        enable_embeddings: bool = True,
        db_path: str | None = None,
        max_items: int = 10000,
        retention_days: int = 365,
        *,
        store: MemoryStore | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        memory_type: str = MEMORY_TYPE,
    ) -> None:
        self.store = facade_store(store, type(self).__name__)
        self.max_items = validation.limit(max_items, "max_items")
        if (
            isinstance(retention_days, bool)
            or not isinstance(retention_days, int | float)
            or not 0 < retention_days <= MAX_RETENTION_DAYS  # (NaN fails both comparisons)
        ) and retention_days != math.inf:
            raise ValidationError(
                "retention_days",
                f"must be a positive number of days, at most {MAX_RETENTION_DAYS:,} (about 2,700 years), "
                f"or math.inf for never; got {retention_days!r}",
            )
        self.retention_days = float(retention_days)
        self.enable_embeddings = enable_embeddings
        self.shelf = Shelf(self.store, user_id, session_id, "ltm", memory_type)
        self.last_cleanup = CleanupReport()

    def save(
        self,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        conversation_id: str | None = None,
        importance: float = 0.5,
        **kwargs: Any,
    ) -> MemoryItem:
        """Store an item with ``importance`` in [0, 1] (also kept as ``metadata["importance"]``,
        as calute); other keyword arguments go into the metadata, ``time`` sets its own time.
        The caller's dict is copied. When the item makes the scope hold more than
        ``max_items``, a cleanup runs in the item's transaction (under its scope's lock, so
        concurrent saves never leave more than ``max_items``), and never removes the item.

        Raises:
            ValidationError: blank content, bad metadata or importance.
        """
        imp = validation.importance(importance)
        time = kwargs.pop("time", None)
        fields = {"agent_id": agent_id, "user_id": user_id, "conversation_id": conversation_id}
        fields["task_id"] = kwargs.pop("task_id", None)
        meta = item_metadata(metadata, fields, {**kwargs, "importance": imp})
        validation.content(content)
        trimmed: dict[str, list[Any]] = {}
        spare = validation.content_hash(content)

        def make_room(conn: Connection) -> None:  # (a text the scope held is no new item)
            if self.shelf.count(conn) > self.max_items:
                trimmed["rows"] = self._cleanup_rows(conn, self.max_items - 1, spare)
            else:
                trimmed.pop("rows", None)  # (a retried attempt's)

        item = item_from_note(
            self.shelf.add(content, meta, importance=imp, time=time, in_same_transaction=make_room)
        )
        if "rows" in trimmed:
            self._report(trimmed["rows"])
        return item

    def _cleanup_rows(self, conn: Connection, keep: int, spare: str | None = None) -> list[Any]:
        params = {
            **self.shelf.params,
            "retention_days": self.retention_days,
            "keep": max(keep, 0),
            "spare": spare,
        }
        conn.execute(text(sql.LOCK_SCOPE), params)
        gone = conn.execute(text(sql.CLEANUP.format(scope=sql.SCOPE)), params).all()
        # (the notes that followed them read a new predecessor: as MemoryStore.delete's)
        self.store.contexts_after_delete(conn, self.shelf.user_id, gone)
        return gone

    @retry_transient  # one transaction of its own (its deletes, as Shelf.delete's)
    def cleanup(self, room: int = 0) -> CleanupReport:
        """Remove expired items, then the lowest-scored until at most ``max_items - room``
        remain (see the module doc). Returns (and keeps in ``last_cleanup``) the report."""
        with translate_db_errors(), self.store.engine.begin() as conn:
            gone = self._cleanup_rows(conn, self.max_items - max(room, 0))
        return self._report(gone)

    def _report(self, gone: list[Any]) -> CleanupReport:
        expired = [str(r.id) for r in gone if r.expired]
        trimmed = [str(r.id) for r in gone if not r.expired]
        report = CleanupReport(expired, trimmed)
        if report.removed:
            log.warning(
                "long-term memory %s/%s: removed %d item(s) past retention (%g days) and %d over capacity (%d)",
                self.shelf.user_id,
                self.shelf.session_id,
                len(expired),
                self.retention_days,
                len(trimmed),
                self.max_items,
            )
        self.last_cleanup = report
        return report

    @retry_transient  # a transaction of its own that touches its results (see Shelf.get)
    def search(
        self,
        query: str,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        use_semantic: bool = True,
        **kwargs: Any,
    ) -> list[MemoryItem]:
        """Items by the score of the module doc, best first, one SQL statement; each counted
        as accessed. ``relevance_score`` is that score, in [0, 1]. A blank query ranks every
        item with relevance 1 (as calute). ``use_semantic`` is accepted, always hybrid. The
        query's temporal keywords ("yesterday", "last", ...) are left out of its full-text
        terms, as :meth:`MemoryStore.search` leaves them out.

        Raises:
            ValidationError: ``query`` not a string, or longer than 10,000 characters, holding
                NUL or not valid Unicode (field ``query``); limit <= 0 or a bad filter.
            EmbeddingModelError: the embedder returned a vector without a direction for the query.
        """
        lim = validation.limit(limit)
        query = validation.query_or_blank(query)
        if not query:
            notes = self.shelf.list(
                filters, limit=lim, order="ltm_score", touch=True, retention_days=self.retention_days
            )
            return [item_from_note(n, self._blank_score(n)) for n in notes]
        with translate_db_errors(), self.store.engine.begin() as conn:
            # the query without the speakers it names, blended in as MemoryStore.search does
            unnamed = conn.execute(
                text(store_sql.QUERY_WITHOUT_SPEAKERS), {"user_id": self.shelf.user_id, "query": query}
            ).scalar_one()
        vector = self.store.embed_query(query, unnamed=unnamed)
        params = {
            "user_id": self.shelf.user_id,
            "session_id": self.shelf.session_id,
            "embedding": vector_literal(vector),
            # (as MemoryStore.search: "yesterday" asks for a time, not for notes holding the word)
            "query": without_temporal_keywords(query),
            "pool": max(lim * 5, 50),
            "limit": lim,
            "filter": json.dumps(self.shelf.where_filter(filters)),
            "model": self.store.embedder.name,
            "retention_days": self.retention_days,
        }
        # a query naming a day or month: its notes first, as MemoryStore.search ranks them
        named = query_date_window(query)
        params.update(
            focus_from=named[0] if named else None,
            focus_to=named[1] if named else None,
            date_weight=Ranking().date_weight if named else 0.0,
        )
        with translate_db_errors(), self.store.engine.begin() as conn:
            rows = conn.execute(text(sql.LTM_SEARCH), params).mappings().all()
        return [item_from_note(note_from_row(r), float(r["ltm_score"]), access_bump=1) for r in rows]

    def _blank_score(self, note: Any) -> float:
        from datetime import UTC, datetime

        age = (datetime.now(UTC) - note.created_at).total_seconds() / 86400.0
        return 0.5 + 0.3 * min(1.0, max(0.0, 1 - age / self.retention_days)) + 0.2 * note.importance

    def retrieve(
        self,
        memory_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 10,
    ) -> MemoryItem | list[MemoryItem] | None:
        """One item by id (counted as an access; None when absent), or up to ``limit`` items
        matching ``filters`` in insertion order, oldest first (as calute), each counted."""
        if memory_id is not None:
            note = self.shelf.get(memory_id, touch=True)
            return None if note is None else item_from_note(note)
        return [item_from_note(n) for n in self.shelf.list(filters, limit=limit, order="oldest", touch=True)]

    def update(self, memory_id: str, updates: Mapping[str, Any]) -> bool:
        """Change ``content`` (re-embedded), ``metadata`` (merged), ``importance``; other keys
        go into the metadata. Returns False when the item is not here.

        Raises:
            ValidationError: ``updates`` or its ``metadata`` not a dict, or a bad value.
        """
        if not isinstance(updates, Mapping):
            raise ValidationError("updates", f"must be a dict, got {type(updates).__name__}")
        if "importance" in updates:
            updates = {
                **updates,
                "metadata": {
                    **validation.metadata(updates.get("metadata"), "updates.metadata"),
                    "importance": updates["importance"],
                },
            }
        return self.shelf.update(memory_id, updates) is not None

    def delete(self, memory_id: str | None = None, filters: Mapping[str, Any] | None = None) -> int:
        """Delete by id or by filters (where_filter); returns the number removed."""
        return self.shelf.delete(memory_id, filters)

    def clear(self) -> None:
        """Remove every item of this scope."""
        self.shelf.clear()

    @retry_transient  # one transaction of its own
    def merge_similar(self, similarity_threshold: float = 0.8) -> int:
        """Merge items whose word sets overlap by ``|A & B| / max(|A|, |B|) >= threshold``
        (calute v3): the longer text is kept with the larger importance and the summed access
        count; the other is deleted (as calute removes it; its text saved again is a new item).
        Pairs are found in SQL. Returns the number of items merged away."""
        threshold = validation.unit_interval(similarity_threshold, "similarity_threshold")
        params = {**self.shelf.params, "threshold": threshold}
        merged = 0
        with translate_db_errors(), self.store.engine.begin() as conn:
            conn.execute(text(sql.LOCK_SCOPE), params)
            pairs = conn.execute(text(sql.SIMILAR_PAIRS.format(scope=sql.SCOPE)), params).all()
            if pairs:  # in the touching reads' order, not pair by pair
                ids = list({i for pair in pairs for i in pair})
                conn.execute(text(store_sql.LOCK_LTM_NOTES), {"user_id": self.shelf.user_id, "ids": ids})
            gone: set[Any] = set()
            places: list[Any] = []
            for keep_id, drop_id in pairs:
                if keep_id in gone or drop_id in gone:
                    continue
                places += conn.execute(
                    text(sql.MERGE), {"user_id": self.shelf.user_id, "keep_id": keep_id, "drop_id": drop_id}
                ).all()
                gone.add(drop_id)
                merged += 1
            # (the notes that followed the dropped ones read a new predecessor: as MemoryStore.delete's)
            self.store.contexts_after_delete(conn, self.shelf.user_id, places)
        return merged

    def consolidate(self, merge_similar: bool = True, similarity_threshold: float = 0.8) -> str:
        """calute's summary (v3): after merging similar items (when ``merge_similar``),
        ``"Long-term memory summary:"``, then per group (``conversation_id``, else
        ``agent_id``, else ``general``; heading ``"\\n<Group title-cased>:"``) the top 5 by
        importance (newest first on ties) as
        ``"  - <content[:150]> (importance: <x.x>, accessed: <n>x)"``;
        ``"No long-term memories available."`` when empty."""
        if merge_similar:
            self.merge_similar(similarity_threshold)
        items = [item_from_note(n) for n in self.shelf.list(order="oldest")]
        if not items:
            return "No long-term memories available."
        groups: dict[str, list[MemoryItem]] = {}
        for item in items:
            groups.setdefault(item.conversation_id or item.agent_id or "general", []).append(item)
        lines = ["Long-term memory summary:"]
        for key, members in groups.items():
            lines.append(f"\n{str(key).title()}:")  # (a number stored before they were checked)
            members.sort(key=lambda m: (item_importance(m.metadata, 0.5), m.timestamp), reverse=True)
            for m in members[:5]:
                imp = item_importance(m.metadata, 0.5)
                lines.append(f"  - {m.content[:150]} (importance: {imp:.1f}, accessed: {m.access_count}x)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LongTermMemory(items={len(self)}, max={self.max_items})"

    asave = threaded(save)  # asyncio forms: a worker thread each
    asearch = threaded(search)
