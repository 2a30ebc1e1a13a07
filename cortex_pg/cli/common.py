"""What every command group shares: global options, consoles, the error boundary, opening a store."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from cortex_pg.config import Settings
from cortex_pg.errors import CortexPGError, ValidationError

console = Console()
err_console = Console(stderr=True)

# Python parameter -> the flag a CLI user typed; errors name the flag (commands add their own).
FLAGS: dict[str, str] = {
    "date_from": "--from",
    "date_to": "--to",
    "memory_source": "--source",
    "user_id": "--user",
    "session_id": "--session",
    "temporal_weight": "--temporal-weight",
    "limit": "--limit",
    "now": "--now",
    "time": "--time",
    "batch_size": "--batch-size",
    "keywords": "--keywords",
    "tags": "--tags",
    "context": "--context",
    "category": "--category",
    "metadata": "--metadata",
    "importance": "--importance",
    "format": "--format",
    "embedder": "--embedder",
    "url": "--database-url",
    "home": "--home",
    "content": "CONTENT",
    "query": "QUERY",
}


@dataclass
class Options:
    """The global options of ``cortex-pg`` (``ctx.obj``)."""

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


def settings_of(ctx: typer.Context | None) -> Settings:
    """The settings of the CLI's global options, else of the environment."""
    obj = getattr(ctx, "obj", None)
    return obj.settings() if isinstance(obj, Options) else Settings()


def flag_message(exc: CortexPGError, flags: Mapping[str, str] | None = None) -> str:
    """The error's message with a Python field name replaced by the CLI flag it came from; what
    follows the name is kept (``tags[1]`` -> ``--tags[1]``, ``metadata.x`` -> ``--metadata.x``)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    names = {**FLAGS, **(flags or {})}
    field = exc.field
    cut = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
    if field[:cut] in names:
        field = names[field[:cut]] + field[cut:]
    return f"{field}: {exc.reason}"


def handle_errors(fn: Callable[..., Any] | None = None, *, flags: Mapping[str, str] | None = None) -> Any:
    """Turn cortex_pg errors into a one-line message naming the CLI flag, and exit status 2.

    Use as ``@handle_errors`` or ``@handle_errors(flags={"user_id": "--user-id"})``.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except CortexPGError as exc:
                # (one line, printed as it is: a caller's input in it is not markup)
                message = " ".join(flag_message(exc, flags).split())
                err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None

        return wrapper

    return decorate(fn) if fn is not None else decorate


@contextmanager
def open_store(ctx: typer.Context, **kwargs: Any) -> Iterator[Any]:
    """A MemoryStore for the CLI's options, migrated on open, closed afterwards."""
    from cortex_pg.store import MemoryStore

    store = MemoryStore.open(settings=settings_of(ctx), auto_migrate=True, **kwargs)
    try:
        yield store
    finally:
        store.close()


def engine_of(ctx: typer.Context):  # noqa: ANN201
    """A SQLAlchemy engine for the CLI's database (the caller disposes of it)."""
    from cortex_pg.db.engine import create_engine_for, resolve_url

    return create_engine_for(resolve_url(None, settings=settings_of(ctx)))


def data_location(ctx: typer.Context) -> str:
    """Where the data lives: the embedded server's data directory, or 'external database'."""
    settings = settings_of(ctx)
    if settings.database_url:
        return "external database (--database-url / DATABASE_URL)"
    return str(settings.data_dir())


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
    )
