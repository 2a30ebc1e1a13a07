"""``cortex-pg mcp``: the MCP server (official ``mcp`` SDK, extra ``mcp``) over stdio, or over
streamable HTTP with ``--http PORT`` (endpoint ``/mcp``). The store is opened on the first
tool call, with the global options (database, data directory, embedder)."""

from __future__ import annotations

from typing import Annotated

import typer

from cortex_pg.cli.common import err_console, handle_errors, settings_of


def register(app: typer.Typer) -> None:
    """Add the ``mcp`` command to ``app``."""
    app.command("mcp")(mcp)


@handle_errors(flags={"host": "--host", "http_port": "--http"})
def mcp(
    ctx: typer.Context,
    http: Annotated[
        int | None,
        typer.Option("--http", min=1, max=65535, help="Serve streamable HTTP on this port (default: stdio)."),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Interface of --http.")] = "127.0.0.1",
) -> None:
    """Serve the memory tools over MCP (add_note, search, read, update, delete, entities, links,
    build_context_for_task)."""
    try:
        from cortex_pg.integrations.mcp import serve
    except ImportError as exc:
        err_console.print(
            f"[red]error:[/red] the MCP server needs the mcp extra ({exc.name} is missing): "
            "pip install 'cortex-pg[mcp]'",
            highlight=False,
        )
        raise typer.Exit(2) from None
    from cortex_pg.integrations.toolkit import Toolkit

    serve(http, host=host, toolkit=Toolkit(settings=settings_of(ctx), auto_migrate=True))
