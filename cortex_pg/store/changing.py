"""Changing notes: update, delete, delete_where (with :mod:`cortex_pg.store.writing`, the
write half of :class:`MemoryStore`).

Every method validates its input first (raising :class:`~cortex_pg.errors.ValidationError`
before anything is written), runs in one transaction and filters every statement on
``user_id``. Database errors leave through :func:`~cortex_pg.errors.translate_db_errors`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import (
    Blocking,
    Plan,
    Query,
    Transaction,
    WithConnection,
    in_transaction,
    operation,
    plan_of,
)
from cortex_pg.errors import ImmutableFieldError, MergedNoteError, ValidationError, translate_db_errors
from cortex_pg.store import sql, validation
from cortex_pg.store.records import Note
from cortex_pg.store.rows import tenant_scoped, vector_literal
from cortex_pg.store.text_embeddings import NoteWindows, embed_windows, write_text_embeddings
from cortex_pg.temporal import parse_instant

# every note field but the identity and scope ones (see validation.NOTE_FIELDS)
UPDATABLE_FIELDS = tuple(f for f in validation.NOTE_FIELDS if f not in ("id", "user_id", "session_id"))


class NoteChanger:
    """The update and delete methods of :class:`~cortex_pg.store.MemoryStore` (a mixin: it uses
    the store's ``engine``, ``embedder`` and ``get``, and the context embeddings of
    :class:`~cortex_pg.store.writing.NoteWriter`)."""

    @retry_transient
    @tenant_scoped
    @operation
    def update(
        self,
        id: str | uuid.UUID,
        *,
        user_id: str | None = None,
        in_same_transaction: Callable[[Connection], Any] | None = None,
        **fields: Any,
    ) -> Plan[Note]:
        """Change fields of a note (both tiers); returns the updated note.

        Updatable: content (re-embedded), keywords, tags, context, category, importance,
        memory_type, time (the memory's own time), metadata (merged into the stored dict:
        keys given replace, other keys stay; a value of None deletes the key), links
        (``{target_id: {type, strength, reason}}``: the note's links become these, written
        with their reciprocals by :func:`cortex_pg.store.links.replace_links` in the same
        transaction; a link to a note left out goes with its reciprocal, whichever note made
        it; ``links={}`` clears them; :meth:`set_links` adds links and keeps the others).

        Args:
            id: the note id.
            user_id: the owning tenant (routes the lookup; None looks in every tenant).
            in_same_transaction: called with the update's connection once the note's rows are
                written, in the update's transaction (it may be called again when the update is
                retried): rows a caller keeps beside the note (its entity mentions, a processing
                job) commit with the new fields, or neither does. Not called when nothing is
                written (no field given).

        Raises:
            ImmutableFieldError: ``session_id`` (or ``user_id`` in ``fields``) differs from the stored value.
            ValidationError: unknown field or bad value. NotFoundError: no such note.
            MergedNoteError: the note was merged into another one (update that one); checked
                under the row lock, so a merge running meanwhile is seen.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        in_same_transaction = validation.connection_callback(in_same_transaction)
        given_session = fields.pop("session_id", None)
        new_links = None
        if "links" in fields:
            from cortex_pg.store import links as note_links

            new_links = note_links.parse_links(nid, fields.pop("links"))
        unknown = set(fields) - set(UPDATABLE_FIELDS)
        if unknown:
            raise ValidationError(
                sorted(unknown)[0], f"not an updatable field; use one of {', '.join(UPDATABLE_FIELDS)}"
            )
        sets: dict[str, Any] = {}
        if "content" in fields:
            sets["content"] = validation.content(fields["content"])
        if "keywords" in fields:
            sets["keywords"] = validation.string_list(fields["keywords"], "keywords")
        if "tags" in fields:
            sets["tags"] = validation.string_list(fields["tags"], "tags")
        if "context" in fields:
            sets["context"] = validation.note_context(fields["context"], "context")
        if "category" in fields:
            sets["category"] = validation.category(fields["category"])
        if "importance" in fields:
            sets["importance"] = validation.importance(fields["importance"])
        if "memory_type" in fields:
            sets["memory_type"] = validation.memory_type(fields["memory_type"])
        if "time" in fields:
            sets["created_at"] = parse_instant(fields["time"], "time")
            if sets["created_at"] is None:
                raise ValidationError("time", "must not be None")
        meta_patch = validation.metadata(fields.get("metadata")) if "metadata" in fields else None
        current = yield from plan_of(self.get, nid, user_id=uid)
        if current.merged_into is not None:
            raise MergedNoteError(str(nid), current.merged_into)
        if given_session is not None and given_session != current.session_id:
            raise ImmutableFieldError("session_id", "cannot be changed after a note is stored")
        uid = current.user_id
        vector = None
        if "content" in sets and sets["content"] != current.content:
            vector = yield Blocking(embed_windows, (self.embedder, [sets["content"]]))
            vector = vector[0]
        assignments = [f"{col} = :{col}" for col in sets]
        params: dict[str, Any] = {**sets, "id": nid, "user_id": uid}
        if meta_patch is not None:
            drop = [k for k, v in meta_patch.items() if v is None]
            keep = {k: v for k, v in meta_patch.items() if v is not None}
            assignments.append(
                "metadata = (metadata || CAST(:meta_patch AS jsonb)) - CAST(:meta_drop AS text[])"
            )
            params["meta_patch"] = json.dumps(keep)
            params["meta_drop"] = drop
        moved = "created_at" in sets and sets["created_at"] != current.created_at
        if assignments or new_links is not None:
            assignments.append("updated_at = now()")
            set_sql = ", ".join(assignments)

            def body() -> Plan[None]:
                nonlocal vector
                if moved or "content" in sets:  # its session's context rows may change: the
                    # scope lock first, as a write takes it (sql.LOCK_SCOPES), before any row
                    yield Query(sql.LOCK_NOTE_SCOPES, {"user_id": uid, "ids": [nid]}, "none")
                locked = yield Query(sql.LOCK_NOTE_FOR_UPDATE, {"id": nid, "user_id": uid}, "first")
                if locked is not None and locked.merged_into is not None:
                    raise MergedNoteError(str(nid), str(locked.merged_into))
                stored = locked
                if locked is None and "content" in sets:  # only in STM: its row holds the text
                    stored = yield Query(sql.LOCK_STM_NOTE_FOR_UPDATE, {"id": nid, "user_id": uid}, "first")
                if (
                    vector is None
                    and stored is not None
                    and sets.get("content", stored.content) != stored.content
                ):
                    # another update changed the text after it was read: the stored text differs
                    # from this one after all, so it is embedded (else the note would keep the
                    # other text's embedding)
                    vector = (yield Blocking(embed_windows, (self.embedder, [sets["content"]])))[0]
                # a new time moves a long-term note within its session: the note, the note that
                # followed it and the one it now precedes get the context of their new places
                left = (yield Query(sql.NEXT_IN_SESSION, {"id": nid, "u": uid}, "first")) if moved else None
                for table in ("cortex.notes", "cortex.stm_notes"):
                    yield Query(
                        f"UPDATE {table} SET {set_sql} WHERE user_id = :user_id AND id = :id", params, "none"
                    )
                if meta_patch is not None:  # the cap holds for the merged metadata too (rolled back)
                    size = yield Query(sql.METADATA_SIZE, {"id": nid, "user_id": uid}, "scalar_one")
                    if size is not None and size > validation.MAX_METADATA_LENGTH:
                        raise ValidationError(
                            "metadata",
                            f"merged with the stored metadata it is {size:,} characters of JSON, more than "
                            f"the {validation.MAX_METADATA_LENGTH:,} allowed",
                        )
                if new_links is not None:
                    yield WithConnection(lambda conn: note_links.replace_links(conn, uid, nid, new_links))
                if vector is not None:
                    lit = vector_literal(vector[0])
                    if locked is not None:  # a long-term note (an STM-only one has no embeddings rows)
                        note = NoteWindows(uid, str(nid), current.session_id, vector)
                        yield WithConnection(
                            lambda conn: write_text_embeddings(conn, self.embedder.name, [note])
                        )
                    yield Query(
                        "UPDATE cortex.stm_notes SET embedding = CAST(:v AS vector), model = :m "
                        "WHERE user_id = :user_id AND id = :id",
                        {"v": lit, "user_id": uid, "id": nid, "m": self.embedder.name},
                        "none",
                    )
                    if not moved:  # (a moved note's context is written below)
                        yield from self._write_context_embeddings([uid], [str(nid)])
                if moved and locked is not None:
                    placed = [str(nid)] + ([str(left.id)] if left is not None else [])
                    yield Query(
                        sql.DELETE_CONTEXT_EMBEDDINGS,
                        {"user_id": uid, "ids": placed, "model": self.embedder.name},
                        "none",
                    )
                    yield from self._write_context_embeddings([uid] * len(placed), placed)
                if in_same_transaction is not None:
                    yield WithConnection(in_same_transaction)

            yield Transaction(body())
        return (yield from plan_of(self.get, nid, user_id=uid))

    @retry_transient
    @tenant_scoped
    @operation
    def delete(
        self, id: str | uuid.UUID, *, user_id: str | None = None, memory_source: str = "all"
    ) -> Plan[bool]:
        """Delete a note from both tiers, or one (``memory_source`` ``ltm`` / ``stm``); its
        embeddings and links go with its LTM row; history stays.

        Returns:
            True when a note was deleted, False when none had that id.
        """
        nid = validation.note_id(id)
        uid = validation.optional_scope_id(user_id, "user_id")
        source = validation.memory_source(memory_source)

        def body() -> Plan[int]:
            # the note that follows it in its session loses it as its context
            owner = uid or (yield Query(sql.ID_OWNER, {"id": nid}, "scalar_one_or_none"))
            if owner is not None:  # its session's scope lock first (LOCK_SCOPES): an STM row goes,
                # or the LTM note the next one reads as its context
                yield Query(sql.LOCK_NOTE_SCOPES, {"user_id": owner, "ids": [nid]}, "none")
            after = (
                (yield Query(sql.NEXT_IN_SESSION, {"id": nid, "u": owner}, "first"))
                if source != "stm" and owner is not None
                else None
            )
            n = yield Query(
                "WITH l AS (DELETE FROM cortex.notes WHERE :src IN ('all','ltm') AND id = :id "
                "  AND (CAST(:u AS text) IS NULL OR user_id = :u) RETURNING id), "
                "s AS (DELETE FROM cortex.stm_notes WHERE :src IN ('all','stm') AND id = :id "
                "  AND (CAST(:u AS text) IS NULL OR user_id = :u) RETURNING id) "
                "SELECT count(*) FROM (SELECT id FROM l UNION SELECT id FROM s) x",
                {"id": nid, "u": uid, "src": source},
                "scalar_one",
            )
            if after is not None:
                yield from self._contexts_anew(after.user_id, [str(after.id)])
            return n

        return (yield Transaction(body())) > 0

    def contexts_after_delete(self, conn: Connection, user_id: str, places: Iterable[Any]) -> list[str]:
        """Keep the context embeddings right after notes of tenant ``user_id`` were deleted by
        the caller's own SQL on ``conn``, in the delete's transaction (under the scope locks of
        their sessions, ``sql.LOCK_SCOPES``, as :meth:`delete` takes them): the current note that
        now follows each deleted note in its session gets the context of its new predecessor,
        as :meth:`delete` gives its note's successor, and a note now first of its session keeps
        no context row.

        Args:
            places: the deleted LTM notes' places: rows with ``session_id``, ``created_at`` and
                ``seq`` (of a ``RETURNING n.session_id, n.created_at, n.seq``).

        Returns:
            The ids of the notes whose context rows were written anew (or dropped), sorted.

        Raises:
            EmbeddingModelError, EmbeddingDimensionError: the embedder returned the wrong shape.
        """
        rows = list(places)
        if not rows:
            return []
        params = {
            "u": user_id,
            "sessions": [r.session_id for r in rows],
            "times": [r.created_at for r in rows],
            "seqs": [r.seq for r in rows],
        }
        after = sorted(str(i) for i in conn.execute(text(sql.NEXT_AFTER_PLACES), params).scalars())
        if after:
            in_transaction(conn, self._contexts_anew(user_id, after))
        return after

    def _contexts_anew(self, user_id: str, ids: list[str]) -> Plan[None]:
        """The notes ``ids`` of tenant ``user_id``, whose predecessor in their session changed:
        their context rows (every model) go, and are written again from their new predecessor
        when the store keeps context embeddings (none for a note now first of its session)."""
        yield Query(sql.DROP_CONTEXT_ROWS, {"u": user_id, "ids": ids}, "none")
        yield from self._write_context_embeddings([user_id] * len(ids), ids)

    @retry_transient
    @tenant_scoped
    def delete_where(
        self, *, user_id: str | None = None, session_id: str | None = None, memory_source: str = "all"
    ) -> int:
        """Delete every note of a user (and session, when given) in the chosen tiers.

        It waits for writes in progress in those sessions, then empties them; with ``all`` or
        ``stm`` and no ``session_id``, a session that a concurrent write starts after the call
        began is left to that write (in both tiers).

        Args:
            user_id: the tenant (None = ``"default"``; never "everyone").
            session_id: restrict to one session; None = all of the user's sessions.
            memory_source: ``all``, ``ltm`` or ``stm``.

        Returns:
            The number of distinct current notes removed (a note in both tiers counts once;
            notes merged into another one are removed too but not counted: they were no
            longer notes of their own).
        """
        uid = validation.scope_id(user_id, "user_id")
        sid = validation.optional_scope_id(session_id, "session_id")
        source = validation.memory_source(memory_source)
        with translate_db_errors(), self.engine.begin() as conn:
            sessions = None
            if source in ("all", "stm"):
                # the scope locks first (see LOCK_SCOPES): the session's, or those of every session
                # the user has now, and only those sessions are emptied (a session a concurrent
                # write starts meanwhile is left to it, in both tiers)
                sessions = (
                    [sid]
                    if sid is not None
                    else list(conn.execute(text(sql.USER_SESSIONS), {"u": uid, "src": source}).scalars())
                )
                conn.execute(text(sql.LOCK_SCOPES), {"users": [uid] * len(sessions), "sessions": sessions})
            params = {"u": uid, "s": sid, "src": source, "ss": sessions}
            # in the touching reads' lock order (LTM rows by id, then STM rows by id), not the plan's
            for tier, table in (("ltm", "cortex.notes"), ("stm", "cortex.stm_notes")):
                if source in ("all", tier):
                    conn.execute(text(sql.LOCK_SCOPE_FOR_DELETE.format(table=table)), params)
            return conn.execute(
                text(
                    "WITH l AS (DELETE FROM cortex.notes WHERE :src IN ('all','ltm') AND user_id = :u "
                    "  AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                    "  AND (CAST(:ss AS text[]) IS NULL OR session_id = ANY (CAST(:ss AS text[]))) "
                    "  RETURNING id, merged_into), "
                    "st AS (DELETE FROM cortex.stm_notes WHERE :src IN ('all','stm') AND user_id = :u "
                    "  AND (CAST(:s AS text) IS NULL OR session_id = :s) "
                    "  AND (CAST(:ss AS text[]) IS NULL OR session_id = ANY (CAST(:ss AS text[]))) RETURNING id) "
                    "SELECT count(*) FROM (SELECT id FROM l WHERE merged_into IS NULL "
                    "UNION SELECT id FROM st) x"
                ),
                params,
            ).scalar_one()
