"""The Prem Cortex API (``AgenticMemorySystem``) on PostgreSQL.

``from cortex_pg import AgenticMemorySystem`` replaces ``from cortex.memory_system import
AgenticMemorySystem``. Every piece of state lives in the database, so notes written by one
process are read, updated, deleted and searched by another. Differences from the original
(each deliberate) are listed in the README's compatibility section.

Processing of a note:
    light (at once): keywords = up to 5 words longer than 3 letters that are not common words
        (when none are given); context = "General" (when none is given). The note is in STM and
        LTM when ``add_note`` returns.
    deep (a durable job in ``cortex.evolution_jobs``, queued in the insert's transaction; run
        before ``add_note`` returns, or by the worker thread of an ``AgenticMemorySystem`` with
        background processing, or by ``cortex-pg worker --prem``; its kind, ``prem``, keeps a
        plain ``cortex-pg worker`` from taking it): when keywords were not given or the
        context is "General",
        one analysis (LLM with a JSON schema when configured, else YAKE keywords and tags
        offline) fills only the fields the caller left empty; then evolution (links, neighbour
        updates, merges; LLM decision when configured, else the offline heuristic). A process
        killed before the job ran leaves it queued; the next system's worker runs it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time as _time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.collections import (
    LLMDescriber,
    LLMEnhancer,
    existing_categories_text,
    note_category,
    search_with_collections,
)
from cortex_pg.db import steps
from cortex_pg.db.retry import aretry_transient, retry_transient
from cortex_pg.db.steps import Blocking, Plan, plan_of, statement
from cortex_pg.embeddings import HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder
from cortex_pg.embeddings.base import Embedder
from cortex_pg.errors import MergedNoteError, NotFoundError, ValidationError
from cortex_pg.evolution.decide import NoteView, heuristic_decider, parse_decision
from cortex_pg.evolution.decide import build_prompt as evolution_prompt
from cortex_pg.evolution.worker import Worker
from cortex_pg.llm import ContentAnalyzer, LLMError, light_keywords, llm_from_settings, prompts
from cortex_pg.store import MemoryStore, Note, SearchResult
from cortex_pg.store import jobs as queue
from cortex_pg.store import validation as v
from cortex_pg.store.stm_loss import report_unwritten
from cortex_pg.temporal import auto_temporal_weight, parse_date_range

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = "General"
#: what processing derives from a note's text when the caller gives none, and its blank value
DERIVED_FIELDS: dict[str, Any] = {"tags": [], "category": None, "context": DEFAULT_CONTEXT}
# an entry of a note's evolution_history: which of those fields processing derived
# ("analysed") or the caller gave ("given") last
MARK_NOTE = (
    "UPDATE cortex.notes SET evolution_history = evolution_history || CAST(:entry AS jsonb) "
    "WHERE user_id = :user_id AND id = CAST(:id AS uuid)"
)


# a derived field back to its blank value, in both tiers
CLEAR_DERIVED = {
    name: f"""
WITH ltm AS (
    UPDATE cortex.notes SET {name} = :blank WHERE user_id = :user_id AND id = CAST(:id AS uuid)
)
UPDATE cortex.stm_notes SET {name} = :blank WHERE user_id = :user_id AND id = CAST(:id AS uuid)
"""
    for name in ("tags", "category", "context")
}
HISTORY_NOW = "SELECT evolution_history FROM cortex.notes WHERE user_id = :user_id AND id = CAST(:id AS uuid)"
# whether this transaction replaced the note's stored text: its history rows (written by
# cortex.record_note_history under the row lock, with the values each write replaced); none when
# it wrote the text already stored (or the note is only in short-term memory, which keeps no history)
TEXT_REPLACED_HERE = """
SELECT coalesce(bool_or(h.old ? 'content'), false) FROM cortex.note_history h
WHERE h.user_id = :user_id AND h.note_id = CAST(:id AS uuid) AND h.xmin = pg_current_xact_id()::xid
"""
# the keywords of the note's text, in both tiers
SET_KEYWORDS = """
WITH ltm AS (
    UPDATE cortex.notes SET keywords = CAST(:keywords AS text[]) WHERE user_id = :user_id AND id = CAST(:id AS uuid)
)
UPDATE cortex.stm_notes SET keywords = CAST(:keywords AS text[]) WHERE user_id = :user_id AND id = CAST(:id AS uuid)
"""
# the note's text now, and the values this transaction's last change of it replaced (its history
# row holds them as they were under its lock; none when it changed nothing, and a row of an
# earlier transaction is not this one's, as in TEXT_REPLACED_HERE)
CONTENT_AND_REPLACED = """
SELECT n.content,
       (SELECT h.old FROM cortex.note_history h
        WHERE h.user_id = n.user_id AND h.note_id = n.id AND h.xmin = pg_current_xact_id()::xid
        ORDER BY h.id DESC LIMIT 1) AS replaced
