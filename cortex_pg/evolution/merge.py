"""Merging one note into another, in the caller's transaction.

Rules (Prem Cortex ``_merge_memories`` / ``_combine_metadata`` / ``_merge_links``, fixed where
the original loses data):

* content: ``augment`` and ``combine`` -> ``target + "\\n\\n\\n" + source`` (the target's
  text as it was when one of its parts is the source's text already); ``replace`` -> the
  source's text. The target is re-embedded when its text changes.
* keywords and tags: union, target's order first, up to the store's 1,000 of each
  (:data:`~cortex_pg.store.validation.MAX_LIST_ITEMS`): the source's that do not fit stay on the
  source's row and are named in the target's ``evolution_history`` entry (``tags_left_out``,
  ``keywords_left_out``); created_at: the later wins;
  importance and access_count: the larger wins; metadata: the source's keys under the
  target's; context: the source's unless blank or ``General``/``Uncategorized``;
  category: stays a dot path — the target's, else the source's (the original wrote ``a/b``).
* links: the source's links become the target's (the higher strength wins on a clash) and
  links pointing at the source are repointed to the target; links between the two vanish
  (no self links).
* the source gets ``merged_into = target`` and is kept for history (search and counts skip it);
  both get an ``evolution_history`` entry; the trigger writes ``note_history`` rows labelled
  ``merge`` (``SET LOCAL cortex.change_reason``).
* never into itself, never across users or sessions, never from or into a merged note.
* never past the store's limits: a merge whose text would be longer than 500,000 characters
  (:data:`~cortex_pg.store.validation.MAX_CONTENT_LENGTH`; ``augment``/``combine`` of two long
  notes) or whose metadata would be more than 100,000 characters of JSON
  (:data:`~cortex_pg.store.validation.MAX_METADATA_LENGTH`) is refused like the cases above
  (:class:`~cortex_pg.errors.ValidationError`, field ``merge``, before anything is written):
  both notes stay as they were. An evolution job records the refusal in its result
  (``merge_refused``), logs it and completes.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from cortex_pg.db.retry import retry_transient
from cortex_pg.embeddings.base import Embedder
from cortex_pg.errors import NotFoundError, ValidationError, translate_db_errors
from cortex_pg.store import sql as store_sql
from cortex_pg.store import validation
from cortex_pg.store.rows import vector_literal
from cortex_pg.store.text_embeddings import NoteWindows, embed_windows, write_text_embeddings
from cortex_pg.store.writing import write_context_embeddings

if TYPE_CHECKING:
    from cortex_pg.store.memory_store import MemoryStore

STRATEGIES = ("augment", "combine", "replace")
SEPARATOR = "\n\n\n"
_VAGUE_CONTEXTS = ("", "general", "uncategorized")

LOCK_PAIR = """
SELECT id, user_id, session_id, content, keywords, tags, context, category, metadata, importance,
       created_at, access_count, merged_into
FROM cortex.notes
WHERE user_id = :user_id AND id IN (:source, :target)
ORDER BY id
FOR NO KEY UPDATE
"""

MARK_SOURCE = """
UPDATE cortex.notes
SET merged_into = :target,
    evolution_history = evolution_history || CAST(:entry AS jsonb)
WHERE user_id = :user_id AND id = :source
"""

UPDATE_TARGET = """
UPDATE cortex.notes
SET content = :content, keywords = :keywords, tags = :tags, context = :context, category = :category,
    metadata = CAST(:metadata AS jsonb), importance = :importance, created_at = :created_at,
    access_count = :access_count,
    evolution_history = evolution_history || CAST(:entry AS jsonb)
WHERE user_id = :user_id AND id = :target
"""

UPDATE_TARGET_STM = """
UPDATE cortex.stm_notes
SET content = :content, keywords = :keywords, tags = :tags, context = :context, category = :category,
    metadata = CAST(:metadata AS jsonb), importance = :importance, created_at = :created_at,
    embedding = coalesce(CAST(:embedding AS vector), embedding),
    model = CASE WHEN CAST(:embedding AS text) IS NULL THEN model ELSE :model END
