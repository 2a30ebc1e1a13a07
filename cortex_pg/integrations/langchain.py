"""LangChain tools over the store (``langchain-core``, extra ``langchain``).

``cortex_add_note`` and ``cortex_search`` have the argument schemas of the Prem Cortex
documentation's tools (:class:`~cortex_pg.integrations.schemas.AddNoteArgs`,
:class:`~cortex_pg.integrations.schemas.SearchArgs`); ``cortex_build_context`` wraps calute's
``build_context_for_task``. Each works synchronously (``invoke``) and on asyncio (``ainvoke``:
async connections, the embedding in a worker thread) and needs no set-up: with no toolkit the
tools share one that opens the default store (``DATABASE_URL`` or the embedded server, offline
MiniLM) on first use. A typed cortex_pg error reaches the agent as the tool's answer,
``"<ErrorClass>: <field>: <reason>"``, so it can correct the call.

Example::

    from cortex_pg.integrations.langchain import cortex_add_note, cortex_search

    cortex_add_note.invoke({"content": "Alice prefers tea", "user_id": "u1"})
    cortex_search.invoke({"query": "what does Alice drink?", "user_id": "u1"})
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Any

from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel

from cortex_pg.errors import CortexPGError
from cortex_pg.integrations.schemas import AddNoteArgs, BuildContextArgs, SearchArgs
from cortex_pg.integrations.toolkit import Toolkit

__all__ = ["cortex_add_note", "cortex_build_context", "cortex_search", "default_toolkit", "make_tools"]


@lru_cache(maxsize=1)
def default_toolkit() -> Toolkit:
    """The toolkit the module-level tools share (the default store, opened on first use)."""
    return Toolkit()


def _structured(
    name: str,
    model: type[BaseModel],
    call: Callable[[Any], dict[str, Any]],
    acall: Callable[[Any], Awaitable[dict[str, Any]]],
    description: str,
) -> StructuredTool:
    def func(**kwargs: Any) -> str:
        try:
            return json.dumps(call(model(**kwargs)), ensure_ascii=False)
        except CortexPGError as exc:
            raise ToolException(f"{type(exc).__name__}: {exc}") from None

    async def coroutine(**kwargs: Any) -> str:
        try:
            return json.dumps(await acall(model(**kwargs)), ensure_ascii=False)
        except CortexPGError as exc:
            raise ToolException(f"{type(exc).__name__}: {exc}") from None

    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=name,
        description=description,
        args_schema=model,
        handle_tool_error=True,
        handle_validation_error=_schema_error,
    )


def _schema_error(exc: Exception) -> str:
    """An argument refused by the tool's schema, as the answer a typed error gives:
    ``"ValidationError: <field>: <reason>"`` (the first error, by the caller's field name)."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
        return f"ValidationError: {field}: {first.get('msg', exc)}"
    return f"ValidationError: arguments: {exc}"


def make_tools(toolkit: Toolkit | Callable[[], Toolkit]) -> list[StructuredTool]:
    """``[cortex_add_note, cortex_search, cortex_build_context]`` over ``toolkit`` (or over the
    toolkit a zero-argument callable returns, looked up on every call). Each returns JSON text:
    ``{"id", "user_id", "session_id", "content"}``, ``{"results": [...]}`` (best first) and
    ``{"context": text}``."""
    kit: Callable[[], Toolkit] = (
        toolkit
        if callable(toolkit) and not isinstance(toolkit, Toolkit)
        else (
            lambda: toolkit  # type: ignore[return-value]
        )
    )
    return [
        _structured(
            "cortex_add_note",
            AddNoteArgs,
            lambda a: kit().add_note(a),
            lambda a: kit().aadd_note(a),
            "Store a note in long-term memory. Use for facts, preferences and events worth recalling "
            "later; give time (RFC 3339) when the event is not now.",
        ),
        _structured(
            "cortex_search",
            SearchArgs,
            lambda a: kit().search(a),
            lambda a: kit().asearch(a),
            "Search memory for notes relevant to a query; optional recency weight (temporal_weight "
            "0-1), date window (date_range, e.g. 'last week') and filter (where_filter on tags and "
            "metadata). Returns the best notes first.",
        ),
        _structured(
            "cortex_build_context",
            BuildContextArgs,
            lambda a: kit().build_context_for_task(a),
            lambda a: kit().abuild_context_for_task(a),
            "Build the context for a task from the agent's task memory: recent items, relevant "
            "knowledge, known entities and related memories, as text.",
        ),
    ]


cortex_add_note, cortex_search, cortex_build_context = make_tools(default_toolkit)
