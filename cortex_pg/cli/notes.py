"""The ``cortex-pg`` command (Typer).

Global options (also from the environment): ``--database-url`` / ``DATABASE_URL`` (an external
PostgreSQL; default: the embedded server), ``--home`` / ``CORTEX_PG_HOME`` (the embedded
server's data directory), ``--embedder`` / ``CORTEX_PG_EMBEDDER`` (minilm, openai, hashing).
The CLI migrates the schema on open (``auto_migrate=True``). Errors print one line and exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from cortex_pg.config import Settings
from cortex_pg.errors import CortexPGError

app = typer.Typer(help="cortex-pg: long-term memory for AI agents, in PostgreSQL.", no_args_is_help=True)
db_app = typer.Typer(help="Schema migrations and the embedded server.", no_args_is_help=True)
app.add_typer(db_app, name="db")

console = Console()
err_console = Console(stderr=True)


@dataclass
class Options:
    database_url: str | None
    home: Path | None
    embedder: str

    def settings(self) -> Settings:
        overrides: dict[str, Any] = {"embedder": self.embedder}
        if self.database_url:
            overrides["database_url"] = self.database_url
        if self.home:
            overrides["home"] = self.home
        return Settings(**overrides)


@app.callback()
def main(
    ctx: typer.Context,
    database_url: Annotated[
        str | None, typer.Option(envvar="DATABASE_URL", help="External PostgreSQL URL (default: embedded).")
    ] = None,
    home: Annotated[
        Path | None, typer.Option(envvar="CORTEX_PG_HOME", help="Data directory of the embedded server.")
    ] = None,
    embedder: Annotated[
        str, typer.Option(envvar="CORTEX_PG_EMBEDDER", help="minilm (offline), openai or hashing.")
    ] = "minilm",
) -> None:
    ctx.obj = Options(database_url, home, embedder)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn cortex_pg errors into a one-line message and exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CortexPGError as exc:
            err_console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None

    return wrapper


@contextmanager
def open_store(ctx: typer.Context) -> Iterator[Any]:
    """A MemoryStore for the CLI's options, migrated on open, closed afterwards."""
    from cortex_pg.store import MemoryStore

    opts: Options = ctx.obj
    store = MemoryStore.open(settings=opts.settings(), auto_migrate=True)
    try:
        yield store
    finally:
        store.close()


def _engine(ctx: typer.Context):  # noqa: ANN202
    from cortex_pg.db.engine import create_engine_for, resolve_url

    return create_engine_for(resolve_url(None, settings=ctx.obj.settings()))


# ---------------------------------------------------------------------- db
@db_app.command("upgrade")
@handle_errors
def db_upgrade(ctx: typer.Context, revision: str = typer.Argument("head")) -> None:
    """Migrate the schema up to REVISION (default: head)."""
    from cortex_pg.db import migrate

    engine = _engine(ctx)
    try:
        migrate.upgrade(engine, revision)
        console.print(f"schema at {migrate.current_revision(engine)}")
    finally:
        engine.dispose()


@db_app.command("downgrade")
@handle_errors
def db_downgrade(
    ctx: typer.Context,
    revision: str = typer.Argument(..., help="target, e.g. base or -1"),
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask before removing tables (and their data).")
    ] = False,
) -> None:
    """Migrate the schema down to REVISION (``base`` removes every cortex table and its data)."""
    from cortex_pg.db import migrate

    if not yes and not typer.confirm(f"Downgrade to {revision}? Tables removed on the way lose their data."):
        raise typer.Exit(1)

    engine = _engine(ctx)
    try:
        migrate.downgrade(engine, revision)
        console.print(f"schema at {migrate.current_revision(engine) or 'base'}")
    finally:
        engine.dispose()


@db_app.command("current")
@handle_errors
def db_current(ctx: typer.Context) -> None:
    """Print the schema revision of the database and the newest one this package knows."""
    from cortex_pg.db import migrate

    engine = _engine(ctx)
    try:
        console.print(
            f"current: {migrate.current_revision(engine) or 'none'}  head: {migrate.head_revision()}"
        )
    finally:
        engine.dispose()


