"""``cortex-pg add``, ``ingest``, ``search``, ``get``, ``delete`` and ``stats``: notes in, notes out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cortex_pg.cli.common import console, data_location, handle_errors, open_store, progress_bar, settings_of
from cortex_pg.documents import DEFAULT_OVERLAP


def register(app: typer.Typer) -> None:
    """Add ``add``, ``ingest``, ``search``, ``get``, ``delete`` and ``stats`` to ``app``."""
    app.command("add")(add)
    app.command("ingest")(ingest)
    app.command("search")(search)
    app.command("get")(get)
    app.command("delete")(delete)
    app.command("stats")(stats)


def _list(value: str | None) -> list[str] | None:
    """A comma-separated option as its items, blanks kept (the store drops them) so that an
    item's error names its place as typed (``--tags[2]`` for ``a,,<bad>``)."""
    return value.split(",") if value else None


@handle_errors(flags={"to_stm": "--no-stm"})
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
        raise ValidationError("--metadata", f"not JSON: {exc}") from None
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


@handle_errors(flags={"to_stm": "--no-stm", "path": "PATH", "size": "--chunk-size", "overlap": "--overlap"})
def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    format: Annotated[
        str, typer.Option("--format", "-f", help="text (Markdown or plain, in chunks) or locomo.")
    ] = "text",
    user: Annotated[str, typer.Option("--user", "-u", help="Tenant for text files.")] = "default",
    session: Annotated[str, typer.Option("--session", "-s", help="Session for text files.")] = "default",
    batch_size: Annotated[int, typer.Option(help="Notes per embedding batch and insert.")] = 32,
    chunk_size: Annotated[
        int | None,
        typer.Option(help="Characters per text chunk (default: the embedder's window, 1,000 for MiniLM)."),
    ] = None,
    overlap: Annotated[
        int, typer.Option(help="Characters a text chunk repeats from the previous one.")
    ] = DEFAULT_OVERLAP,
    stm: Annotated[bool, typer.Option("--stm/--no-stm")] = True,
    entities: Annotated[
        bool,
        typer.Option("--entities/--no-entities", help="Extract entities (for `cortex-pg entities`)."),
    ] = True,
) -> None:
    """Ingest a file: text or Markdown (a note per chunk) or a LoCoMo JSON file (a note per turn).

    Text is cut by ``cortex_pg.chunk_text``: sections, paragraphs, then sentences, small blocks
    merged up to --chunk-size characters, a heading kept with its text, the heading path as the
    note's context.

    Prints how many notes were read, how many are new and how many were already stored
    (the same content in the same user and session is stored once). The file is loaded in
    bulk (``add_many(bulk=True)``): a transaction per batch, so an interrupted ingest keeps
    what it stored and running it again stores only the rest; into a store that has no
    embeddings yet, the vector index is built once after the load.
    """
    from cortex_pg import ingest as readers
    from cortex_pg.embeddings import embedder_from_name
    from cortex_pg.embeddings.windows import window_chars
    from cortex_pg.errors import ValidationError

    if format == "text":
        size = (
            chunk_size
            if chunk_size is not None
            else window_chars(embedder_from_name(settings_of(ctx).embedder))
        )
        batches = [(user, readers.text_items(path, size=size, overlap=overlap))]
    elif format == "locomo":
        batches = [(c.sample_id, c.items) for c in readers.read_locomo(path)]
    else:
        raise ValidationError("--format", f"unknown format {format!r}; use text or locomo")
    total = sum(len(items) for _, items in batches)
    new = 0
    with open_store(ctx, extract_entities=entities) as store, progress_bar() as progress:
        task = progress.add_task("loading model", total=total)
        load = getattr(store.embedder, "load", None)
        if callable(load):
            load()
        everything: list[dict[str, Any]] = []
        for uid, items in batches:
            distinct, stored = _already_stored(store, items, uid, session)
            new += distinct - stored
            everything += [{"user_id": uid, **item} for item in items]
        progress.update(task, description=f"ingesting {len(batches)} user(s)")
        # one bulk load: a transaction per batch, and into a store without embeddings of the
        # model, the HNSW index built once after the load instead of note by note
        store.add_many(
            everything,
            session_id=session,
            batch_size=batch_size,
            to_stm=stm,
            progress=lambda n: progress.advance(task, n),
            bulk=True,
        )
    console.print(
        f"{total} read, {new} new, {total - new} already stored "
        f"({len(batches)} user(s); data: {data_location(ctx)})",
        highlight=False,
        soft_wrap=True,
    )


