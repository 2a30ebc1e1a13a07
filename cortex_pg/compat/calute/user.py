"""calute's ``UserMemory``: per-user contextual memory, entities and preferences.

Preferences are a row of ``cortex.user_preferences`` holding only the keys a user set;
reads return :data:`DEFAULT_PREFERENCES` overlaid with them. Updates merge in one
``INSERT ... ON CONFLICT DO UPDATE`` (``preferences || patch``) and persist; nothing resets
them (calute reset a user's preferences to the defaults whenever the user's in-process memory
object was created). Each user is its own tenant (``user_id``) in ``session_id`` (default
``"default"``); the per-user memory objects are views, created on demand, holding no state.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from cortex_pg.compat.calute import sql
from cortex_pg.compat.calute.contextual import ContextualMemory
from cortex_pg.compat.memory_item import MemoryItem
from cortex_pg.compat.views import ReadOnlyDict, SqlMapping
from cortex_pg.entities import EntityMemory
from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore
from cortex_pg.store.memory_store import facade_store, validation

DEFAULT_PREFERENCES: dict[str, Any] = {
    "response_style": "balanced",
    "verbosity": "normal",
    "technical_level": "intermediate",
    "language": "en",
    "timezone": "UTC",
    "memory_enabled": True,
    "max_context_items": 10,
}


class UserMemory:
    """Memories, entities and preferences per user.

    Args:
        storage: accepted for calute compatibility, not used.
        store: the :class:`MemoryStore` (default ``MemoryStore.open()``).
        session_id: the session each user's memory lives in (None = ``"default"``).
        short_term_capacity: short-term items per user (default 20, as calute).
    """

    def __init__(
        self,
        storage: Any = None,
        *,
        store: MemoryStore | None = None,
        session_id: str | None = None,
        short_term_capacity: int = 20,
    ) -> None:
        self.store = facade_store(store, type(self).__name__)
        self.session_id = validation.scope_id(session_id, "session_id")
        self.short_term_capacity = validation.limit(short_term_capacity, "short_term_capacity")
        self.user_memories: dict[str, ContextualMemory] = {}
        self.user_entities: dict[str, EntityMemory] = {}

    WRITE_METHOD = "UserMemory.update_user_preferences"

    @property
    def user_preferences(self) -> SqlMapping:
        """calute's ``user_preferences``: user id -> preferences (:data:`DEFAULT_PREFERENCES`
        overlaid with what the user set), for every user known to ``cortex.user_preferences``
        (a user is known once a memory was created for it by :meth:`get_or_create_user_memory`
        or preferences were set, in any process). A read-only view read from SQL on every
        access; writing to it or to a preferences dict raises
        :class:`~cortex_pg.errors.ReadOnlyError` naming :meth:`update_user_preferences`."""
        view = "UserMemory.user_preferences"

        def prefs(stored: Mapping[str, Any] | None) -> ReadOnlyDict:
            return ReadOnlyDict(
                {**copy.deepcopy(DEFAULT_PREFERENCES), **(stored or {})}, view, self.WRITE_METHOD
            )

        def rows() -> dict[str, ReadOnlyDict]:
            with translate_db_errors(), self.store.engine.connect() as conn:
                found = conn.execute(text(sql.PREFERENCES_ALL)).all()
            return {r.user_id: prefs(r.preferences) for r in found}

        def get(user_id: str) -> ReadOnlyDict | None:
            with translate_db_errors(), self.store.engine.connect() as conn:
                found = conn.execute(text(sql.PREFERENCES_ROW), {"user_id": user_id}).first()
            return None if found is None else prefs(found.preferences)

        return SqlMapping(view, self.WRITE_METHOD, lambda: list(rows()), get, rows)

    def get_or_create_user_memory(self, user_id: str) -> ContextualMemory:
        """The user's :class:`ContextualMemory` (a view; its data may come from any process).
        The user becomes a key of :attr:`user_preferences` (with the defaults), as in calute.

        Raises:
            ValidationError: a bad user_id.
        """
        uid = validation.scope_id(user_id, "user_id")
        if uid not in self.user_memories:
            with translate_db_errors(), self.store.engine.begin() as conn:
                conn.execute(text(sql.PREFERENCES_KNOW), {"user_id": uid})
            self.user_memories[uid] = ContextualMemory(
                self.short_term_capacity, store=self.store, user_id=uid, session_id=self.session_id
            )
            self.user_entities[uid] = EntityMemory(
                self.store, user_id=uid, session_id=f"{self.session_id}/entities"
            )
        return self.user_memories[uid]

    def _entities(self, user_id: str) -> EntityMemory:
        self.get_or_create_user_memory(user_id)
        return self.user_entities[validation.scope_id(user_id, "user_id")]

    def save_memory(
        self, user_id: str, content: str, metadata: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> MemoryItem:
        """Save to the user's contextual memory (``metadata["user_id"]`` set; routed by
        ``importance``) and index its entities; returns the contextual item. The caller's
        dict is copied, not changed.

        Raises:
            ValidationError: blank content, bad metadata.
        """
        memory = self.get_or_create_user_memory(user_id)
        meta = {**validation.metadata(metadata), "user_id": memory.user_id}
        entity_item = self._entities(user_id).save(content, metadata=meta)
        meta["entities"] = entity_item.metadata.get("entities", [])
        return memory.save(content, metadata=meta, **kwargs)

    def search_user_memory(
        self, user_id: str, query: str, limit: int = 10, **kwargs: Any
    ) -> list[MemoryItem]:
        """:meth:`ContextualMemory.search` of the user's memory.

        Raises:
            ValidationError: a bad user_id, or what :meth:`ContextualMemory.search` raises (a
                bad ``query`` is refused before the user becomes known).
        """
        query = validation.query_or_blank(query)
        return self.get_or_create_user_memory(user_id).search(query, limit=limit, **kwargs)

    def get_user_preferences(self, user_id: str) -> dict[str, Any]:
        """The defaults overlaid with what the user set (a fresh dict)."""
        uid = validation.scope_id(user_id, "user_id")
        with translate_db_errors(), self.store.engine.connect() as conn:
            stored = conn.execute(text(sql.PREFERENCES_GET), {"user_id": uid}).scalar()
        return {**copy.deepcopy(DEFAULT_PREFERENCES), **(stored or {})}

    def update_user_preferences(self, user_id: str, preferences: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``preferences`` into the user's stored ones (persisted; other keys kept).

        Returns:
            The user's preferences after the update (defaults overlaid).

        Raises:
            ValidationError: not a JSON-serialisable dict, or a bad user_id.
        """
        uid = validation.scope_id(user_id, "user_id")
        patch = validation.metadata(preferences, "preferences")
        with translate_db_errors(), self.store.engine.begin() as conn:
            stored = conn.execute(
                text(sql.PREFERENCES_MERGE), {"user_id": uid, "patch": json.dumps(patch)}
            ).scalar()
        return {**copy.deepcopy(DEFAULT_PREFERENCES), **(stored or {})}

    def get_user_context(self, user_id: str) -> str:
        """calute's text, parts joined by a blank line: ``"User preferences: {...}"``, the
        contextual summary, and ``"Known entities: a, b, ..."`` (up to 10, most mentioned first)
        when the user has any."""
        memory = self.get_or_create_user_memory(user_id)
        parts = [f"User preferences: {self.get_user_preferences(user_id)}", memory.get_context_summary()]
        names = [
            e.name
            for e in self._entities(user_id).graph.entities(memory.user_id, limit=10)
            if e.frequency > 0
        ]
        if names:
            parts.append(f"Known entities: {', '.join(names)}")
        return "\n\n".join(parts)

    def get_user_statistics(self, user_id: str) -> dict[str, Any]:
        """``user_id``, ``total_memories``, ``short_term_memories``, ``long_term_memories``,
        ``entities_known``, ``relationships`` (current facts) and ``preferences``."""
        memory = self.get_or_create_user_memory(user_id)
        uid = memory.user_id
        st, lt = len(memory.short_term), len(memory.long_term)
        with translate_db_errors(), self.store.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM cortex.entities WHERE user_id = :u AND frequency > 0) AS e, "
                    "(SELECT count(*) FROM cortex.relationships WHERE user_id = :u AND valid_to IS NULL) AS r"
                ),
                {"u": uid},
            ).one()
        return {
            "user_id": uid,
            "total_memories": st + lt,
            "short_term_memories": st,
            "long_term_memories": lt,
            "entities_known": int(row.e),
            "relationships": int(row.r),
            "preferences": self.get_user_preferences(uid),
        }

    def get_context(self, limit: int = 10, format_type: str = "text", *, user_id: str | None = None) -> str:
        """:meth:`ContextualMemory.get_context` of one user's memory (calute's formats). Each
        user is its own tenant, so ``user_id`` is required: no output mixes users.

        Raises:
            ValidationError: no or a bad ``user_id``, a bad ``limit`` or ``format_type``.
        """
        return self.get_or_create_user_memory(self._required_user(user_id)).get_context(limit, format_type)

    def get_statistics(self, user_id: str | None = None) -> dict[str, Any]:
        """:meth:`ContextualMemory.get_statistics` of one user's memory (``total_items``,
        ``max_items``, ``memory_types``, ``unique_agents``, ``unique_users``,
        ``unique_conversations``, ...), counted in SQL; ``user_id`` is required (see
        :meth:`get_context`).

        Raises:
            ValidationError: no or a bad ``user_id``.
        """
        return self.get_or_create_user_memory(self._required_user(user_id)).get_statistics()

    @staticmethod
    def _required_user(user_id: object) -> str:
        if user_id is None:
            raise ValidationError(
                "user_id", "required: UserMemory keeps one memory per user (each its own tenant)"
            )
        return validation.scope_id(user_id, "user_id")

    def clear_user_memory(self, user_id: str) -> None:
        """Delete the user's memories (both tiers, the context stack), entity items and preferences."""
        memory = self.get_or_create_user_memory(user_id)
        memory.clear()
        self._entities(user_id).clear()
        with translate_db_errors(), self.store.engine.begin() as conn:
            conn.execute(text(sql.PREFERENCES_DELETE), {"user_id": memory.user_id})
        self.user_memories.pop(memory.user_id, None)
        self.user_entities.pop(memory.user_id, None)

    def __repr__(self) -> str:
        return f"UserMemory(session_id={self.session_id!r})"