WHERE user_id = :user_id AND id = :target
"""

# after the target's text windows are rewritten (cortex_pg.store.text_embeddings)
# the context rows of the notes whose place or predecessor a merge changes (the source leaves
# the session's order; the others' are written again, a note now first in its session gets none)
DROP_CONTEXTS = """
DELETE FROM cortex.embeddings
WHERE user_id = :user_id AND note_id = ANY (CAST(:ids AS uuid[])) AND kind = 'context'
"""

# Move every link touching the source onto the target; on a clash the stronger link wins.
REPOINT_LINKS = """
WITH moved AS (
    DELETE FROM cortex.note_links
    WHERE user_id = :user_id AND (source_id = :source OR target_id = :source)
    RETURNING session_id, source_id, target_id, type, strength, reason
), repointed AS (
    SELECT DISTINCT ON (s, t) s, t, m.session_id, m.type, m.strength, m.reason
    FROM moved m,
         LATERAL (SELECT CASE WHEN m.source_id = :source THEN CAST(:target AS uuid) ELSE m.source_id END,
                         CASE WHEN m.target_id = :source THEN CAST(:target AS uuid) ELSE m.target_id END)
                 AS ends(s, t)
    WHERE s <> t
    ORDER BY s, t, m.strength DESC
), written AS (
    INSERT INTO cortex.note_links (user_id, source_id, target_id, session_id, type, strength, reason)
    SELECT :user_id, r.s, r.t, r.session_id, r.type, r.strength, r.reason FROM repointed r
    ORDER BY r.s, r.t
    ON CONFLICT (user_id, source_id, target_id) DO UPDATE
    SET type = CASE WHEN EXCLUDED.strength > note_links.strength THEN EXCLUDED.type ELSE note_links.type END,
        reason = CASE WHEN EXCLUDED.strength > note_links.strength
                      THEN EXCLUDED.reason ELSE note_links.reason END,
        strength = greatest(note_links.strength, EXCLUDED.strength)
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM written) AS written
"""


def _union(first: list[str], second: list[str]) -> tuple[list[str], list[str]]:
    """``first`` then the items of ``second`` it lacks, in order, up to
    :data:`~cortex_pg.store.validation.MAX_LIST_ITEMS`; and the items of ``second`` left out."""
    items = list(dict.fromkeys([*first, *second]))
    return items[: validation.MAX_LIST_ITEMS], items[validation.MAX_LIST_ITEMS :]


def merge_in(
    conn: Connection,
    embedder: Embedder,
    user_id: str,
    source_id: uuid.UUID,
    target_id: uuid.UUID,
    *,
    strategy: str = "augment",
    reasoning: str | None = None,
) -> dict[str, Any]:
    """Merge note ``source_id`` into ``target_id`` in the caller's transaction (rules above).

    The session's scope lock is taken first, then both rows are locked (``FOR NO KEY UPDATE``,
    in id order) before anything is read.

    Args:
        embedder: re-embeds the target's new content (``embedder.name`` is the stored model;
            embeddings of other models of the target are dropped, being stale), and the context
            embeddings of the target at its new place and of the notes that followed either
            note (the source leaves the session's order, the target takes the later time).
        strategy: ``augment``, ``combine`` (same as augment) or ``replace``.
        reasoning: why (kept in both ``evolution_history`` entries).

    Returns:
        ``{"source", "target", "strategy", "links_moved", "links_written"}``.

    Raises:
        ValidationError: same note, unknown strategy, different sessions, either note
            already merged, or the merged text or metadata would be longer than the store
            takes (field ``merge``; nothing is written).
        NotFoundError: either note is not a note of ``user_id``.
    """
    if strategy not in STRATEGIES:
        raise ValidationError("strategy", f"must be one of {', '.join(STRATEGIES)}")
    if source_id == target_id:
        raise ValidationError("target", "a note cannot be merged into itself")
    # the session's scope lock before any row (it deletes the source's STM copy; see LOCK_SCOPES)
    conn.execute(text(store_sql.LOCK_NOTE_SCOPES), {"user_id": user_id, "ids": [source_id, target_id]})
    rows = {
        r["id"]: r
        for r in conn.execute(
            text(LOCK_PAIR), {"user_id": user_id, "source": source_id, "target": target_id}
        ).mappings()
    }
    for nid in (source_id, target_id):
        if nid not in rows:
            raise NotFoundError("note", str(nid))
        if rows[nid]["merged_into"] is not None:
            raise ValidationError("merge", f"note {nid} is already merged into {rows[nid]['merged_into']}")
    src, dst = rows[source_id], rows[target_id]
    if src["session_id"] != dst["session_id"]:
        raise ValidationError("target", "notes of different sessions cannot be merged")
    # the notes that follow each in the session: their context changes when the source leaves
    # and the target moves to the later time
    followers = [
        r.id
        for nid in (source_id, target_id)
        for r in conn.execute(text(store_sql.NEXT_IN_SESSION), {"id": nid, "u": user_id}).all()
    ]
    now = datetime.now(UTC).isoformat()
    if strategy == "replace":
        content = src["content"]
        target_entry = {"type": "merge_replace", "merged_from": str(source_id)}
    elif src["content"] in dst["content"].split(SEPARATOR):  # the target holds that text already
        # (a merged note deleted, its text added again and merged again: it was appended twice)
        content = dst["content"]
        target_entry = {"type": "merge_augment", "augmented_with": str(source_id)}
    else:
        content = dst["content"] + SEPARATOR + src["content"]
        target_entry = {"type": "merge_augment", "augmented_with": str(source_id)}
    kept = f"notes {source_id} and {target_id} are left as they were"
    if len(content) > validation.MAX_CONTENT_LENGTH:
        raise ValidationError(
            "merge",
            f"the merged text would be {len(content):,} characters, more than the "
            f"{validation.MAX_CONTENT_LENGTH:,} a note holds; {kept}",
        )
    meta = {**(src["metadata"] or {}), **(dst["metadata"] or {})}
    meta_length = len(json.dumps(meta, ensure_ascii=False))  # (measured as validation.metadata does)
    if meta_length > validation.MAX_METADATA_LENGTH:
        raise ValidationError(
            "merge",
            f"the merged metadata would be {meta_length:,} characters of JSON, more than the "
            f"{validation.MAX_METADATA_LENGTH:,} a note holds; {kept}",
        )
    keywords, keywords_left_out = _union(list(dst["keywords"]), list(src["keywords"]))
    tags, tags_left_out = _union(list(dst["tags"]), list(src["tags"]))
    target_entry.update(
        timestamp=now, strategy=strategy, previous_content=dst["content"], reasoning=reasoning
    )
    if tags_left_out:
        target_entry["tags_left_out"] = tags_left_out
    if keywords_left_out:
        target_entry["keywords_left_out"] = keywords_left_out
    source_entry = {"type": "merged_into", "timestamp": now, "target": str(target_id), "reasoning": reasoning}
    context = src["context"] if (src["context"] or "").strip().lower() not in _VAGUE_CONTEXTS else None
    values = {
        "user_id": user_id,
        "source": source_id,
        "target": target_id,
        "content": content,
        "keywords": keywords,
        "tags": tags,
        "context": context or dst["context"],
        "category": dst["category"] or src["category"],
        "metadata": json.dumps(meta),
        "importance": max(float(src["importance"]), float(dst["importance"])),
        "created_at": max(src["created_at"], dst["created_at"]),
        "access_count": max(int(src["access_count"]), int(dst["access_count"])),
    }
    windows = embed_windows(embedder, [content])[0] if content != dst["content"] else None
    vector = windows[0] if windows else None
    conn.execute(text("SELECT set_config('cortex.change_reason', 'merge', true)"))
    # the source first: it leaves the unique content-hash indexes before the target may take its text
    conn.execute(text(MARK_SOURCE), {**values, "entry": json.dumps([source_entry])})
    conn.execute(text("DELETE FROM cortex.stm_notes WHERE user_id = :user_id AND id = :source"), values)
    conn.execute(text(UPDATE_TARGET), {**values, "entry": json.dumps([target_entry])})
    literal = vector_literal(vector) if vector is not None else None
    conn.execute(text(UPDATE_TARGET_STM), {**values, "embedding": literal, "model": embedder.name})
    if literal is not None:  # (its rows of other models go with the old text)
        note = NoteWindows(user_id, str(target_id), dst["session_id"], windows or [])
        write_text_embeddings(conn, embedder.name, [note])
    placed = [str(target_id)] + [str(f) for f in followers if f not in (source_id, target_id)]
    conn.execute(text(DROP_CONTEXTS), {"user_id": user_id, "ids": [str(source_id), *placed]})
    write_context_embeddings(conn, embedder, [user_id] * len(placed), placed)
    moved = conn.execute(text(REPOINT_LINKS), values).one()
    conn.execute(text("SELECT set_config('cortex.change_reason', '', true)"))
    return {
        "source": str(source_id),
        "target": str(target_id),
        "strategy": strategy,
        "links_moved": int(moved.moved),
        "links_written": int(moved.written),
    }


@retry_transient  # (its row locks can deadlock with a concurrent write of either note)
def merge_notes(
    store: MemoryStore,
    source_id: str | uuid.UUID,
    target_id: str | uuid.UUID,
    *,
    user_id: str | None = None,
    strategy: str = "augment",
    reasoning: str | None = None,
) -> dict[str, Any]:
    """Merge ``source_id`` into ``target_id`` in one transaction (see :func:`merge_in`).

    Args:
        user_id: owner of both notes (None: the source's owner; a target of another user is
            then not found).

    Raises:
        ValidationError, NotFoundError: see :func:`merge_in`.
    """
    src = validation.note_id(source_id, "source_id")
    dst = validation.note_id(target_id, "target_id")
    owner = store.get(src, user_id=user_id).user_id
    with translate_db_errors(), store.engine.begin() as conn:
        return merge_in(conn, store.embedder, owner, src, dst, strategy=strategy, reasoning=reasoning)
