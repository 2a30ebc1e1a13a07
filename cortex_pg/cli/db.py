"""``cortex-pg db``: schema migrations and the embedded server (where the data lives)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cortex_pg.cli.common import console, data_location, engine_of, err_console, handle_errors, settings_of

app = typer.Typer(help="Schema migrations and the embedded server.", no_args_is_help=True)


@app.command("upgrade")
@handle_errors
def db_upgrade(ctx: typer.Context, revision: str = typer.Argument("head")) -> None:
    """Migrate the schema up to REVISION (default: head)."""
    from cortex_pg.db import migrate

    engine = engine_of(ctx)
    try:
        migrate.upgrade(engine, revision)
        console.print(
            f"schema at {migrate.current_revision(engine)} in {data_location(ctx)}", highlight=False
        )
    finally:
        engine.dispose()


# (a relative target such as -1 is an argument, not an unknown option)
@app.command("downgrade", context_settings={"ignore_unknown_options": True})
@handle_errors
def db_downgrade(
    ctx: typer.Context,
    revision: str = typer.Argument(..., help="target, e.g. base or -1"),
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask before removing tables (and their data).")
    ] = False,
) -> None:
    """Migrate the schema down to REVISION (``base`` removes every cortex table and its data).

    Asks first unless ``--yes``; an answer other than yes exits 1, having changed nothing. Run
    without a terminal and with no answer on standard input, it is a usage error (exit 2)
    naming ``--yes``, the option that skips the question."""
    from cortex_pg.db import migrate

    if revision.startswith("--"):  # an option mistyped, taken for the target (-1 is one)
        raise typer.BadParameter(f"no such option: {revision}", param_hint="REVISION")

    question = (
        f"Downgrade to {revision}? Tables removed on the way lose their data, and rows an older "
        "schema cannot hold are deleted (below 0011: context embeddings and long notes' later "
        "windows; after upgrading again, `cortex-pg reembed` with the active model writes them again)."
    )
    if not yes and not _confirmed(question):
        raise typer.Exit(1)

    engine = engine_of(ctx)
    try:
        migrate.downgrade(engine, revision)
        console.print(f"schema at {migrate.current_revision(engine) or 'base'}")
    finally:
        engine.dispose()


@app.command("current")
@handle_errors
def db_current(ctx: typer.Context) -> None:
    """Print the schema revision of the database and the newest one this package knows."""
    from cortex_pg.db import migrate

    engine = engine_of(ctx)
    try:
        console.print(
            f"current: {migrate.current_revision(engine) or 'none'}  head: {migrate.head_revision()}"
        )
    finally:
        engine.dispose()


@app.command("stop")
@handle_errors
def db_stop(
    ctx: typer.Context,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Stop every embedded server this user started (from the registry)."),
    ] = False,
) -> None:
    """Stop the embedded server of the data directory (other processes lose their connection)."""
    from cortex_pg.db import embedded

    if not all_:
        directory = settings_of(ctx).data_dir()
        stopped = embedded.stop(directory)
        console.print(f"{'stopped' if stopped else 'not running'}: {directory}", highlight=False)
        return
    results = embedded.stop_all()
    for directory, stopped in results:
        console.print(f"{'stopped' if stopped else 'not running'}: {directory}", highlight=False)
    if not results:
        console.print(f"no embedded server recorded in {embedded.registry_path()}", highlight=False)


@app.command("url")
@handle_errors
def db_url(ctx: typer.Context) -> None:
    """Start the embedded server if needed and print its SQLAlchemy URL (for psql: drop '+psycopg').

    The data directory goes to standard error, so ``$(cortex-pg db url)`` is just the URL.
    """
    from cortex_pg.db.engine import resolve_url

    console.print(resolve_url(None, settings=settings_of(ctx)), soft_wrap=True, highlight=False)
    err_console.print(f"data: {data_location(ctx)}", soft_wrap=True, highlight=False)


def register(app_: typer.Typer) -> None:
    """Add the ``db`` group to ``app_``."""
    app_.add_typer(app, name="db")


def _confirmed(question: str) -> bool:
    """The answer to ``question`` (an answer piped to standard input counts); with no terminal
    and no answer (standard input at its end, ``</dev/null``, or closed, ``<&-``), a one-line
    error naming ``--yes`` and exit status 2 (``typer.Exit``)."""
    try:
        return typer.confirm(question)
    except typer.Abort:  # (a RuntimeError: caught first)
        if sys.stdin is not None and sys.stdin.isatty():
            raise  # Ctrl-C or Ctrl-D at the terminal: aborted, as before
    except RuntimeError:
        if sys.stdin is not None:
            raise
        # standard input closed: input() raises "lost sys.stdin" (not EOFError) after the question
    console.print()  # (ends the unanswered question's line)
    err_console.print(
        "[red]error:[/red] --yes: there is no terminal to ask on and standard input gave no "
        "answer; pass --yes to downgrade without the question",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(2)