def _already_stored(store: Any, items: list[dict[str, Any]], user: str, session: str) -> tuple[int, int]:
    """How many distinct notes ``items`` hold (one per user, session and content), and how many
    of those the store already holds in long-term memory. Asked of these notes, not read off a
    count of the user's notes, which other writers change meanwhile.

    Raises:
        ValidationError: an invalid item (``items[i].<field>``, as ``add_many`` names it).
    """
    from sqlalchemy import text

    from cortex_pg.store import validation

    keys = {
        (n.user_id, n.session_id, n.content_hash)
        for i, item in enumerate(items)
        for n in [
            validation.new_note(item, default_user_id=user, default_session_id=session, prefix=f"items[{i}].")
        ]
    }
    if not keys:
        return 0, 0
    users, sessions, hashes = (list(column) for column in zip(*keys, strict=True))
    with store.engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT count(*) FROM cortex.notes n JOIN unnest(CAST(:u AS text[]), "
                "CAST(:s AS text[]), CAST(:h AS text[])) AS k(user_id, session_id, content_hash) "
                "ON n.user_id = k.user_id AND n.session_id = k.session_id "
                "AND n.content_hash = k.content_hash WHERE n.merged_into IS NULL"
            ),
            {"u": users, "s": sessions, "h": hashes},
        ).scalar_one()
    return len(keys), stored


def _tiers(store: Any, results: list[Any], user: str) -> dict[str, str]:
    """Tier label per result id: a note kept in both tiers is shown once (its STM copy) as 'ltm+stm'."""
    from sqlalchemy import text

    stm_ids = [r.id for r in results if r.memory_tier == "stm"]
    in_ltm: set[str] = set()
    if stm_ids:
        with store.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT id::text FROM cortex.notes WHERE user_id = :u AND id::text = ANY(:ids)"),
                {"u": user, "ids": [str(i) for i in stm_ids]},
            )
            in_ltm = {row[0] for row in rows}
    return {
        str(r.id): "ltm+stm" if r.memory_tier == "stm" and str(r.id) in in_ltm else r.memory_tier
        for r in results
    }


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
    """Hybrid search (vector + BM25 by score fusion, session-neighbour smoothing, recency) of one user's notes."""
    from cortex_pg.errors import ValidationError
    from cortex_pg.temporal import parse_instant, parse_natural

    at = parse_instant(now, "--now")
    d_from = parse_natural(date_from, "--from", now=at) if date_from else None
    d_to = parse_natural(date_to, "--to", now=at) if date_to else None
    if d_from is not None and d_to is not None and d_to <= d_from:
        raise ValidationError(
            "--to", f"must be later than --from ({d_to.isoformat()} <= {d_from.isoformat()})"
        )
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
        tiers = _tiers(store, results, user) if not as_json else {}
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False))
        return
    table = Table(
        title=f"{len(results)} result(s) for user {user!r}",
        caption="tier: ltm = long-term only, stm = short-term only, ltm+stm = in both (a note "
        "is in short-term memory while it is among its session's newest)",
        show_lines=False,
    )
    for col in ("#", "score", "tier", "time", "session", "content"):
        table.add_column(col, overflow="fold" if col == "content" else "ellipsis")
    for i, r in enumerate(results, 1):
        table.add_row(
            str(i),
            f"{r.score:.3f}",
            tiers.get(str(r.id), r.memory_tier),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.note.session_id,
            r.content if len(r.content) <= 200 else r.content[:197] + "...",
        )
    console.print(table)


@handle_errors(flags={"id": "ID"})
def get(
    ctx: typer.Context,
    note_id: Annotated[str, typer.Argument(metavar="ID", help="The note's id (a UUID).")],
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Only this tenant's note (default: the id's own).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print one note: its long-term row, or its short-term copy when it is only in STM.

    Not counted as an access. A missing note is an error (exit status 2).
    """
    with open_store(ctx) as store:
        note = store.get(note_id, user_id=user)
    data = note.to_dict()
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    table = Table(title=f"note {note.id}")
    table.add_column("field")
    table.add_column("value")
    for key, value in data.items():
        table.add_row(
            key, json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
        )
    console.print(table)


@handle_errors(flags={"id": "ID"})
def delete(
    ctx: typer.Context,
    note_id: Annotated[str, typer.Argument(metavar="ID", help="The note's id (a UUID).")],
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Only this tenant's note (default: the id's own).")
    ] = None,
    source: Annotated[str, typer.Option(help="all, ltm or stm.")] = "all",
) -> None:
    """Delete one note from both tiers (or one, with --source); its embeddings and links go
    with it, its history stays. A missing note is an error (exit status 2)."""
    from cortex_pg.errors import NotFoundError

    with open_store(ctx) as store:
        deleted = store.delete(note_id, user_id=user, memory_source=source)
    if not deleted:
        raise NotFoundError("note", note_id)
    console.print(f"deleted {note_id}", highlight=False)


@handle_errors
def stats(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Counts: notes per tier, users, sessions, links, history rows, embeddings per model; when
    crash recovery last emptied short-term memory; and where the data is."""
    with open_store(ctx) as store:
        data = {"data": data_location(ctx), **store.stats(user_id=user)}
    if data["stm_lost_at"] is not None:  # when crash recovery last emptied short-term memory
        data["stm_lost_at"] = data["stm_lost_at"].isoformat(timespec="seconds")
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title="cortex-pg" + (f" — user {user!r}" if user else ""))
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in data.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    console.print(table)
