"""``cortex-pg cortex``: the Prem Cortex test CLI's options, on cortex-pg.

Stores chunks of an input file for one user and session, asks queries against STM, LTM and
both, and writes ``stm_memories.json``, ``ltm_memories.json`` and ``full_query_results.json``
to an output directory. ``--stm-json`` / ``--ltm-json`` import such files (ids kept), so
export -> clear -> import round-trips.

Chunking, as the original CLI does it: the file is split into sections on its separator (three
blank lines, ``"\n\n\n\n"``), and a section longer than 2,000 characters into chunks of at
most 2,000 characters with 200 characters of overlap, by paragraphs, then lines, sentences
and words (:func:`cortex_pg.documents.chunk_text`). cortex-pg adds the document rules: a
heading stays with the text that follows it, no chunk is under 400 characters unless the
file is, and a chunk under Markdown headings gets their path as its ``context``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cortex_pg.documents import (
    PREM_CHUNK_OVERLAP,
    PREM_CHUNK_SIZE,
    PREM_SECTION_SEPARATOR,
    Chunk,
    chunk_text,
)

EXPORT_KEYS = (
    "id",
    "content",
    "context",
    "tags",
    "keywords",
    "timestamp",
    "score",
    "memory_tier",
    "user_id",
    "session_id",
    "category",
    "links",
    "retrieval_count",
    "metadata",
    "importance",
)


def split_chunks(body: str) -> list[Chunk]:
    """The chunks the ``cortex`` command stores for a file's text (see the module doc).

    Raises:
        ValidationError: ``body`` is not a string.
    """
    return chunk_text(
        body, size=PREM_CHUNK_SIZE, overlap=PREM_CHUNK_OVERLAP, section_separator=PREM_SECTION_SEPARATOR
    )


def _parse_timestamp(value: Any) -> Any:
    """Accept the original's legacy ``YYYYMMDDHHMM`` timestamps as well as ISO 8601."""
    if isinstance(value, str) and re.fullmatch(r"\d{12}", value):
        return datetime.strptime(value, "%Y%m%d%H%M").replace(tzinfo=UTC).isoformat()
    return value


def _export(note_dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: d.get(k) for k in EXPORT_KEYS} for d in note_dicts]


def register(app: typer.Typer) -> None:
    """Add the ``cortex`` command to ``app``."""

    @app.command("cortex")
    def cortex(
        ctx: typer.Context,
        input_file: Annotated[
            Path | None, typer.Option(help="Text file to store, in chunks.", exists=True, dir_okay=False)
        ] = None,
        queries_file: Annotated[
            Path | None, typer.Option(help="JSON list of query strings.", exists=True, dir_okay=False)
        ] = None,
        query: Annotated[list[str] | None, typer.Option("--query", help="A query (repeatable).")] = None,
        limit: Annotated[int, typer.Option(help="Results per query and source.")] = 5,
        user_id: Annotated[str, typer.Option("--user-id")] = "testuser1",
        session_id: Annotated[str, typer.Option("--session-id")] = "testsession1",
        stm_json: Annotated[
            Path | None, typer.Option("--stm-json", help="Import STM memories (JSON list).")
        ] = None,
        ltm_json: Annotated[
            Path | None, typer.Option("--ltm-json", help="Import LTM memories (JSON list).")
        ] = None,
        skip_storage: Annotated[
            bool, typer.Option("--skip-storage", help="Do not store the input file.")
        ] = False,
        output_dir: Annotated[Path | None, typer.Option(help="Write the JSON files here.")] = None,
    ) -> None:
        """Prem Cortex's test CLI: store a file, import/export memories, compare STM/LTM answers."""
        from cortex_pg.cli.common import console, handle_errors, settings_of
        from cortex_pg.compat.prem import AgenticMemorySystem
        from cortex_pg.embeddings import embedder_from_name
        from cortex_pg.errors import ValidationError

        @handle_errors(
            flags={"user_id": "--user-id", "session_id": "--session-id", "output_dir": "--output-dir"}
        )
        def run() -> None:
            settings = settings_of(ctx)
            system = AgenticMemorySystem(
                database_url=settings.database_url,
                path=settings.home,
                enable_background_processing=False,
                embedder=embedder_from_name(settings.embedder),
            )
            try:
                imported = _import(system, ltm_json, stm_json, user_id, session_id)
                for what, n in imported.items():
                    console.print(f"imported {n} {what}")
                if input_file and not skip_storage and not (stm_json and ltm_json):
                    try:
                        chunks = split_chunks(input_file.read_text(encoding="utf-8-sig"))
                    except UnicodeDecodeError as exc:
                        raise ValidationError(str(input_file), f"not UTF-8 text: {exc}") from None
                    for chunk in chunks:
                        extra = {"context": chunk.context} if chunk.context else {}
                        system.add_note(chunk.text, user_id=user_id, session_id=session_id, **extra)
                    console.print(f"stored {len(chunks)} chunks of {input_file}")
                queries = list(query or [])
                if queries_file:
                    loaded = _read_json(queries_file)
                    if not isinstance(loaded, list) or not all(isinstance(q, str) for q in loaded):
                        raise ValidationError(str(queries_file), "expected a JSON list of query strings")
                    queries += loaded
                results: dict[str, Any] = {}
                for q in queries:
                    per = {
                        src: system.search(
                            q, limit=limit, memory_source=src, user_id=user_id, session_id=session_id
                        )
                        for src in ("stm", "ltm", "all")
                    }
                    results[q] = {
                        src: [
                            {
                                "id": r["id"],
                                "content": r["content"],
                                "score": r["score"],
                                "memory_tier": r["memory_tier"],
                                "timestamp": r["timestamp"],
                            }
                            for r in rs
                        ]
                        for src, rs in per.items()
                    }
                    console.print(f"[bold]{q}[/bold]")
                    for i, r in enumerate(per["all"], 1):
                        console.print(f"  {i}. ({r['memory_tier']}, {r['score']:.3f}) {r['content'][:120]}")
                if output_dir:
                    try:
                        output_dir.mkdir(parents=True, exist_ok=True)
                    except OSError as exc:
                        raise ValidationError("output_dir", f"cannot create {output_dir}: {exc}") from None
                    store = system.store
                    for tier in ("stm", "ltm"):
                        notes = store.list_notes(user_id=user_id, session_id=session_id, memory_source=tier)
                        links = system._links([n.id for n in notes], user_id)
                        dicts = [dict(_note_dict(n), links=links.get(n.id, {})) for n in notes]
                        (output_dir / f"{tier}_memories.json").write_text(
                            json.dumps(_export(dicts), indent=2, ensure_ascii=False), encoding="utf-8"
                        )
                    (output_dir / "full_query_results.json").write_text(
                        json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8"
                    )
                    console.print(
                        f"wrote stm_memories.json, ltm_memories.json, full_query_results.json to {output_dir}"
                    )
            finally:
                system.shutdown()

        run()