@db_app.command("stop")
@handle_errors
def db_stop(ctx: typer.Context) -> None:
    """Stop the embedded server of the data directory (other processes lose their connection)."""
    from cortex_pg.db import embedded

    directory = ctx.obj.settings().data_dir()
    stopped = embedded.stop(directory)
    console.print(f"{'stopped' if stopped else 'not running'}: {directory}")


@db_app.command("url")
@handle_errors
def db_url(ctx: typer.Context) -> None:
    """Start the embedded server if needed and print its SQLAlchemy URL (for psql: drop '+psycopg')."""
    from cortex_pg.db.engine import resolve_url

    console.print(resolve_url(None, settings=ctx.obj.settings()), soft_wrap=True, highlight=False)


# ---------------------------------------------------------------------- notes
def _list(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@app.command()
@handle_errors
def add(
    ctx: typer.Context,
    content: str,
    user: Annotated[str, typer.Option("--user", "-u")] = "default",
    session: Annotated[str, typer.Option("--session", "-s")] = "default",
    time: Annotated[str | None, typer.Option(help="ISO 8601 time of the memory (naive = UTC).")] = None,
    keywords: Annotated[str | None, typer.Option(help="Comma-separated.")] = None,
    tags: Annotated[str | None, typer.Option(help="Comma-separated.")] = None,
    context: str | None = None,
    category: Annotated[str | None, typer.Option(help="Dot path, e.g. work.programming.")] = None,
    metadata: Annotated[str | None, typer.Option(help="JSON object.")] = None,
    importance: float = 0.5,
    stm: Annotated[bool, typer.Option("--stm/--no-stm", help="Also write to short-term memory.")] = True,
) -> None:
    """Store one note and print its id."""
    from cortex_pg.errors import ValidationError

    try:
        meta = json.loads(metadata) if metadata else None
    except json.JSONDecodeError as exc:
        raise ValidationError("metadata", f"not JSON: {exc}") from None
    with open_store(ctx) as store:
        nid = store.add(
            content,
            user_id=user,
            session_id=session,
            time=time,
            keywords=_list(keywords),
            tags=_list(tags),
            context=context,
            category=category,
            metadata=meta,
            importance=importance,
            to_stm=stm,
        )
    console.print(nid)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
    )


@app.command()
@handle_errors
def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    format: Annotated[
        str, typer.Option("--format", "-f", help="text (one note per paragraph) or locomo.")
    ] = "text",
    user: Annotated[str, typer.Option("--user", "-u", help="Tenant for text files.")] = "default",
    session: Annotated[str, typer.Option("--session", "-s", help="Session for text files.")] = "default",
    batch_size: int = 256,
    stm: Annotated[bool, typer.Option("--stm/--no-stm")] = True,
) -> None:
    """Ingest a file: plain text (a note per paragraph) or a LoCoMo JSON file (a note per turn)."""
    from cortex_pg import ingest as readers
    from cortex_pg.errors import ValidationError

    if format == "text":
        batches = [(user, readers.text_items(path))]
    elif format == "locomo":
        batches = [(c.sample_id, c.items) for c in readers.read_locomo(path)]
    else:
        raise ValidationError("format", f"unknown format {format!r}; use text or locomo")
    total = sum(len(items) for _, items in batches)
    with open_store(ctx) as store, _progress() as progress:
        task = progress.add_task("ingesting", total=total)
        for uid, items in batches:
            progress.update(task, description=f"ingesting {uid}")
            store.add_many(
                items,
                user_id=uid,
                session_id=session,
                batch_size=batch_size,
                to_stm=stm,
                progress=lambda n: progress.advance(task, n),
            )
    console.print(f"ingested {total} notes for {len(batches)} user(s)")