FROM cortex.notes n WHERE n.user_id = :user_id AND n.id = CAST(:id AS uuid)
"""


class _ChangedMeanwhile(Exception):
    """The note changed between its processing's read and its write (rolls the write back)."""


def derived_fields(history: list[Any]) -> list[str]:
    """The fields of :data:`DERIVED_FIELDS` whose last entry in ``history`` is processing's
    (``analysed``); a caller's (``given``) or a merge's (its tags are a union, with the merged
    note's, which may be a caller's) keeps them."""
    last: dict[str, str] = {}
    for entry in history:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind in ("analysed", "given"):
            names = entry.get("derived") if kind == "analysed" else entry.get("fields")
            for name in names if isinstance(names, list) else []:
                last[name] = kind
        elif kind in ("merge_augment", "merge_replace"):
            last.update(dict.fromkeys(DERIVED_FIELDS, "given"))
    return [name for name in DERIVED_FIELDS if last.get(name) == "analysed"]


NOTE_KWARGS = (
    "keywords",
    "tags",
    "context",
    "category",
    "links",
    "metadata",
    "importance",
    "id",
    "timestamp",
)


@dataclass
class MemoryNote:
    """A note as the Prem Cortex API shows it (``read`` returns one).

    ``timestamp`` and ``last_accessed`` are RFC 3339 strings in UTC; ``links`` maps a target
    note id to ``{"type", "strength", "reason"}``.
    """

    id: str
    content: str
    keywords: list[str] = field(default_factory=list)
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    retrieval_count: int = 0
    timestamp: str | None = None
    last_accessed: str | None = None
    context: str = DEFAULT_CONTEXT
    evolution_history: list[Any] = field(default_factory=list)
    category: str | None = None
    tags: list[str] = field(default_factory=list)
    user_id: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    memory_tier: str = "ltm"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def embedder_for_model(model_name: str, api_key: str | None = None, base_url: str | None = None) -> Embedder:
    """The embedder behind a Prem Cortex ``model_name``.

    ``all-MiniLM-L6-v2`` (default; offline), ``text-embedding-3-small|large`` / ``-ada-002``
    (OpenAI; ``api_key`` or ``OPENAI_API_KEY``), ``hashing`` (tests).

    Raises:
        ValidationError: an unknown model name.
    """
    name = model_name.strip()
    if name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm"):
        return MiniLMEmbedder()
    if name.startswith("text-embedding-"):
        return OpenAIEmbedder(
            name,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        )
    if name.startswith("hashing"):
        return HashingEmbedder()
    raise ValidationError("model_name", f"unknown embedding model {model_name!r}")


def _sync_engine(system: AgenticMemorySystem) -> Any:
    return system.store.engine


def _async_engine(system: AgenticMemorySystem) -> Any:
    return system._async_store().engine


