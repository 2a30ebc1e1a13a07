"""``cortex-pg worker`` and ``cortex-pg jobs``: the evolution commands, registered on the main CLI.

The main CLI calls :func:`register`; ``python -m cortex_pg.cli.evolution`` runs these two
commands alone. The database comes from ``--database-url`` / ``DATABASE_URL`` (else the
embedded server), the embedder from ``--embedder`` / ``CORTEX_PG_EMBEDDER``; the worker must
use the embedder the notes were stored with (the store refuses another one).
"""

from __future__ import annotations

import logging
import signal
import threading

import typer

from cortex_pg.cli.common import handle_errors
from cortex_pg.errors import translate_db_errors


def _settings(ctx: typer.Context | None, database_url: str | None, embedder: str | None):  # noqa: ANN202
    """Settings from this command's options, else the main CLI's global options, else the environment."""
    from cortex_pg.cli.common import settings_of

    base = settings_of(ctx)
    updates: dict[str, object] = {}
    if database_url:
        updates["database_url"] = database_url
    if embedder:
        updates["embedder"] = embedder
    return base.model_copy(update=updates)


def _open(ctx: typer.Context | None, database_url: str | None, embedder: str | None):  # noqa: ANN202
    from cortex_pg.store.memory_store import MemoryStore

    return MemoryStore.open(settings=_settings(ctx, database_url, embedder), auto_migrate=True)


def register(app: typer.Typer) -> None:
    """Add the ``worker`` and ``jobs`` commands to ``app``."""

    @app.command("worker")
    @handle_errors
    def worker(
        ctx: typer.Context,
        concurrency: int = typer.Option(1, "--concurrency", "-c", min=1, help="worker threads"),
        lock_timeout: float = typer.Option(
            300.0, help="seconds after which a running job's lock counts as abandoned"
        ),
        poll_interval: float = typer.Option(2.0, help="seconds between polls when no NOTIFY arrives"),
        exit_when_idle: bool = typer.Option(False, "--exit-when-idle", help="stop when no job is ready"),
        database_url: str | None = typer.Option(None, "--database-url"),
        embedder: str | None = typer.Option(
            None, "--embedder", help="minilm (offline, ONNX), minilm-torch, openai or hashing"
        ),
        prem: bool = typer.Option(
            False,
            "--prem",
            help="process notes as the Prem Cortex API does: its analysis (LLM from OPENAI_API_KEY, "
            "else offline) before evolution",
        ),
    ) -> None:
        """Run evolution workers until interrupted (SIGINT / SIGTERM finish the current jobs).

        With --prem, each job first runs the Prem Cortex analysis (keywords, tags, category and
        context the caller left empty), as an AgenticMemorySystem's own worker does."""
        from cortex_pg.evolution.worker import Worker

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        store = _open(ctx, database_url, embedder)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        options = {"concurrency": concurrency, "lock_timeout": lock_timeout, "poll_interval": poll_interval}
        if prem:
            from cortex_pg.compat.prem import AgenticMemorySystem

            system = AgenticMemorySystem(store=store, enable_background_processing=False)
            w = system.job_worker(**options)
        else:
            w = Worker(store, **options)
        typer.echo(f"worker {w.name}: {concurrency} thread(s), lock timeout {lock_timeout:g} s", err=True)
        try:
            stats = w.run(exit_when_idle=exit_when_idle, stop=stop)
        finally:
            store.close()
        typer.echo(
            f"done={stats.done} retried={stats.retried} failed={stats.failed} lost={stats.lost}", err=True
        )

    @app.command("jobs")
    @handle_errors
    def jobs(
        ctx: typer.Context,
        retry_failed: bool = typer.Option(False, "--retry-failed", help="queue failed jobs again"),
        user_id: str | None = typer.Option(None, "--user-id", help="only this user's jobs"),
        database_url: str | None = typer.Option(None, "--database-url"),
    ) -> None:
        """Show evolution job counts by status (queued, running, done, failed) and how many
        running jobs will run again (their note changed while they ran)."""
        from cortex_pg.db.engine import create_engine_for, resolve_url
        from cortex_pg.store import jobs as queue
        from cortex_pg.store.memory_store import ensure_schema

        engine = create_engine_for(resolve_url(None, settings=_settings(ctx, database_url, None)))
        try:
            ensure_schema(engine, auto_migrate=False)  # (a report does not migrate: it says to)
            with translate_db_errors(), engine.begin() as conn:
                if retry_failed:
                    n = queue.retry_failed(conn, user_id=user_id)
                    typer.echo(f"re-queued {n} failed job(s)")
                counts = queue.counts(conn, user_id=user_id)
        finally:
            engine.dispose()
        for status in ("queued", "running", "done", "failed"):
            again = (
                f" ({counts['run_again']} to run again)"
                if status == "running" and counts["run_again"]
                else ""
            )
            typer.echo(f"{status:8} {counts.get(status, 0)}{again}")
        if counts["prem_queued"]:
            typer.echo(
                f"({counts['prem_queued']} of the queued jobs are Prem Cortex notes': an AgenticMemorySystem's "
                "worker or `cortex-pg worker --prem` runs them, a plain worker does not)"
            )


def main() -> None:
    """Entry point of ``python -m cortex_pg.cli.evolution``."""
    app = typer.Typer(help="cortex-pg evolution worker and job queue")
    register(app)
    app()


if __name__ == "__main__":
    main()