@app.command()
@handle_errors
def search(
    ctx: typer.Context,
    query: str,
    user: Annotated[str, typer.Option("--user", "-u")] = "default",
    session: Annotated[str | None, typer.Option("--session", "-s")] = None,
    limit: Annotated[int, typer.Option("--limit", "-k")] = 10,
    temporal_weight: Annotated[
        float, typer.Option("--temporal-weight", "-w", help="Recency weight in [0, 1].")
    ] = 0.0,
    date_from: Annotated[
        str | None, typer.Option("--from", help="ISO date or phrase ('3 days ago').")
    ] = None,
    date_to: Annotated[str | None, typer.Option("--to", help="Exclusive end; ISO date or phrase.")] = None,
    now: Annotated[str | None, typer.Option(help="Measure ages from this instant (default: now).")] = None,
    source: Annotated[str, typer.Option(help="all, ltm or stm.")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Hybrid search (vector + BM25, fused by RRF, recency-weighted) of one user's notes."""
    from cortex_pg.temporal import parse_instant, parse_natural

    at = parse_instant(now, "now")
    d_from = parse_natural(date_from, "date_from", now=at) if date_from else None
    d_to = parse_natural(date_to, "date_to", now=at) if date_to else None
    with open_store(ctx) as store:
        results = store.search(
            query,
            user_id=user,
            session_id=session,
            limit=limit,
            temporal_weight=temporal_weight,
            date_from=d_from,
            date_to=d_to,
            now=at,
            memory_source=source,
        )
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False))
        return
    table = Table(title=f"{len(results)} result(s) for user {user!r}", show_lines=False)
    for col in ("#", "score", "tier", "time", "session", "content"):
        table.add_column(col, overflow="fold" if col == "content" else "ellipsis")
    for i, r in enumerate(results, 1):
        table.add_row(
            str(i),
            f"{r.score:.3f}",
            r.memory_tier,
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.note.session_id,
            r.content if len(r.content) <= 200 else r.content[:197] + "...",
        )
    console.print(table)


@app.command()
@handle_errors
def stats(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Counts: notes per tier, users, sessions, links, history rows, embeddings per model."""
    with open_store(ctx) as store:
        data = store.stats(user_id=user)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title="cortex-pg" + (f" — user {user!r}" if user else ""))
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in data.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    console.print(table)


@app.command()
@handle_errors
def reembed(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Option("--model", help="New embedding model: minilm, text-embedding-3-small, hashing...")
    ],
    batch_size: int = 256,
    activate: Annotated[
        bool, typer.Option("--activate", help="Switch searches to the model when done.")
    ] = False,
) -> None:
    """Back-fill embeddings of a second model beside the active one (batched, resumable); --activate switches."""
    from cortex_pg.embeddings import embedder_from_name
    from cortex_pg.store import reembed as r

    embedder = embedder_from_name(model)
    engine = _engine(ctx)
    try:
        index = r.prepare(engine, embedder)
        console.print(f"model {embedder.name} ({embedder.dim} dims), index {index}")
        with _progress() as progress:
            task = progress.add_task("re-embedding", total=None)
            n = r.backfill(
                engine, embedder, batch_size=batch_size, progress=lambda k: progress.advance(task, k)
            )
        console.print(f"back-filled {n} notes")
        if activate:
            info = r.activate(engine, embedder)
            console.print(
                f"active model is now {embedder.name} (caught up {info['caught_up']}, "
                f"STM re-embedded {info['stm_reembedded']})"
            )
    finally:
        engine.dispose()


@app.command("models")
@handle_errors
def models_cmd(
    ctx: typer.Context,
    drop: Annotated[
        str | None, typer.Option("--drop", help="Remove an inactive model's embeddings and index.")
    ] = None,
) -> None:
    """List embedding models (dimension, active, embeddings), or --drop an inactive one."""
    from cortex_pg.store import reembed as r

    engine = _engine(ctx)
    try:
        if drop:
            console.print(f"dropped {r.drop_model(engine, drop)} embeddings of {drop}")
        table = Table(title="embedding models")
        for col in ("model", "dim", "active", "embeddings", "index"):
            table.add_column(col)
        for m in r.models(engine):
            table.add_row(
                str(m["model"]),
                str(m["dim"]),
                "yes" if m["active"] else "",
                str(m["embeddings"]),
                str(m["index_name"]),
            )
        console.print(table)
    finally:
        engine.dispose()


def _register_plugins() -> None:
    """Commands contributed by other modules (each exposes ``register(app)``)."""
    import importlib

    for name in ("cortex_pg.cli_entities", "cortex_pg.cli_evolution", "cortex_pg.cli_cortex"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(app)


_register_plugins()
