"""The agent tools' implementation, over one store: what the LangChain tools and the MCP
server call. Each tool takes its argument model (:mod:`cortex_pg.integrations.schemas`) and
returns a JSON-ready dict; bad input raises the typed :mod:`cortex_pg.errors` error naming
the field.

With no store given, the toolkit opens one on first use: ``DATABASE_URL`` or the embedded
server (``CORTEX_PG_HOME``), the offline MiniLM embedder (``CORTEX_PG_EMBEDDER``), entities
recorded for the entity tools. Notes go through the Prem Cortex API
(:class:`~cortex_pg.AgenticMemorySystem`, deep processing inline, offline unless
``OPENAI_API_KEY`` is set); ``build_context_for_task`` reads the calute memory
(:class:`~cortex_pg.CortexMemory`) of ``(user_id, scope)`` and the notes ``add_note`` wrote.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import asdict
from typing import Any

from pydantic_core import to_jsonable_python

from cortex_pg.errors import NotFoundError
from cortex_pg.integrations.schemas import (
    AddNoteArgs,
    BuildContextArgs,
    EntityArgs,
    LinkedNotesArgs,
    NoteIdArgs,
    RelatedEntitiesArgs,
    SearchArgs,
    UpdateArgs,
)
from cortex_pg.store import validation

UPDATE_FIELDS = ("content", "context", "tags", "keywords", "metadata", "importance", "time")


class Toolkit:
    """The tools over one store (opened on first use when not given).

    Args:
        store: an open :class:`~cortex_pg.store.MemoryStore` (not closed by :meth:`close`).
        database_url, embedder: how to open one otherwise (defaults: ``DATABASE_URL`` or the
            embedded server; ``CORTEX_PG_EMBEDDER``, else offline MiniLM).
        **open_kwargs: more keyword arguments of :meth:`MemoryStore.open` (``settings``,
            ``auto_migrate``, ``path``, ...).
    """

    def __init__(
        self, store: Any = None, *, database_url: str | None = None, embedder: Any = None, **open_kwargs: Any
    ) -> None:
        self._store = store
        self._owns_store = store is None
        self._database_url = database_url
        self._embedder = embedder
        self._open_kwargs = open_kwargs
        self._system: Any = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ set-up
    @property
    def system(self) -> Any:
        """The :class:`~cortex_pg.AgenticMemorySystem` over the store (opened on first use)."""
        with self._lock:
            if self._system is None:
                from cortex_pg.compat.prem import AgenticMemorySystem
                from cortex_pg.store import MemoryStore

                if self._store is None:
                    self._store = MemoryStore.open(
                        self._database_url,
                        embedder=self._embedder,
                        extract_entities=True,
                        **self._open_kwargs,
                    )
                self._system = AgenticMemorySystem(store=self._store, enable_background_processing=False)
            return self._system

    @property
    def store(self) -> Any:
        """The :class:`~cortex_pg.store.MemoryStore` (opened on first use)."""
        return self.system.store

    async def _ready(self) -> Any:
        if self._system is None:  # opening may start the embedded server: not on the loop
            await asyncio.to_thread(lambda: self.system)
        return self._system

    def _async_store(self) -> Any:
        from cortex_pg.store.async_store import loop_store

        return loop_store(self, self.store)

    def close(self) -> None:
        """Release the store (when the toolkit opened it)."""
        with self._lock:
            if self._system is not None:
                self._system.shutdown()
            if self._owns_store and self._store is not None:
                self._store.close()
            self._system = None
            self._store = self._store if not self._owns_store else None

    async def aclose(self) -> None:
        """:meth:`close`, closing the async connections too."""
        cached = self.__dict__.pop("_loop_store", None)
        if cached is not None:
            await cached[1].close()
        if self._system is not None:
            cached = self._system.__dict__.pop("_loop_store", None)
            if cached is not None:
                await cached[1].close()
        self.close()

    # ------------------------------------------------------------------ the documented tools
    def add_note(self, args: AddNoteArgs) -> dict[str, Any]:
        """Store a note; returns ``{"id", "user_id", "session_id", "content"}``."""
        nid = self.system.add_note(**_add_kwargs(args))
        return _added(nid, args)

    async def aadd_note(self, args: AddNoteArgs) -> dict[str, Any]:
        """:meth:`add_note` on asyncio."""
        nid = await (await self._ready()).aadd_note(**_add_kwargs(args))
        return _added(nid, args)

    def search(self, args: SearchArgs) -> dict[str, Any]:
        """Search; returns ``{"results": [...]}``, best first (Prem Cortex result dicts: id,
        content, timestamp, tags, context, score, relevance_score, recency_score, ...)."""
        return _found(self.system.search(**args.model_dump()))

    async def asearch(self, args: SearchArgs) -> dict[str, Any]:
        """:meth:`search` on asyncio."""
        return _found(await (await self._ready()).asearch(**args.model_dump()))

    def build_context_for_task(self, args: BuildContextArgs) -> dict[str, Any]:
        """``{"context": text}``: :meth:`CortexMemory.build_context_for_task` of ``(user_id,
        scope)``, then ``"Relevant notes:"``, the 5 best notes of the user for the task among
        those the tools write (``add_note``: memory type ``note``, every session), 200
        characters each, in the same ``"  • "`` lines (a note's line breaks and runs of spaces
        become one space, so a note cannot start a line of its own). ``""`` when neither has
        anything."""
        from cortex_pg.compat.calute import CortexMemory
        from cortex_pg.compat.calute.cortex import BULLET

        memory = CortexMemory(store=self.store, user_id=args.user_id, scope=args.scope)
        try:
            text = memory.build_context_for_task(
                args.task_description, args.agent_role, args.additional_context, args.max_items
            )
        finally:
            memory.close()
        task = args.task_description
        if isinstance(task, str) and task.strip():
            found = self.store.search(
                task, user_id=args.user_id, limit=5, where_filter={"memory_type": "note"}
            )
            if found:
                heading = "\nRelevant notes:" if text else "Relevant notes:"
                text = "\n".join(
                    [
                        *([text] if text else []),
                        heading,
                        *(f"{BULLET}{' '.join(r.note.content.split())[:200]}" for r in found),
                    ]
                )
        return {"context": text}

    async def abuild_context_for_task(self, args: BuildContextArgs) -> dict[str, Any]:
        """:meth:`build_context_for_task` in a worker thread."""
        await self._ready()
        return await asyncio.to_thread(self.build_context_for_task, args)

    # ------------------------------------------------------------------ notes by id (async)
    async def aread(self, args: NoteIdArgs) -> dict[str, Any]:
        """The note and its outgoing links ``{target_id: {type, strength, reason}}``.

        Raises:
            NotFoundError: no such note of that user. ValidationError: not a UUID.
        """
        await self._ready()
        astore = self._async_store()
        uid = validation.scope_id(args.user_id, "user_id")
        nid = validation.note_id(args.memory_id, "memory_id")  # (the tool's argument names the field)
        note = await astore.get(nid, user_id=uid, touch=True)
        links = await astore.get_links(nid, user_id=uid)
        return to_jsonable_python({**note.to_dict(), "links": links})

    async def aupdate(self, args: UpdateArgs) -> dict[str, Any]:
        """Change the fields given; returns the updated note.

        Raises:
            NotFoundError, ValidationError (the field named), MergedNoteError.
        """
        await self._ready()
        fields = {k: getattr(args, k) for k in UPDATE_FIELDS if getattr(args, k) is not None}
        uid = validation.scope_id(args.user_id, "user_id")
        nid = validation.note_id(args.memory_id, "memory_id")
        note = await self._async_store().update(nid, user_id=uid, **fields)
        return note.to_dict()

    async def adelete(self, args: NoteIdArgs) -> dict[str, Any]:
        """``{"deleted": bool}`` (False: no such note)."""
        await self._ready()
        uid = validation.scope_id(args.user_id, "user_id")
        nid = validation.note_id(args.memory_id, "memory_id")
        return {"deleted": await self._async_store().delete(nid, user_id=uid)}

    async def alinked_notes(self, args: LinkedNotesArgs) -> dict[str, Any]:
        """``{"notes": [{note, hops, path_strength, via, link_type, link_strength, link_reason,
        path}]}``, nearest first."""
        await self._ready()
        uid = validation.scope_id(args.user_id, "user_id")
        found = await self._async_store().linked_notes(
            validation.note_id(args.memory_id, "memory_id"),
            depth=args.depth,
            min_strength=args.min_strength,
            user_id=uid,
        )
        return {"notes": [to_jsonable_python({**asdict(x), "note": x.note.to_dict()}) for x in found]}

    # ------------------------------------------------------------------ entities (worker thread)
    def get_entity_info(self, args: EntityArgs) -> dict[str, Any]:
        """``{"entity": {name, kind, frequency, first_seen, last_seen, contexts, mentions},
        "facts": [...]}`` (facts valid now).

        Raises:
            NotFoundError: the user's notes never mention it.
        """
        graph, uid, record = self._entity(args)
        facts = graph.relationships(uid, record.name)
        return to_jsonable_python({"entity": asdict(record), "facts": [asdict(f) for f in facts]})

    def get_related_entities(self, args: RelatedEntitiesArgs) -> dict[str, Any]:
        """``{"entity": name, "related": [{name, kind, depth, ...}]}``, nearest first.

        Raises:
            NotFoundError: the user's notes never mention it.
        """
        graph, uid, record = self._entity(args)
        related = graph.related_entities(uid, record.name, args.max_depth)
        return to_jsonable_python({"entity": record.name, "related": [asdict(r) for r in related]})

    async def aget_entity_info(self, args: EntityArgs) -> dict[str, Any]:
        """:meth:`get_entity_info` in a worker thread."""
        await self._ready()
        return await asyncio.to_thread(self.get_entity_info, args)

    async def aget_related_entities(self, args: RelatedEntitiesArgs) -> dict[str, Any]:
        """:meth:`get_related_entities` in a worker thread."""
        await self._ready()
        return await asyncio.to_thread(self.get_related_entities, args)

    def _entity(self, args: EntityArgs) -> tuple[Any, str, Any]:
        """(the entity graph, the user, the entity's record), or NotFoundError."""
        from cortex_pg.entities.repository import EntityStore, entity_name

        graph, uid = EntityStore(self.store.engine), validation.scope_id(args.user_id, "user_id")
        record = graph.entity(uid, entity_name(args.name, "name"))  # (the tool's argument names the field)
        if record is None:
            raise NotFoundError("entity", args.name)
        return graph, uid, record


def _add_kwargs(args: AddNoteArgs) -> dict[str, Any]:
    kwargs = args.model_dump()
    return {k: v for k, v in kwargs.items() if v is not None or k in ("content",)}


def _added(nid: str, args: AddNoteArgs) -> dict[str, Any]:
    return {
        "id": nid,
        "user_id": validation.scope_id(args.user_id, "user_id"),
        "session_id": validation.scope_id(args.session_id, "session_id"),
        "content": args.content,
    }


def _found(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"results": to_jsonable_python(results)}
