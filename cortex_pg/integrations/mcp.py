"""An MCP server over the store (the official ``mcp`` SDK, extra ``mcp``): ``cortex-pg mcp``.

Tools, each with the JSON schema of its argument model (:mod:`cortex_pg.integrations.schemas`):
``add_note``, ``search`` (limit, memory_source, temporal_weight, date_range, where_filter,
user_id, session_id), ``read``, ``update``, ``delete``, ``get_entity_info``,
``get_related_entities``, ``linked_notes`` and ``build_context_for_task``. A typed cortex_pg
error becomes a tool error (``isError``) whose text is the error's class and message, naming
the field (``ValidationError: limit: ...``); arguments that break the schema, unknown ones
among them, are refused by the SDK the same way, naming the argument. Nothing else of a failure (no stack trace) reaches the
client; it is logged on the server's stderr.

Transports: stdio (``cortex-pg mcp``) and streamable HTTP (``cortex-pg mcp --http PORT``,
endpoint ``/mcp``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import BaseModel, ConfigDict

from cortex_pg.errors import CortexPGError
from cortex_pg.integrations.schemas import (
    AddNoteArgs,
    BuildContextArgs,
    EntityArgs,
    LinkedNotesArgs,
    NoteIdArgs,
    RelatedEntitiesArgs,
    SearchArgs,
    UpdateArgs,
    signature_of,
)
from cortex_pg.integrations.toolkit import Toolkit

INSTRUCTIONS = (
    "Long-term memory in PostgreSQL. Store facts with add_note; find them with search (hybrid "
    "vector + full-text; temporal_weight for recency, date_range such as 'last week', where_filter "
    "on tags and metadata). Every tool takes user_id (default 'default') to keep users apart."
)


def tool_error(exc: CortexPGError) -> ToolError:
    """The MCP tool error for a cortex_pg error: ``"<ErrorClass>: <message>"`` (the message of
    a :class:`~cortex_pg.errors.ValidationError` is ``"<field>: <reason>"``)."""
    return ToolError(f"{type(exc).__name__}: {exc}")


def _tool(model: type[BaseModel], call: Callable[[Any], Awaitable[dict[str, Any]]], name: str) -> Any:
    """An async function with one keyword parameter per field of ``model`` (the SDK reads the
    schema from the signature) that validates into ``model`` and awaits ``call``."""

    async def run(**kwargs: Any) -> dict[str, Any]:
        try:
            return await call(model(**kwargs))
        except CortexPGError as exc:
            raise tool_error(exc) from None

    run.__signature__ = signature_of(model)  # type: ignore[attr-defined]
    run.__name__ = name
    run.__doc__ = inspect.getdoc(model)
    return run


def build_server(toolkit: Toolkit | None = None, *, name: str = "cortex-pg") -> MCPServer:
    """The MCP server with the tools above over ``toolkit`` (default: a :class:`Toolkit` that
    opens the store on first use).

    Returns:
        An ``mcp.server.mcpserver.MCPServer``; run it with ``.run()`` (stdio) or
        ``.run("streamable-http", host=..., port=...)``.
    """
    kit = toolkit or Toolkit()
    tools: list[tuple[str, type[BaseModel], Callable[[Any], Awaitable[dict[str, Any]]]]] = [
        ("add_note", AddNoteArgs, kit.aadd_note),
        ("search", SearchArgs, kit.asearch),
        ("read", NoteIdArgs, kit.aread),
        ("update", UpdateArgs, kit.aupdate),
        ("delete", NoteIdArgs, kit.adelete),
        ("get_entity_info", EntityArgs, kit.aget_entity_info),
        ("get_related_entities", RelatedEntitiesArgs, kit.aget_related_entities),
        ("linked_notes", LinkedNotesArgs, kit.alinked_notes),
        ("build_context_for_task", BuildContextArgs, kit.abuild_context_for_task),
    ]
    return MCPServer(
        name,
        instructions=INSTRUCTIONS,
        tools=[
            _strict(Tool.from_function(_tool(m, call, n), name=n, description=inspect.getdoc(m)))
            for n, m, call in tools
        ],
    )


def _strict(tool: Tool) -> Tool:
    """``tool`` refusing arguments its schema does not name (the SDK's argument model, built from
    the function's signature, drops them; a misspelt ``where_fliter`` would be a search without
    its filter): the schema says ``additionalProperties: false`` and the model forbids extras,
    so the call is a tool error naming the argument, as over HTTP and in LangChain."""
    base = tool.fn_metadata.arg_model
    config = ConfigDict(**{**base.model_config, "extra": "forbid"})
    tool.fn_metadata.arg_model = type(
        base.__name__, (base,), {"model_config": config, "__module__": __name__}
    )
    tool.parameters = {**tool.parameters, "additionalProperties": False}
    return tool


def serve(http_port: int | None = None, *, host: str = "127.0.0.1", toolkit: Toolkit | None = None) -> None:
    """Run the server until the client hangs up (stdio) or the process is stopped (HTTP).

    Args:
        http_port: serve streamable HTTP on this port (endpoint ``/mcp``); None: stdio.
        host: the HTTP interface (loopback by default).

    Raises:
        ValidationError: ``http_port`` in use (or not allowed), ``host`` unknown or not an
            address of this machine: refused before serving (and before ``toolkit`` opens anything).
    """
    sockets = None
    if http_port is not None:
        from cortex_pg import listen

        sockets = listen.bind(host, http_port, port_field="http_port")
    kit = toolkit or Toolkit()
    try:
        server = build_server(kit)
        if sockets is None:
            server.run()
        else:
            # (the SDK's run("streamable-http") with the sockets bound above)
            app = server.streamable_http_app(host=host)
            shown = f"[{host}]" if ":" in host else host
            print(
                f"cortex-pg MCP over streamable HTTP on http://{shown}:{listen.port_of(sockets)}/mcp",
                file=sys.stderr,
            )
            listen.run(app, sockets, host=host, port=http_port, log_level=server.settings.log_level.lower())
    finally:
        if sockets is not None:
            for sock in sockets:
                sock.close()
        kit.close()
