"""``cortex-pg serve``: the HTTP service and its inspector page (FastAPI + uvicorn, extra ``server``).

The store is opened with Row-Level Security (``isolation="rls"``): each request's transactions
act as its API key's user, so a key never reads another tenant's rows. Keys are required unless
``--no-auth --user U`` (every request acts for U), which is refused on a non-loopback host.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from cortex_pg.cli.common import err_console, handle_errors, settings_of
from cortex_pg.errors import ValidationError


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""
    app.command("serve")(serve)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@handle_errors(flags={"user_id": "--user", "host": "--host", "port": "--port"})
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free one).")] = 8000,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="No API keys: every request acts for --user (loopback only).")
    ] = False,
    user: Annotated[str | None, typer.Option("--user", "-u", help="The user of --no-auth.")] = None,
    entities: Annotated[
        bool, typer.Option("--entities/--no-entities", help="Record entities of new notes (for /entities).")
    ] = True,
    evolve: Annotated[
        bool, typer.Option("--evolve", help="Queue an evolution job per new note (run `cortex-pg worker`).")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level.")] = "info",
) -> None:
    """Serve the JSON API (/notes, /search, /entities, /health; spec at /openapi.json) and /ui."""
    try:
        import uvicorn  # noqa: F401 - (checked here: the server extra)

        from cortex_pg.server import create_app
    except ImportError as exc:
        err_console.print(
            f"[red]error:[/red] the HTTP service needs the server extra ({exc.name} is missing): "
            "pip install 'cortex-pg[server]'",
            highlight=False,
        )
        raise typer.Exit(2) from None
    if no_auth and not is_loopback(host):
        raise ValidationError("host", "--no-auth serves anyone who can connect: only on a loopback host")
    if no_auth and user is None:
        raise ValidationError("user_id", "--no-auth needs the user every request acts for")
    if user is not None and not no_auth:
        raise ValidationError("user_id", "only with --no-auth (with keys, each key names its user)")
    from cortex_pg import listen
    from cortex_pg.store import MemoryStore

    sockets = listen.bind(host, port)  # (a port in use or an unknown host: refused before anything)
    try:
        store = MemoryStore.open(
            settings=settings_of(ctx),
            auto_migrate=True,
            isolation="rls",
            extract_entities=entities,
            enqueue_evolution=evolve,
        )
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    try:
        app = create_app(store, auth=not no_auth, user_id=user)
        shown = f"[{host}]" if ":" in host else host
        typer.echo(
            f"cortex-pg serving on http://{shown}:{listen.port_of(sockets)} "
            f"(API keys {'off' if no_auth else 'required'}; OpenAPI at /openapi.json, inspector at /ui)",
            err=True,
        )
        listen.run(app, sockets, host=host, port=port, log_level=log_level)
    finally:
        store.close()
