"""The ``cortex-pg`` command (Typer): one module per command group.

* :mod:`~cortex_pg.cli.db` — ``db upgrade|downgrade|current|url|stop``
* :mod:`~cortex_pg.cli.notes` — ``add``, ``ingest``, ``search``, ``stats``
* :mod:`~cortex_pg.cli.models` — ``reembed``, ``models``
* :mod:`~cortex_pg.cli.entities` — ``entities``
* :mod:`~cortex_pg.cli.collections` — ``collections`` (a user's smart collections)
* :mod:`~cortex_pg.cli.evolution` — ``worker``, ``jobs``
* :mod:`~cortex_pg.cli.cortex` — ``cortex`` (the Prem Cortex test CLI)
* :mod:`~cortex_pg.cli.serve` — ``serve`` (the HTTP service and inspector, extra ``server``)
* :mod:`~cortex_pg.cli.keys` — ``keys create|list|revoke`` (the service's API keys)
* :mod:`~cortex_pg.cli.mcp` — ``mcp`` (the MCP server, stdio or ``--http PORT``; extra ``mcp``)

Global options (also from the environment): ``--database-url`` / ``DATABASE_URL`` (an external
PostgreSQL; default: the embedded server), ``--home`` / ``CORTEX_PG_HOME`` (the embedded
server's data directory), ``--embedder`` / ``CORTEX_PG_EMBEDDER`` (minilm, openai, hashing).
The CLI migrates the schema on open (``auto_migrate=True``). Errors print one line naming the
flag and exit 2. Heavy modules (the store, the model) are imported by the command that runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated

import typer

from cortex_pg.cli import collections, cortex, db, entities, evolution, keys, mcp, models, notes, serve
from cortex_pg.cli.common import Options
from cortex_pg.errors import STMLostWarning

app = typer.Typer(help="cortex-pg: long-term memory for AI agents, in PostgreSQL.", no_args_is_help=True)


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
        str,
        typer.Option(
            envvar="CORTEX_PG_EMBEDDER", help="minilm (offline, ONNX), minilm-torch, openai or hashing."
        ),
    ] = "minilm",
) -> None:
    ctx.obj = Options(database_url, home, embedder)
    # STMLostWarning is logged as well as warned (cortex_pg.store.stm_loss): the command says it
    # once, as the log line
    warnings.filterwarnings("ignore", category=STMLostWarning)


for _group in (db, notes, models, entities, collections, evolution, cortex, serve, keys, mcp):
    _group.register(app)

__all__ = ["app"]
