"""``cortex-pg reembed`` and ``cortex-pg models``: a second embedding model beside the active one."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from cortex_pg.cli.common import console, engine_of, handle_errors, progress_bar


def register(app: typer.Typer) -> None:
    """Add ``reembed`` and ``models`` to ``app``."""
    app.command("reembed")(reembed)
    app.command("models")(models_cmd)


@handle_errors(flags={"model": "--model", "embedder": "--model"})
def reembed(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Option("--model", help="New embedding model: minilm, text-embedding-3-small, hashing...")
    ],
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Notes per transaction of the back-fill.")
    ] = 256,
    activate: Annotated[
        bool, typer.Option("--activate", help="Switch searches to the model when done.")
    ] = False,
) -> None:
    """Back-fill embeddings of a second model beside the active one (batched, resumable); --activate switches."""
    from cortex_pg.embeddings import embedder_from_name
    from cortex_pg.store import reembed as r

    embedder = embedder_from_name(model)
    engine = engine_of(ctx)
    try:
        index = r.prepare(engine, embedder)
        console.print(f"model {embedder.name} ({embedder.dim} dims), index {index}")
        with progress_bar() as progress:
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


@handle_errors(flags={"model": "--drop"})
def models_cmd(
    ctx: typer.Context,
    drop: Annotated[
        str | None, typer.Option("--drop", help="Remove an inactive model's embeddings and index.")
    ] = None,
) -> None:
    """List embedding models (dimension, active, embeddings), or --drop an inactive one."""
    from cortex_pg.store import reembed as r

    engine = engine_of(ctx)
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