class AgenticMemorySystem:
    """Prem Cortex's memory system, on cortex-pg.

    Args:
        model_name: embedding model (default the offline ``all-MiniLM-L6-v2``; the original
            defaults to ``text-embedding-3-small``, which is used when asked by name).
        llm_backend: ``openai`` or ``ollama`` (OpenAI-compatible endpoint at ``OLLAMA_HOST``).
        llm_model: chat model for analysis (and evolution decisions).
        stm_capacity: STM notes per (user_id, session_id).
        api_key: OpenAI key; falls back to ``OPENAI_API_KEY``; none = offline analysis.
        enable_smart_collections: search through the user's smart collections too (see
            :mod:`cortex_pg.collections.search`); with an LLM, the analysis suggests the
            category (the user's existing categories in the prompt), collections are described
            and queries enhanced by the LLM. Every LTM note gets a category either way (see
            :mod:`cortex_pg.collections.categorize`).
        enable_background_processing: deep processing after ``add_note`` returns (a worker
            thread) instead of before.
        database_url: external PostgreSQL; default ``DATABASE_URL`` or the embedded server.
        path: data directory of the embedded server.
        llm_base_url: OpenAI-compatible endpoint for the LLM (and OpenAI embeddings).
        embedder: an Embedder object, overriding ``model_name``.
        store: an open MemoryStore to use (its embedder wins); the system does not close it.

    Raises:
        ValidationError: unknown model or backend. SchemaError / EmbeddingDimensionError from the store.
    """

    def __init__(
        self,
        model_name: str = "all-MiniLM-L6-v2",
        llm_backend: str = "openai",
        llm_model: str = "gpt-4o-mini",
        stm_capacity: int = 20,
        api_key: str | None = None,
        enable_smart_collections: bool = False,
        enable_background_processing: bool = True,
        database_url: str | None = None,
        *,
        path: str | Path | None = None,
        llm_base_url: str | None = None,
        embedder: Embedder | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        if llm_backend not in ("openai", "ollama"):
            raise ValidationError("llm_backend", "must be 'openai' or 'ollama'")
        self.enable_smart_collections = enable_smart_collections
        self.enable_background_processing = enable_background_processing
        self._owns_store = store is None
        if store is not None:
            store.require_owner(type(self).__name__)
        if store is None:
            store = MemoryStore.open(
                database_url,
                path=path,
                embedder=embedder or embedder_for_model(model_name, api_key, llm_base_url),
                stm_capacity=stm_capacity,
                auto_migrate=True,
            )
        self.store = store
        self.llm = llm_from_settings(llm_backend, llm_model, api_key, llm_base_url)
        self.analyzer = ContentAnalyzer(self.llm)
        self._added: list[str] = []
        self._closed = False
        self._lock = threading.Lock()
        smart_llm = self.llm if enable_smart_collections else None
        self.worker = self.job_worker()
        self._enhancer = LLMEnhancer(smart_llm) if smart_llm is not None else None
        if enable_background_processing:
            self.worker.start()

    def job_worker(
        self, *, concurrency: int = 1, lock_timeout: float = 300.0, poll_interval: float = 2.0
    ) -> Worker:
        """A worker of the job queue that processes notes as this system does: for a job of
        kind ``prem`` (this API's notes), the analysis (fills the keywords, tags, category and
        context a caller left empty; LLM when configured) and then evolution; for an ``evolve``
        job (a plain store's note), evolution alone; and ``collection`` jobs. For a process that only runs
        workers over a database this API writes (``cortex-pg worker --prem``); a plain
        :class:`~cortex_pg.evolution.worker.Worker` does not take this API's jobs (kind ``prem``).

        Args:
            concurrency: worker threads, >= 1.
            lock_timeout: seconds after which a running job's lock counts as abandoned.
            poll_interval: seconds between polls when no NOTIFY arrives.
        """
        smart_llm = self.llm if self.enable_smart_collections else None
        return Worker(
            self.store,
            decider=self._decider(),
            preprocess=self._preprocess_job,
            describer=LLMDescriber(smart_llm) if smart_llm is not None else None,
            concurrency=concurrency,
            lock_timeout=lock_timeout,
            poll_interval=poll_interval,
            kinds=(*queue.NOTE_KINDS, queue.COLLECTION_KIND),
        )

    def _decider(self):  # noqa: ANN202
        """LLM evolution decisions when an LLM is configured; the offline heuristic's when the
        LLM fails or its answer is malformed (invalid JSON or schema, or a decision
        :func:`~cortex_pg.evolution.decide.parse_decision` refuses, e.g. a NUL in a tag)."""
        offline = heuristic_decider()
        if self.llm is None:
            return offline
        llm = self.llm

        def decide(note: NoteView, neighbours: Sequence[NoteView]) -> Mapping[str, Any]:
            try:
                return llm.complete_json(
                    prompts.evolution_messages(evolution_prompt(note, neighbours)),
                    prompts.EVOLUTION_SCHEMA,
                    "evolution_decision",
                    check=parse_decision,
                )
            except LLMError as exc:
                log.warning("evolution decision falls back to the offline heuristic: %s", exc)
                return offline(note, neighbours)

        return decide

    # ------------------------------------------------------------------ writes
    @retry_transient
    @steps.operation(engine=_sync_engine)
    def add_note(
        self,
        content: str,
        time: str | datetime | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> Plan[str]:
        """Store a note; returns its id. It is in STM (and LTM) when this returns.
        (:meth:`aadd_note` is the same call for asyncio.)

        Args:
            content: the text. time: RFC 3339 / ISO 8601 (naive = UTC), default now.
            user_id, session_id: tenant and session (None = ``"default"``).
            **kwargs: keywords, tags, context, category, links ({target_id: {type, strength,
                reason}}), metadata (dict), importance, id (a UUID, e.g. when importing),
                timestamp (alias of time); any other key is kept in metadata.

        Raises:
            ValidationError: bad input; nothing is stored.
        """
        if self._closed:
            raise ValidationError("system", "shutdown() was called; create a new AgenticMemorySystem")
        fields, metadata = self._split_kwargs(kwargs)
        if time is not None and fields.get("timestamp") is not None:
            raise ValidationError("timestamp", "give the note's time as time or timestamp, not both")
        when = time if time is not None else fields.pop("timestamp", None)
        fields.pop("timestamp", None)
        links = fields.pop("links", None)
        v.content(content)
        keywords = fields.get("keywords")
        nid = yield from plan_of(
            self.store.add,
            content,
            user_id=user_id,
            session_id=session_id,
            time=when,
            keywords=keywords if keywords else light_keywords(content),
            tags=fields.get("tags"),
            context=fields.get("context") or DEFAULT_CONTEXT,
            category=fields.get("category"),
            metadata=metadata,
            importance=fields.get("importance", 0.5),
            id=fields.get("id"),
            enqueue_evolution=queue.PREM_KIND,  # its worker runs the analysis first
            links=links or None,  # written in the note's transaction: bad links refuse the whole note
        )
        yield Blocking(self._schedule, (nid, v.scope_id(user_id, "user_id")))
        return nid

    # the same plan over async connections; the embedding and deep processing in a worker thread
    aadd_note = aretry_transient(steps.async_operation(add_note, engine=_async_engine))

    def _split_kwargs(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        fields = {k: val for k, val in kwargs.items() if k in NOTE_KWARGS and k != "metadata"}
        metadata = dict(v.metadata(kwargs.get("metadata")))
        for k, val in kwargs.items():
            if k not in NOTE_KWARGS:
                if k in ("user_id", "session_id"):
                    continue
                metadata[k] = val
        return fields, v.metadata(metadata)

    def _schedule(self, note_id: str, user_id: str) -> None:
        if self.enable_background_processing:
            with self._lock:
                self._added.append(note_id)
            return
        self.worker.process_available(note_ids=[note_id])
        # the category written by deep processing may have queued collection jobs of this user
        self.worker.process_available(kinds=[queue.COLLECTION_KIND], user_id=user_id)

    def _preprocess_job(self, job: queue.Job) -> None:
        # (an ``evolve`` job is a plain store's note, or a note of this API queued before its
        # jobs had their own kind: evolution alone)
        if job.kind == queue.PREM_KIND and job.note_id is not None:
            self._process_ltm(str(job.note_id))

    def _process_ltm(self, note_id: str) -> None:
        """Deep processing: fill keywords/context/tags/category the caller left empty.

        Written only over the note it analysed: when its text or one of the fields written
        changed meanwhile (an update while the analysis ran, an LLM call say), the analysis is
        dropped and the note as it is now analysed again (at most 3 times). Before, the old
        text's analysis landed on the new text, and the update's job was not queued beside the
        running one, so the new text was never processed."""
        for _attempt in range(3):
            try:
                self._process_once(note_id)
                return
            except _ChangedMeanwhile:
                continue
        log.warning("note %s kept changing during its processing; left for its next job", note_id)

    def _process_once(self, note_id: str) -> None:
        try:
            note = self.store.get(note_id)
        except NotFoundError:
            return
        if note.merged_into is not None or note.memory_tier != "ltm":  # merged away (its job ran
            # again after the merge), or only in short-term memory now (its long-term row cleared)
            return
        auto_keywords = not note.keywords or note.keywords == light_keywords(note.content)
        general = note.context in (None, "", DEFAULT_CONTEXT)
        llm_category = not note.category and self._enhancer is not None
        changes: dict[str, Any] = {}
        analysis: dict[str, Any] = {}
        if auto_keywords or general or llm_category:
            existing = ""
            if llm_category:
                with self.store.engine.connect() as conn:
                    existing = existing_categories_text(conn, note.user_id)
            analysis = self.analyzer.analyze(
                note.content, with_category=self.enable_smart_collections, existing_categories=existing
            )
        if auto_keywords and analysis.get("keywords"):
            changes["keywords"] = analysis["keywords"]
        if general and analysis.get("context") and analysis["context"] != DEFAULT_CONTEXT:
            changes["context"] = analysis["context"]
        if not note.tags and analysis.get("tags"):
            changes["tags"] = analysis["tags"]
        if not note.category:
            keywords = changes.get("keywords") or note.keywords
            changes["category"], _source = note_category(
                self.store, note.user_id, note.id, keywords, analysis.get("category")
            )
        if changes:
            # which fields processing derived, so that a new text has them derived again (see update)
            entry = json.dumps([{"type": "analysed", "derived": sorted(changes)}])
            read = {"content": note.content, "keywords": note.keywords, "tags": note.tags,
                    "context": note.context, "category": note.category}  # fmt: skip

            def mark(conn: Connection) -> None:
                params = {"user_id": note.user_id, "id": note.id}
                row = conn.execute(text(CONTENT_AND_REPLACED), params).first()
                if row is None:  # its long-term row went meanwhile: read again (and stop)
                    raise _ChangedMeanwhile
                now, before = row
                before = before or {}  # (the values this update replaced, as they were at its lock)
                if now != read["content"] or any(before[k] != read[k] for k in read if k in before):
                    raise _ChangedMeanwhile
                conn.execute(text(MARK_NOTE), {**params, "entry": entry})

            try:
                self.store.update(note_id, user_id=note.user_id, in_same_transaction=mark, **changes)
            except (NotFoundError, MergedNoteError):  # deleted or merged away meanwhile
                return

    def update(self, memory_id: str, **kwargs: Any) -> bool:
        """Change a note's fields (content is re-embedded; metadata merges).

        A ``user_id`` keyword restricts the update to that user's notes (as ``read``): a note of
        another user is not found there (False), and its existence is not revealed.

        Returns:
            True when the note exists (for that user, when given) and was updated, False when
            there is no such note (a memory_id that is not a note id too).

        Raises:
            ImmutableFieldError: session_id differs from the stored one.
            ValidationError: a bad value, user_id among them. MergedNoteError (a ValidationError): the note was
                merged into another one by evolution (update that one).
        """
        kwargs = dict(kwargs)
        owner = kwargs.pop("user_id", None)
        try:
            current = self.store.get(memory_id, user_id=owner)
        except NotFoundError:
            return False
        except ValidationError as exc:
            return _not_a_note_id(exc, False)
        links = kwargs.pop("links", None)
        if "timestamp" in kwargs:
            if kwargs.get("time") is not None and kwargs["timestamp"] is not None:
                raise ValidationError("timestamp", "give the note's time as time or timestamp, not both")
            stamp = kwargs.pop("timestamp")
            if stamp is not None:
                kwargs["time"] = stamp
        known = {"content", "keywords", "tags", "context", "category", "importance", "time", "session_id"}
        fields = {k: val for k, val in kwargs.items() if k in known}
        given = sorted(set(fields) & set(DERIVED_FIELDS))  # the caller's own from now on
        reprocess = "content" in fields and fields["content"] != current.content
        if reprocess and "keywords" not in fields:  # keywords describe the text: recompute them
            # (light now, deep in the job)
            fields["keywords"] = light_keywords(v.content(fields["content"]))
        # so do the tags, category and context processing derived from the old text (not those
        # the caller gave): cleared under the note's lock, below, and derived again by the job
        clear = [name for name in DERIVED_FIELDS if name not in fields] if reprocess else []
        extra = {k: val for k, val in kwargs.items() if k not in known and k != "metadata"}
        meta = {**v.metadata(kwargs.get("metadata")), **extra}
        if meta:
            fields["metadata"] = meta
        if links is not None:  # one transaction with the other fields: a bad link changes nothing
            fields["links"] = links
        import uuid as _uuid

        processed = [reprocess]  # whether the new text is processed, as decided under the lock

        def also(conn: Connection) -> None:  # with the new fields: a killed process left the new
            # text with no processing job
            params = {"user_id": current.user_id, "id": current.id}
            if given:
                entry = json.dumps([{"type": "given", "fields": given}])
                conn.execute(text(MARK_NOTE), {**params, "entry": entry})
            # the text read before equals this one, but another update changed the stored text
            # meanwhile: this write replaced it after all, so the new text is processed too
            late = (
                not reprocess
                and "content" in fields
                and conn.execute(text(TEXT_REPLACED_HERE), params).scalar_one()
            )
            if late and "keywords" not in fields:
                keywords = light_keywords(v.content(fields["content"]))
                conn.execute(text(SET_KEYWORDS), {**params, "keywords": keywords})
            clearing = [name for name in DERIVED_FIELDS if name not in fields] if late else clear
            # the history as it is under the lock (a caller's update committed meanwhile counts);
            # none for a note only in short-term memory, which processing does not analyse (its
            # job needs the long-term row): nothing of it was derived, nothing is queued
            ltm = conn.execute(text(HISTORY_NOW), params).first()
            for name in derived_fields(ltm.evolution_history) if ltm is not None and clearing else []:
                if name in clearing:
                    conn.execute(text(CLEAR_DERIVED[name]), {**params, "blank": DERIVED_FIELDS[name]})
            processed[0] = (reprocess or late) and ltm is not None
            if processed[0]:
                queue.enqueue(conn, [current.user_id], [_uuid.UUID(current.id)], kind=queue.PREM_KIND)

        if fields:
            try:
                self.store.update(
                    memory_id,
                    user_id=current.user_id,
                    in_same_transaction=also if "content" in fields or given else None,
                    **fields,
                )
            except NotFoundError:  # deleted since it was read
                return False
        if processed[0]:
            self._schedule(current.id, current.user_id)
        return True

    def delete(self, memory_id: str, user_id: str | None = None) -> bool:
        """Delete a note from both tiers; with ``user_id``, only a note of that user (as
        ``read``). Returns False when there was none (a memory_id that is not a note id too).

        Raises:
            ValidationError: a bad user_id.
        """
        try:
            return self.store.delete(memory_id, user_id=user_id)
        except ValidationError as exc:
            return _not_a_note_id(exc, False)

    def clear_stm(self, user_id: str | None = None, session_id: str | None = None) -> int:
        """Empty the STM of a user (one session, or all of the user's sessions when None).

        Unlike the original, no arguments clear only the ``"default"`` user, never everyone.
        Returns the number of notes removed.
        """
        return self.store.delete_where(user_id=user_id, session_id=session_id, memory_source="stm")

    def clear_ltm(self, user_id: str | None = None, session_id: str | None = None) -> int:
        """Empty the LTM of a user (one session, or all sessions). Returns the number removed."""
        return self.store.delete_where(user_id=user_id, session_id=session_id, memory_source="ltm")

    # ------------------------------------------------------------------ reads
    def read(
        self, memory_id: str, user_id: str | None = None, session_id: str | None = None
    ) -> MemoryNote | None:
        """The note with that id (counted as an access), or None; restricted to the user/session when given.

        A memory_id that is not a note id is no note (None), as in the original.

        Raises:
            ValidationError: a bad user_id or session_id.
        """
        if session_id is not None:
            session_id = v.scope_id(session_id, "session_id")
        try:
            if session_id is not None:  # another session's note is not read, nor counted as read
                found = self.store.get(memory_id, user_id=user_id)
                if found.session_id != session_id:
                    return None
            note = self.store.get(memory_id, user_id=user_id, touch=True)
        except NotFoundError:
            return None
        except ValidationError as exc:
            return _not_a_note_id(exc, None)
        links = self._links([note.id], note.user_id)
        return _memory_note(note, links.get(note.id, {}), access_bump=1)

    @retry_transient
    @steps.operation(engine=_sync_engine)
    def search(
        self,
        query: str,
        limit: int = 5,
        memory_source: str = "all",
        where_filter: dict[str, Any] | None = None,
        apply_postprocessing: bool = True,
        context: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        temporal_weight: float | None = None,
        date_range: str | dict[str, Any] | None = None,
        now: datetime | str | None = None,
        include_links: bool = False,
    ) -> Plan[list[dict[str, Any]]]:
        """Search STM and/or LTM of one user; returns result dicts, best first.
        (:meth:`asearch` is the same call for asyncio.)

        Args:
            query: the question. limit: results (> 0).
            memory_source: ``all`` (deduplicated, the STM copy wins), ``stm`` or ``ltm``.
            where_filter: Chroma-style filter (see :meth:`MemoryStore.search`), same on both tiers.
            apply_postprocessing: apply ``context`` re-ranking when a context is given.
            context: ``score = 0.3 * score + 0.7 * cos(context, note)``.
            user_id, session_id: scope (None user = ``"default"``; None session = all sessions).
            temporal_weight: w in [0, 1]: ``score = (1 - w) * relevance + w * exp(-days_ago / 7)``;
                None (the default) = auto: 0.7 with a temporal keyword in the query (see
                :func:`cortex_pg.temporal.has_temporal_keyword`) or a date_range, else 0.0;
                an explicit 0.0 is pure relevance.
            date_range: see :func:`cortex_pg.temporal.parse_date_range`; applied to both tiers, in SQL.
            now: the instant "today", ages and relative ranges resolve against (default: now).
            include_links: append the notes the results link to (at most ``limit`` more), with
                ``is_linked: True``, ``relationship_type``, ``relationship_strength``,
                ``relationship_reason`` (the shape of the original's CLI wrapper).

        Returns:
            Dicts with id, content, keywords, tags, context, category, timestamp, last_accessed,
            links, retrieval_count, evolution_history, user_id, session_id, metadata, score,
            distance, memory_tier, semantic_score, recency_score, and temporal_weighted /
            context_score when they apply; with smart collections also search_strategy,
            collection_name, collection_similarity, query_enhanced and composite_score (the
            ranking key). Never the embedding.

        Warns:
            STMLostWarning: (``memory_source`` ``all`` or ``stm``) the user's short-term memory in
                the session(s) searched was emptied by the database server's crash recovery
                and nothing has been written to it since (once per system and loss; also
                logged; see :mod:`cortex_pg.store.stm_loss`).

        Raises:
            ValidationError: bad arguments, an unparseable date_range or filter.
        """
        query = v.query(query)  # (before the temporal keywords are read from it)
        date_from = date_to = None
        if date_range is not None and date_range != "":  # "" is no window, as the original's falsy test
            date_from, date_to = parse_date_range(date_range, now=now)
        weight = auto_temporal_weight(query, date_range) if temporal_weight is None else temporal_weight
        kwargs = dict(
            user_id=user_id,
            session_id=session_id,
            limit=limit,
            temporal_weight=weight,
            date_from=date_from,
            date_to=date_to,
            now=now,
            memory_source=memory_source,
            where_filter=where_filter,
            context=context if apply_postprocessing else None,
            include_links=include_links,
        )
        if self.enable_smart_collections:  # several searches and LLM calls: run as one blocking call
            search = partial(search_with_collections, self.store, enhancer=self._enhancer)
            results = yield Blocking(lambda: search(query, **kwargs))
        else:
            results = yield from plan_of(self.store.search, query, **kwargs)
        if memory_source in ("all", "stm"):  # an STM emptied by a crash is said, not silent
            yield Blocking(report_unwritten, (self.store, v.scope_id(user_id, "user_id"), session_id))
        links = (
            (yield from self._links_of([r.id for r in results], results[0].note.user_id)) if results else {}
        )
        return [_result_dict(r, links.get(r.id, {}), weight) for r in results]

    search_memory = search
    # the same plan over an async connection; the query's embedding in a worker thread
    asearch = asearch_memory = aretry_transient(steps.async_operation(search, engine=_async_engine))

    def search_agentic(
        self, query: str, limit: int = 5, user_id: str | None = None, session_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Alias of :meth:`search` (backward compatibility of the original)."""
        return self.search(query, limit=limit, user_id=user_id, session_id=session_id)

    def search_filtered(
        self,
        query: str,
        limit: int = 5,
        where_filter: dict[str, Any] | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`search` with a where_filter."""
        return self.search(
            query, limit=limit, where_filter=where_filter, user_id=user_id, session_id=session_id
        )

    def find_related_memories(
        self, query: str, k: int = 5, user_id: str | None = None, session_id: str | None = None
    ) -> tuple[str, list[str]]:
        """The k most related LTM notes as the original's text block and their ids.

        Raises:
            ValidationError: a bad query, ``k`` not a positive whole number (field ``k``), or a
                bad user_id / session_id.
        """
        results = self.store.search(
            query,
            user_id=user_id,
            session_id=session_id,
            limit=v.limit(k, "k"),
            memory_source="ltm",
            touch=False,
        )
        lines = [
            f"memory index:{i}\tmemory id:{r.id}\ttimestamp:{r.created_at.isoformat()}\t"
            f"memory content: {r.content}\tmemory context: {r.note.context}\t"
            f"memory keywords: {r.note.keywords}\tmemory tags: {r.note.tags}\n"
            for i, r in enumerate(results)
        ]
        return "".join(lines), [r.id for r in results]

    def analyze_content(self, content: str) -> dict[str, Any]:
        """Keywords, context and tags (and category with smart collections) for ``content``."""
        v.content(content)
        result = self.analyzer.analyze(content, with_category=self.enable_smart_collections)
        result.pop("source", None)
        return result

    def shutdown(self) -> None:
        """Stop the worker threads (after their current job) and release the connections.

        Jobs not yet run stay queued in the database for the next worker.
        """
        if self._closed:
            return
        self._closed = True
        if self.enable_background_processing:
            self.worker.stop()
        if self._owns_store:
            self.store.close()

    def wait(self, timeout: float = 120.0) -> None:
        """Block until the jobs of notes this instance added have run (background mode).

        Raises:
            TimeoutError: jobs are still queued or running after ``timeout`` seconds.
        """
        with self._lock:
            ids = list(self._added)
        deadline = _time.monotonic() + timeout
        while ids:
            with self.store.engine.connect() as conn:
                left = conn.execute(
                    text(
                        "SELECT count(*) FROM cortex.evolution_jobs WHERE note_id = ANY(CAST(:ids AS uuid[])) "
                        "AND status IN ('queued', 'running')"
                    ),
                    {"ids": ids},
                ).scalar_one()
            if not left:
                break
            if _time.monotonic() > deadline:
                raise TimeoutError(f"{left} processing job(s) still pending after {timeout} s")
            _time.sleep(0.05)
        with self._lock:
            self._added = [i for i in self._added if i not in ids]

    def _async_store(self) -> Any:
        """The async twin of ``self.store`` for the running event loop."""
        from cortex_pg.store.async_store import loop_store

        if self._closed:
            raise ValidationError("system", "shutdown() was called; create a new AgenticMemorySystem")
        return loop_store(self, self.store)

    async def ashutdown(self) -> None:
        """:meth:`shutdown`, closing the async connections of :meth:`aadd_note` / :meth:`asearch` too."""
        cached = self.__dict__.pop("_loop_store", None)
        if cached is not None:
            await cached[1].close()
        self.shutdown()

    # ------------------------------------------------------------------ links
    def _links(self, ids: list[str], user_id: str) -> dict[str, dict[str, dict[str, Any]]]:
        return steps.run(self.store.engine, self._links_of(ids, user_id))

    def _links_of(self, ids: list[str], user_id: str) -> Plan[dict[str, dict[str, dict[str, Any]]]]:
        if not ids:
            return {}
        rows = yield statement(
            "SELECT source_id, target_id, type, strength, reason FROM cortex.note_links "
            "WHERE user_id = :u AND source_id = ANY(CAST(:ids AS uuid[]))",
            {"u": user_id, "ids": ids},
        )
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(str(r.source_id), {})[str(r.target_id)] = {
                "type": r.type,
                "strength": float(r.strength),
                "reason": r.reason,
            }
        return out


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def _memory_note(note: Note, links: dict[str, Any], access_bump: int = 0) -> MemoryNote:
    return MemoryNote(
        id=note.id,
        content=note.content,
        keywords=note.keywords,
        links=links,
        retrieval_count=note.access_count + access_bump,
        timestamp=_iso(note.created_at),
        last_accessed=_iso(note.last_accessed_at),
        context=note.context or DEFAULT_CONTEXT,
        evolution_history=note.evolution_history,
        category=note.category,
        tags=note.tags,
        user_id=note.user_id,
        session_id=note.session_id,
        metadata=note.metadata,
        memory_tier=note.memory_tier,
    )


def _result_dict(r: SearchResult, links: dict[str, Any], weight: float) -> dict[str, Any]:
    out = _memory_note(r.note, links, access_bump=1).to_dict()
    out.update(
        score=r.score,
        distance=r.distance,
        semantic_score=r.semantic_score,
        recency_score=r.recency_score,
        relevance_score=r.relevance_score,
        text_score=r.text_score,
    )
    if weight > 0:
        out["temporal_weighted"] = True
    if r.context_score is not None:
        out["context_score"] = r.context_score
    link_keys = (
        "search_strategy",
        "collection_name",
        "collection_similarity",
        "query_enhanced",
        "composite_score",
        "is_linked",
        "linked_from",
        "relationship_type",
        "relationship_strength",
        "relationship_reason",
    )
    out.update({k: val for k, val in r.to_dict().items() if k in link_keys})  # the shape SearchResult gives
    return out


def _not_a_note_id(exc: ValidationError, missing: Any) -> Any:
    """``missing`` when ``exc`` says the memory_id is not a note id (the original API finds no
    such note: None or False); any other bad argument (user_id, session_id) is re-raised."""
    if exc.field != "id":
        raise exc
    return missing
