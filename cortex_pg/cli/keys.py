"""``cortex-pg keys``: API keys of the HTTP service (``cortex-pg serve``).

``keys create --user U`` prints a new key once, on standard output alone (so
``KEY=$(cortex-pg keys create --user alice)`` works); only its SHA-256 is stored.
``keys list`` shows keys by id and display prefix, ``keys revoke ID`` ends one. These run as the
database owner (the CLI's connection) and migrate the schema on open, like every command.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from cortex_pg.cli.common import console, engine_of, err_console, handle_errors

keys_app = typer.Typer(help="API keys of the HTTP service (cortex-pg serve).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to ``app``."""
    app.add_typer(keys_app, name="keys")


def _engine(ctx: typer.Context):  # noqa: ANN202
    from cortex_pg.store.memory_store import ensure_schema

    engine = engine_of(ctx)
    try:
        ensure_schema(engine, auto_migrate=True)
    except BaseException:
        engine.dispose()
        raise
    return engine


@keys_app.command("create")
@handle_errors(flags={"user_id": "--user", "name": "--name"})
def create(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", "-u", help="The user_id (tenant) the key acts for.")],
    name: Annotated[str | None, typer.Option("--name", help="A label to recognise the key by.")] = None,
) -> None:
    """Create a key bound to --user and print it (once: it is not stored, only its hash)."""
    from cortex_pg.server.keys import create_key

    engine = _engine(ctx)
    try:
        new = create_key(engine, user, name=name)
    finally:
        engine.dispose()
    typer.echo(
        f"API key {new.info.id} ({new.info.prefix}...) for user {new.info.user_id!r}; "
        "it is shown only now: store it (send it as 'Authorization: Bearer KEY')",
        err=True,
    )
    typer.echo(new.key)


@keys_app.command("list")
@handle_errors(flags={"user_id": "--user"})
def list_cmd(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's keys.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """List keys (id, user, name, prefix, created, revoked); secrets are never shown."""
    from cortex_pg.server.keys import list_keys

    engine = _engine(ctx)
    try:
        found = list_keys(engine, user_id=user)
    finally:
        engine.dispose()
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "id": k.id,
                        "user_id": k.user_id,
                        "name": k.name,
                        "prefix": k.prefix,
                        "created_at": k.created_at.isoformat(),
                        "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
                    }
                    for k in found
                ]
            )
        )
        return
    table = Table(title="API keys")
    table.add_column("id", no_wrap=True, min_width=36)  # whole: `keys revoke` takes it
    table.add_column("user", overflow="fold")
    table.add_column("name", overflow="fold")
    table.add_column("prefix", no_wrap=True, min_width=10)
    table.add_column("created", overflow="fold")
    table.add_column("revoked", overflow="fold")
    for k in found:
        table.add_row(
            k.id,
            k.user_id,
            k.name or "",
            k.prefix,
            k.created_at.isoformat(timespec="seconds"),
            k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "",
        )
    console.print(table)


@keys_app.command("revoke")
@handle_errors(flags={"key_id": "KEY_ID"})
def revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (from `cortex-pg keys list`).")],
) -> None:
    """Revoke a key: requests with it get 401 from then on."""
    from cortex_pg.server.keys import revoke_key

    engine = _engine(ctx)
    try:
        done = revoke_key(engine, key_id)
    finally:
        engine.dispose()
    if not done:
        err_console.print(f"[red]error:[/red] KEY_ID: no working key with id {key_id}", highlight=False)
        raise typer.Exit(2)
    console.print(f"revoked {key_id}", highlight=False)
