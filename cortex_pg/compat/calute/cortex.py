"""calute's ``CortexMemory`` (``calute.cortex.memory_integration``) on PostgreSQL.

One CortexMemory is one scope — ``(user_id, scope)``, both ``"default"`` unless given —
laid out on the store's tables as sessions of the user::

    <scope>             ShortTermMemory (stm, "short_term"), LongTermMemory (ltm, "long_term")
    <scope>/contextual  ContextualMemory's short- and long-term shelves; its context stack
    <scope>/entities    EntityMemory's items (entities and relationships are per user)

Every instance opened on the same database and scope, in any process, sees the same memory;
``reset_all`` empties only its own scope (so a scope may not end in ``/contextual`` or
``/entities``: it would be another scope's memory). Writes always happen (calute skipped them when a
store was empty, because ``if self.short_term:`` is false for an empty store).

Database: ``database_url`` names an external PostgreSQL; ``persistence_path`` the data
directory of the embedded server (shared with other processes, left running on close);
with neither, a fresh embedded server in a temporary directory is started and then stopped
and removed by :meth:`CortexMemory.close` — an ephemeral memory, like calute's default.
An ephemeral memory that is never closed is stopped and removed when the interpreter exits
(an ``atexit`` hook, unregistered by ``close``; a process killed by a signal skips it).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import text

from cortex_pg.compat.calute import sql
from cortex_pg.compat.calute.contextual import ContextualMemory
from cortex_pg.compat.calute.long_term import LongTermMemory
from cortex_pg.compat.calute.shelf import Shelf
from cortex_pg.compat.calute.short_term import ShortTermMemory
from cortex_pg.compat.calute.user import UserMemory
from cortex_pg.compat.memory_item import check_item_fields
from cortex_pg.compat.threaded import threaded
from cortex_pg.db import embedded
from cortex_pg.embeddings.base import Embedder
from cortex_pg.entities import EntityMemory
from cortex_pg.entities.extract import extract
from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import MemoryStore, validation

BULLET = "  • "
CORTEX_MANAGER = "cortex_manager"
TASK_LTM_THRESHOLD = 0.7
INTERACTION_LTM_THRESHOLD = 0.6
#: the memories within a scope, as sessions ``<scope>/<name>``: a scope may not end in one
SUB_SCOPES = ("contextual", "entities")


class CortexMemory:
    """Memory for agents and tasks: short-term, long-term, entity, contextual and user memory.

    Args:
        enable_short_term, enable_long_term, enable_entity, enable_user: which memories exist
            (the contextual memory always does).
        persistence_path: data directory of an embedded server (see the module doc).
        short_term_capacity: short-term items of the scope (and of its contextual memory).
        long_term_capacity: long-term items of the scope (cleanup beyond it, reported).
        database_url: an external PostgreSQL (>= 15 with pgvector), migrated on open.
        embedder: an Embedder or a name (``minilm``, ``hashing``, ``openai``); default the
            store's default (``CORTEX_PG_EMBEDDER``, else all-MiniLM-L6-v2, offline).
        user_id, scope: the tenant and scope of this memory (None = ``"default"``).
        store: an open :class:`MemoryStore` to use instead (not closed by :meth:`close`).

    Raises:
        ServerError: the embedded server could not start. SchemaError /
        EmbeddingDimensionError: see :meth:`MemoryStore.open`.
    """

    def __init__(
        self,
        enable_short_term: bool = True,
        enable_long_term: bool = True,
        enable_entity: bool = True,
        enable_user: bool = False,
        persistence_path: str | Path | None = None,
        short_term_capacity: int = 50,
        long_term_capacity: int = 5000,
        database_url: str | None = None,
        *,
        embedder: Embedder | str | None = None,
        user_id: str | None = None,
        scope: str | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        self.user_id = validation.scope_id(user_id, "user_id")
        self.scope = validation.scope_id(scope, "scope")
        if "/" in self.scope and self.scope.rsplit("/", 1)[-1] in SUB_SCOPES:  # another scope's memory
            raise ValidationError(
                "scope",
                f"{self.scope!r} ends in /{self.scope.rsplit('/', 1)[-1]}, the name of a memory within a "
                "scope (<scope>/contextual, <scope>/entities); choose another name",
            )
        self.persistence_path = persistence_path
        self._ephemeral_dir: Path | None = None
        self._atexit_hook: Callable[[], None] | None = None
        self._owns_store = store is None
        if store is None:
            store = self._open(persistence_path, database_url, embedder)
        self.store = store
        self.store.require_owner(type(self).__name__)
        self.storage = None  # calute's SQLiteStorage slot; the database is the storage
        common = {"store": store, "user_id": self.user_id}
        self.short_term = (
            ShortTermMemory(capacity=short_term_capacity, session_id=self.scope, **common)
            if enable_short_term
            else None
        )
        self.long_term = (
            LongTermMemory(max_items=long_term_capacity, session_id=self.scope, **common)
            if enable_long_term
            else None
        )
        self.entity_memory = (
            EntityMemory(store, user_id=self.user_id, session_id=f"{self.scope}/{SUB_SCOPES[1]}")
            if enable_entity
            else None
        )
        self.user_memory = UserMemory(store=store) if enable_user else None
        self.contextual = ContextualMemory(
            short_term_capacity=short_term_capacity, session_id=f"{self.scope}/{SUB_SCOPES[0]}", **common
        )

    def _open(self, path: str | Path | None, url: str | None, embedder: Embedder | str | None) -> MemoryStore:
        if url:
            return MemoryStore.open(url, embedder=embedder, auto_migrate=True)
        if path is not None:
            data_dir = Path(path).expanduser().resolve()
            embedded.make_data_dir(data_dir, "persistence_path")
            return MemoryStore.open(embedded.start(data_dir), embedder=embedder, auto_migrate=True)
        self._ephemeral_dir = Path(tempfile.mkdtemp(prefix="cortex-pg-calute-"))
        # registered before the server starts, so that a failure half-way is cleaned up too
        self._atexit_hook = functools.partial(_remove_ephemeral_dir, self._ephemeral_dir, None)
        atexit.register(self._atexit_hook)
        try:
            store = MemoryStore.open(
                embedded.start(self._ephemeral_dir), embedder=embedder, auto_migrate=True
            )
        except BaseException:
            self._remove_ephemeral()
            raise
        # at exit, close the store's connections before the server stops
        atexit.unregister(self._atexit_hook)
        self._atexit_hook = functools.partial(_remove_ephemeral_dir, self._ephemeral_dir, store)
        atexit.register(self._atexit_hook)
        return store

    def close(self) -> None:
        """Release the connections; an ephemeral database (no path, no URL) is stopped and deleted."""
        if self._owns_store:
            self.store.close()
        self._remove_ephemeral()

    def _remove_ephemeral(self) -> None:
        if self._atexit_hook is not None:
            atexit.unregister(self._atexit_hook)
            self._atexit_hook = None
        if self._ephemeral_dir is not None:
            try:
                _remove_ephemeral_dir(self._ephemeral_dir, None)
            finally:
                self._ephemeral_dir = None

    def __enter__(self) -> CortexMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ context
    def build_context_for_task(
        self,
        task_description: str,
        agent_role: str | None = None,
        additional_context: str | None = None,
        max_items: int = 10,
    ) -> str:
        """The context text for a task, sections in this order, each only when it has lines:

        * ``"Background:\\n<additional_context>"``;
        * ``"Recent context:"``: the 5 newest short-term items, oldest first, 200 characters;
        * ``"\\nRelevant knowledge:"``: 5 long-term items for the task (of ``agent_role`` when
          given, as calute documents), 200 characters;
        * ``"\\nKnown entities:"``: up to 5 entities named in the task that memory has seen,
          ``"<name>: <n> mentions"``;
        * ``"\\nRelated memories:"``: the 3 best contextual items (of up to ``max_items``), 150
          characters.

        Lines are ``"  • <text>"``, joined by ``"\\n"``. Returns ``""`` when there is nothing.

        Raises:
            ValidationError: ``max_items`` is not a positive integer (field ``max_items``); the
                task description is not a string, or is longer than a search query (10,000
                characters), holds NUL bytes or is not valid Unicode (field ``task_description``);
                ``agent_role`` is not a string or None, holds NUL bytes or is not valid Unicode
                (field ``agent_role``).
        """
        max_items = validation.limit(max_items, "max_items")
        # (under the caller's name: it becomes the long-term search's filter)
        agent_role = validation.short_text(agent_role, "agent_role")
        # checked as a search query (type, length, NUL bytes), under the caller's name; blank: none
        query = validation.query_or_blank(task_description, "task_description")
        parts: list[str] = []
        if additional_context:
            parts.append(f"Background:\n{additional_context}")
        if self.short_term is not None:
            recent = self.short_term.get_recent(n=5)
            if recent:
                parts.append("Recent context:")
                parts.extend(f"{BULLET}{m.content[:200]}" for m in recent)
        if self.long_term is not None and query:
            filters = {"agent_id": agent_role} if agent_role else None
            knowledge = self.long_term.search(query, limit=5, filters=filters)
            if knowledge:
                parts.append("\nRelevant knowledge:")
                parts.extend(f"{BULLET}{m.content[:200]}" for m in knowledge)
        if self.entity_memory is not None and query:
            lines = []
            for name in extract(query).names[:5]:
                frequency = self.entity_memory.get_entity_info(name).get("frequency", 0)
                if frequency > 0:
                    lines.append(f"{BULLET}{name}: {frequency} mentions")
            if lines:
                parts.append("\nKnown entities:")
                parts.extend(lines)
        if query:
            related = self.contextual.search(query, limit=max_items, search_long_term=True)
            if related:
                parts.append("\nRelated memories:")
                parts.extend(f"{BULLET}{m.content[:150]}" for m in related[:3])
        return "\n".join(parts)

    # ------------------------------------------------------------------ writes
    def save_task_result(
        self,
        task_description: str,
        result: str,
        agent_role: str,
        importance: float = 0.5,
        task_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Remember a task's result: short-term ``"Task completed: <task[:100]> - Result:
        <result[:200]>"`` (always), long-term ``result`` when ``importance >= 0.7``, entity memory
        ``"<task> <result>"`` (entities extracted from the task and the result apart), and the
        contextual memory (routed by importance). Metadata:
        ``task_metadata`` (copied, not changed) plus ``task`` (100 characters) and ``agent_role``.

        Raises:
            ValidationError: blank result, a task description or agent role that is not a
                string (or holds NUL), bad importance or metadata (checked before any write).
        """
        imp = validation.importance(importance)
        validation.content(result, "result")
        for value, field in ((task_description, "task_description"), (agent_role, "agent_role")):
            if not isinstance(value, str):
                raise ValidationError(field, f"must be a string, got {type(value).__name__}")
            validation.short_text(value, field)
        # every text written below, before the first write (a refusal half-way left the items
        # written before it)
        validation.content(f"{task_description} {result}", "task_description")
        meta = {**validation.metadata(task_metadata, "task_metadata")}
        check_item_fields(meta, "task_metadata.")
        meta["task"] = task_description[:100]
        meta["agent_role"] = agent_role
        # entities of the task and of the result, each read as its own text: joined, a
        # sentence-initial word of the result ("Later, ...") would be mid-sentence
        names = list(dict.fromkeys(extract(task_description).names + extract(result).names))
        # the largest metadata written below (the entity item's) within the cap, before any write
        entities = names or extract(f"{task_description} {result}").names
        validation.metadata(
            {**meta, "agent_id": agent_role, "importance": imp, "entities": entities}, "task_metadata"
        )
        if self.short_term is not None:
            self.short_term.save(
                f"Task completed: {task_description[:100]} - Result: {result[:200]}",
                meta,
                agent_id=agent_role,
            )
        if self.long_term is not None and imp >= TASK_LTM_THRESHOLD:
            self.long_term.save(result, meta, agent_id=agent_role, importance=imp)
        if self.entity_memory is not None:
            self.entity_memory.save(
                f"{task_description} {result}", meta, entities=names or None, agent_id=agent_role
            )
        self.contextual.save(result, meta, importance=imp, agent_id=agent_role)

    def save_agent_interaction(
        self, agent_role: str, action: str, content: str, importance: float = 0.3
    ) -> None:
        """Remember ``"[<agent_role>] <action>: <content>"``: short-term (``metadata["action"]``)
        always, long-term too when ``importance >= 0.6``.

        Raises:
            ValidationError: bad importance.
        """
        imp = validation.importance(importance)
        interaction = f"[{agent_role}] {action}: {content}"
        if self.short_term is not None:
            self.short_term.save(interaction, {"action": action}, agent_id=agent_role)
        if self.long_term is not None and imp >= INTERACTION_LTM_THRESHOLD:
            self.long_term.save(interaction, agent_id=agent_role, importance=imp)

    def save_cortex_decision(
        self, decision: str, context: str, outcome: str | None = None, importance: float = 0.7
    ) -> None:
        """Remember ``"Decision: <decision>\\nContext: <context>"`` (plus ``"\\nOutcome: <outcome>"``)
        in long-term memory (agent ``cortex_manager``) and the contextual memory; metadata
        ``{"type": "cortex_decision", "has_outcome": outcome is not None}``.

        Raises:
            ValidationError: bad importance.
        """
        imp = validation.importance(importance)
        content = f"Decision: {decision}\nContext: {context}"
        if outcome:
            content += f"\nOutcome: {outcome}"
        meta = {"type": "cortex_decision", "has_outcome": outcome is not None}
        if self.long_term is not None:
            self.long_term.save(content, meta, importance=imp, agent_id=CORTEX_MANAGER)
        self.contextual.save(content, meta, importance=imp)

    # ------------------------------------------------------------------ reads
    def get_agent_history(self, agent_role: str, limit: int = 20) -> list[str]:
        """Contents of the agent's items: short-term newest first, then long-term oldest first,
        at most ``limit`` in all."""
        lim = validation.limit(limit)
        history: list[str] = []
        if self.short_term is not None:
            history += [
                m.content for m in self.short_term.search("", limit=lim, filters={"agent_id": agent_role})
            ]
        if self.long_term is not None and len(history) < lim:
            found = self.long_term.retrieve(filters={"agent_id": agent_role}, limit=lim - len(history))
            assert isinstance(found, list)
            history += [m.content for m in found]
        return history[:lim]

    def get_user_context(self, user_id: str) -> str:
        """:meth:`UserMemory.get_user_context` when user memory is enabled, else ``""``."""
        return self.user_memory.get_user_context(user_id) if self.user_memory is not None else ""

    def get_summary(self) -> str:
        """Parts joined by a blank line: the short-term summary, the long-term consolidation
        (which merges similar items first, as calute v3) and ``"Tracking <n> entities"`` when
        this scope's entity memory has items; ``""`` with every memory disabled."""
        parts: list[str] = []
        if self.short_term is not None:
            parts.append(self.short_term.summarize())
        if self.long_term is not None:
            parts.append(self.long_term.consolidate())
        if self.entity_memory is not None:
            with translate_db_errors(), self.store.engine.connect() as conn:
                names = conn.execute(
                    text(sql.SCOPE_ENTITIES),
                    {"user_id": self.user_id, "session_id": f"{self.scope}/{SUB_SCOPES[1]}"},
                ).all()
            if names:
                parts.append(f"Tracking {len(names)} entities")
        return "\n\n".join(parts)

    # ------------------------------------------------------------------ resets
    def reset_short_term(self) -> None:
        """Empty this scope's short-term memory (not the contextual one, as calute)."""
        if self.short_term is not None:
            self.short_term.clear()

    def reset_all(self) -> None:
        """Empty this scope's short-term, long-term, entity and contextual memory (with its
        context stack). Other scopes and user memory are untouched (as calute)."""
        if self.short_term is not None:
            self.short_term.clear()
        if self.long_term is not None:
            self.long_term.clear()
        if self.entity_memory is not None:
            Shelf(self.store, self.user_id, f"{self.scope}/{SUB_SCOPES[1]}", "ltm", "entity").clear()
        self.contextual.clear()

    def __repr__(self) -> str:
        return f"CortexMemory(user_id={self.user_id!r}, scope={self.scope!r})"

    # asyncio forms (a worker thread each: the call spans several shelves and statements)
    abuild_context_for_task = threaded(build_context_for_task)
    asave_task_result = threaded(save_task_result)
    asave_agent_interaction = threaded(save_agent_interaction)
    asave_cortex_decision = threaded(save_cortex_decision)


def _remove_ephemeral_dir(directory: Path, store: MemoryStore | None) -> None:
    """Stop the embedded server of ``directory`` and delete it (``store`` closed first, when given).

    Idempotent: a directory already removed (or a server already stopped) is left as it is.
    Used by :meth:`CortexMemory.close` and, for a memory never closed, at interpreter exit.
    """
    try:
        if store is not None:
            store.close()
    finally:
        try:
            if directory.exists():
                embedded.stop(directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
