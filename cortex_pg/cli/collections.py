"""``cortex-pg collections``: a user's smart collections (path, notes, description, refreshed).

Collections are created and refreshed by ``collection`` jobs on the evolution queue (run by
``cortex-pg worker`` or an ``AgenticMemorySystem``), once a category prefix has enough notes;
when a user has none, the command says so and why.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from cortex_pg.cli.common import console, handle_errors, open_store


def register(app: typer.Typer) -> None:
    """Add the ``collections`` command to ``app``."""
    app.command("collections")(collections_command)


@handle_errors()
def collections_command(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", "-u", help="Tenant (user_id).")] = "default",
) -> None:
    """List the smart collections of a user as a table (path, notes now, notes at the last
    refresh, description, refreshed at)."""
    from cortex_pg.collections import category_counts, list_collections
    from cortex_pg.store import validation

    uid = validation.scope_id(user, "user_id")
    with open_store(ctx) as store, store.engine.connect() as conn:
        found = list_collections(conn, uid)
        if not found:
            prefixes = category_counts(conn, uid, limit=1)
            console.print(
                f"no collections for user {uid!r}: a category prefix becomes a collection at 10 notes "
                "(its job runs on the evolution queue: cortex-pg worker)"
                + (f"; the largest prefix is {prefixes[0][0]!r} with {prefixes[0][1]}" if prefixes else ""),
                highlight=False,
            )
            return
    table = Table(
        "path", "notes", "at refresh", "description", "refreshed at", title=f"collections of {uid!r}"
    )
    for c in found:
        table.add_row(
            c.path,
            str(c.note_count),
            str(c.memory_count),
            c.description,
            c.refreshed_at.isoformat(timespec="seconds"),
        )
    console.print(table)
