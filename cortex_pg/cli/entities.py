"""``cortex-pg entities``: print a user's entities and relations, or one entity's neighbourhood.

Registered on the main Typer app by :func:`register` (the main CLI calls it). The store is
opened with :meth:`cortex_pg.store.MemoryStore.open` using the CLI's global options when the
app provides them (``ctx.obj.settings()``), else the environment.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cortex_pg.errors import CortexPGError

console = Console()


def register(app: typer.Typer) -> None:
    """Add the ``entities`` command to ``app``."""
    app.command("entities")(entities_command)


def entities_command(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", "-u", help="Tenant (user_id).")] = "default",
    entity: Annotated[
        str | None, typer.Option("--entity", "-e", help="Show this entity and its neighbours.")
    ] = None,
    depth: Annotated[int, typer.Option("--depth", "-d", min=0, max=10, help="Hops from --entity.")] = 2,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Entities listed.")] = 50,
    history: Annotated[
        bool, typer.Option("--history", help="Include closed (no longer valid) facts.")
    ] = False,
) -> None:
    """Print entities and relations (valid now) of a user, or one entity within --depth hops."""
    from cortex_pg.entities.repository import EntityStore
    from cortex_pg.store import MemoryStore

    try:
        settings = _settings(ctx)
        store = MemoryStore.open(settings=settings) if settings is not None else MemoryStore.open()
        try:
            graph = EntityStore(store.engine)
            if entity is None:
                _print_all(graph, user, limit, history)
            else:
                _print_entity(graph, user, entity, depth, history)
        finally:
            store.close()
    except CortexPGError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def _settings(ctx: typer.Context) -> Any:
    obj = getattr(ctx, "obj", None)
    return obj.settings() if obj is not None and hasattr(obj, "settings") else None


def _print_all(graph: Any, user: str, limit: int, history: bool) -> None:
    table = Table("entity", "kind", "frequency", "last seen", title=f"entities of {user!r}")
    for e in graph.entities(user, limit=limit):
        table.add_row(e.name, e.kind, str(e.frequency), e.last_seen.isoformat(timespec="seconds"))
    console.print(table)
    _print_relations(graph.relationships(user, history=history), f"relations of {user!r}")


def _print_entity(graph: Any, user: str, name: str, depth: int, history: bool) -> None:
    record = graph.entity(user, name)
    if record is None:
        console.print(f"no entity {name!r} for user {user!r}")
        raise typer.Exit(1)
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
