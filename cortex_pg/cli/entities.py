"""``cortex-pg entities``: print a user's entities and relations, or one entity's neighbourhood.

Entities are recorded when notes are stored with entity extraction on: ``cortex-pg ingest``
does it by default (``--no-entities`` skips it), ``MemoryStore.open(extract_entities=True)``
in Python. When a user has none, the command says so and how to get them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from cortex_pg.cli.common import console, err_console, handle_errors, open_store


def register(app: typer.Typer) -> None:
    """Add the ``entities`` command to ``app``."""
    app.command("entities")(entities_command)


@handle_errors(flags={"name": "--entity", "depth": "--depth", "limit": "--limit"})
def entities_command(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", "-u", help="Tenant (user_id).")] = "default",
    entity: Annotated[
        str | None, typer.Option("--entity", "-e", help="Show this entity and its neighbours.")
    ] = None,
    depth: Annotated[int, typer.Option("--depth", "-d", min=1, max=10, help="Hops from --entity, 1-10.")] = 2,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Entities listed.")] = 50,
    history: Annotated[
        bool, typer.Option("--history", help="Include closed (no longer valid) facts.")
    ] = False,
) -> None:
    """Print entities and relations (valid now) of a user, or one entity within --depth hops."""
    from cortex_pg.entities.repository import EntityStore

    with open_store(ctx) as store:
        graph = EntityStore(store.engine)
        if entity is None:
            _print_all(graph, user, limit, history)
        else:
            _print_entity(graph, user, entity, depth, history)


def _print_all(graph: Any, user: str, limit: int, history: bool) -> None:
    found = graph.entities(user, limit=limit)
    if not found:
        console.print(
            f"no entities for user {user!r}: entities are recorded when notes are stored with "
            "extraction on (cortex-pg ingest does it unless --no-entities; in Python, "
            "MemoryStore.open(extract_entities=True))",
            highlight=False,
        )
        return
    table = Table("entity", "kind", "frequency", "last seen", title=f"entities of {user!r}")
    for e in found:
        table.add_row(e.name, e.kind, str(e.frequency), e.last_seen.isoformat(timespec="seconds"))
    console.print(table)
    _print_relations(graph.relationships(user, history=history), f"relations of {user!r}")


def _print_entity(graph: Any, user: str, name: str, depth: int, history: bool) -> None:
    record = graph.entity(user, name)
    if record is None:  # an error, as every other missing thing the CLI is asked for (exit 2)
        err_console.print(
            f"[red]error:[/red] --entity: no entity {name!r} for user {user!r}", highlight=False
        )
        raise typer.Exit(2)
    console.print(
        f"[bold]{record.name}[/bold] ({record.kind}): {record.frequency} notes, "
        f"first seen {record.first_seen.isoformat(timespec='seconds')}, "
        f"last seen {record.last_seen.isoformat(timespec='seconds')}"
    )
    for snippet in record.contexts:
        console.print(f"  - {snippet}")
    _print_relations(graph.relationships(user, record.name, history=history), f"relations of {record.name}")
    related = graph.related_entities(user, record.name, depth)
    table = Table("entity", "kind", "hops", title=f"within {depth} hops")
    for r in related:
        table.add_row(r.name, r.kind, str(r.depth))
    console.print(table)


def _print_relations(relations: list[Any], title: str) -> None:
    table = Table("source", "relation", "target", "weight", "valid from", "valid to", title=title)
    for r in relations:
        table.add_row(
            r.source,
            r.relation,
            r.target,
            f"{r.weight:g}",
            r.valid_from.isoformat(timespec="seconds"),
            r.valid_to.isoformat(timespec="seconds") if r.valid_to else "",
        )
    console.print(table)