def _read_json(path: Path) -> Any:
    from cortex_pg.errors import ValidationError

    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(str(path), f"cannot read JSON: {exc}") from None


def _entries(path: Path, user_id: str, session_id: str) -> list[dict[str, Any]]:
    """The memories of an export file as validated note items (raises before anything is written)."""
    from cortex_pg.errors import ValidationError
    from cortex_pg.store import validation

    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValidationError(str(path), "expected a JSON list of memories")
    items = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValidationError(f"{path}[{i}]", "a memory must be a JSON object")
        item = {
            "id": e.get("id"),
            "content": e.get("content"),
            "time": _parse_timestamp(e.get("timestamp")),
            "user_id": e.get("user_id") or user_id,
            "session_id": e.get("session_id") or session_id,
            "keywords": e.get("keywords"),
            "tags": e.get("tags"),
            "context": e.get("context"),
            "category": e.get("category"),
            "metadata": e.get("metadata") or None,
            "importance": e.get("importance", 0.5) if e.get("importance") is not None else 0.5,
        }
        validation.new_note(item, prefix=f"{path.name}[{i}].")  # validate now, write later
        if e.get("links") is not None and not isinstance(e.get("links"), dict):
            raise ValidationError(
                f"{path.name}[{i}].links", "must be an object {target_id: {type, strength, reason}}"
            )
        items.append({"item": item, "links": e.get("links") or {}})
    return items


def _import(
    system: Any, ltm_json: Path | None, stm_json: Path | None, user_id: str, session_id: str
) -> dict[str, int]:
    """Import export files: LTM notes (one transaction), then STM-only notes, then links.

    Ids, times, fields and importance are kept as exported; nothing is re-processed. Every
    entry is validated before anything is written.
    """
    ltm = _entries(ltm_json, user_id, session_id) if ltm_json else []
    stm = _entries(stm_json, user_id, session_id) if stm_json else []
    store = system.store
    out: dict[str, int] = {}
    by_user: dict[str, list[dict[str, Any]]] = {}
    for e in ltm:
        by_user.setdefault(e["item"]["user_id"], []).append(e["item"])
    for uid, items in by_user.items():
        store.add_many(items, user_id=uid, to_stm=False, enqueue_evolution=False)
    if ltm:
        out["long-term memories"] = len(ltm)
    for e in stm:  # STM copies (of LTM notes, or STM-only notes), ids kept
        store.add(**e["item"], to_ltm=False)
    if stm:
        out["short-term memories"] = len(stm)
    links = 0
    for e in ltm:
        if e["links"]:
            store.update(e["item"]["id"], user_id=e["item"]["user_id"], links=e["links"])
            links += len(e["links"])
    if links:
        out["links"] = links
    return out


def _note_dict(note: Any) -> dict[str, Any]:
    return {
        "id": note.id,
        "content": note.content,
        "context": note.context,
        "tags": note.tags,
        "keywords": note.keywords,
        "timestamp": note.created_at.isoformat(),
        "score": None,
        "memory_tier": note.memory_tier,
        "user_id": note.user_id,
        "session_id": note.session_id,
        "category": note.category,
        "retrieval_count": note.access_count,
        "metadata": note.metadata,
        "importance": note.importance,
    }
