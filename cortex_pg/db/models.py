"""SQLAlchemy models of the cortex schema (the source Alembic's drift test compares against).

All objects live in the ``cortex`` schema so the store can share an application's database.
Every tenant table carries ``user_id`` first in its primary key and in every foreign key
(Citus-ready: distribution column in every PK/FK). Timestamps are ``timestamptz``, stored UTC.
Objects created by hand-written SQL (functions, triggers, per-model HNSW indexes) are not
here; they come from ``cortex_pg/sql`` through the migrations.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Computed,
    ForeignKeyConstraint,
    Identity,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import REAL, TIMESTAMP, Boolean, Integer

from cortex_pg.config import SCHEMA

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# cortex.note_tsvector: the whole content's tsvector, or the longest prefix whose tsvector fits
# PostgreSQL's 1 MB limit (functions/note_tsvector/v1.sql, revision 0012)
TSVECTOR_EXPR = "cortex.note_tsvector(content)"


class Base(DeclarativeBase):
    metadata = MetaData(schema=SCHEMA, naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: TIMESTAMP(timezone=True),
        dict[str, Any]: JSONB,
        list[str]: ARRAY(Text),
        str: Text,
        uuid.UUID: UUID(as_uuid=True),
        float: REAL,
        int: Integer,
        bool: Boolean,
    }


class _NoteFields:
    """Columns shared by long-term ``notes`` and short-term ``stm_notes``."""

    id: Mapped[uuid.UUID] = mapped_column(server_default=text("gen_random_uuid()"))
    user_id: Mapped[str] = mapped_column(server_default=text("'default'"))
    session_id: Mapped[str] = mapped_column(server_default=text("'default'"))
    content: Mapped[str]
    content_hash: Mapped[str] = mapped_column(server_default=text("''"))
    keywords: Mapped[list[str]] = mapped_column(server_default=text("'{}'"))
    tags: Mapped[list[str]] = mapped_column(server_default=text("'{}'"))
    context: Mapped[str | None]
    category: Mapped[str | None]
    memory_type: Mapped[str] = mapped_column(server_default=text("'note'"))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", server_default=text("'{}'::jsonb"))
    importance: Mapped[float] = mapped_column(server_default=text("0.5"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    last_accessed_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    access_count: Mapped[int] = mapped_column(server_default=text("0"))
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed(TSVECTOR_EXPR, persisted=True))


def _note_checks(table: str) -> tuple[Any, ...]:
    return (
        PrimaryKeyConstraint("user_id", "id"),
        CheckConstraint("char_length(user_id) BETWEEN 1 AND 255", name="user_id_length"),
        CheckConstraint("char_length(session_id) BETWEEN 1 AND 255", name="session_id_length"),
        CheckConstraint("char_length(btrim(content)) > 0", name="content_not_blank"),
        CheckConstraint("importance >= 0 AND importance <= 1", name="importance_range"),
    )


class NoteId(Base):
    """The registry of note ids: an id is registered to one tenant, for ever (see
    ``note_ids/v1.sql``). Global, not a tenant table: with Citus a reference table."""

    __tablename__ = "note_ids"

    id: Mapped[uuid.UUID]
    user_id: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (PrimaryKeyConstraint("id"), UniqueConstraint("user_id", "id"))


class Note(_NoteFields, Base):
    """A long-term memory note (LTM)."""

    __tablename__ = "notes"

    merged_into: Mapped[uuid.UUID | None] = mapped_column(sort_order=100)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=False), sort_order=102)
    evolution_history: Mapped[list[Any]] = mapped_column(
        JSONB, server_default=text("'[]'::jsonb"), sort_order=101
    )

    __table_args__ = (
        *_note_checks("notes"),
        ForeignKeyConstraint(["user_id", "id"], ["note_ids.user_id", "note_ids.id"]),
        Index("ix_notes_session_order", "user_id", "session_id", "created_at", "seq"),
        Index("ix_notes_id", "id"),
        Index("ix_notes_user_created", "user_id", "created_at"),
        Index(
            "uq_notes_content_hash",
            "user_id",
            "session_id",
            "content_hash",
            unique=True,
            postgresql_where=text("merged_into IS NULL"),
        ),
        # the merged notes' hashes (few), for the duplicate check's other half (Alembic 0033)
        Index(
            "ix_notes_merged_content_hash",
            "user_id",
            "session_id",
            "content_hash",
            postgresql_where=text("merged_into IS NOT NULL"),
        ),
        Index(
            "ix_notes_metadata",
            "metadata",
            postgresql_using="gin",
            postgresql_ops={"metadata": "jsonb_path_ops"},
        ),
    )


class StmNote(_NoteFields, Base):
    """A short-term memory note: an UNLOGGED table (emptied after a crash, no WAL).

    Capacity per (user_id, session_id) is enforced in the insert's transaction, evicting the
    least recently accessed rows (``last_accessed_at``, then insertion order ``seq``).
    """

    __tablename__ = "stm_notes"

    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=False), sort_order=100)
    model: Mapped[str | None] = mapped_column(sort_order=101)
    embedding: Mapped[Any] = mapped_column(Vector(), nullable=True, sort_order=102)

    __table_args__ = (
        *_note_checks("stm_notes"),
        Index("ix_stm_notes_tsv", "tsv", postgresql_using="gin"),
        ForeignKeyConstraint(["user_id", "id"], ["note_ids.user_id", "note_ids.id"]),
        Index("ix_stm_notes_lru", "user_id", "session_id", "last_accessed_at", "seq"),
        Index("ix_stm_notes_id", "id"),
        Index("uq_stm_notes_content_hash", "user_id", "session_id", "content_hash", unique=True),
        {"prefixes": ["UNLOGGED"]},
    )


class Embedding(Base):
    """One embedding of one note by one model; keyed (user_id, note_id, model, kind, window_no).

    ``kind`` ``text``: window ``window_no`` of the note's own text (0 when it fits the model's
    window); ``context``: the note read with the conversation before it. Search scores a note
    by its best embedding. The column is an untyped ``vector``; each registered model gets a
    partial HNSW index on ``(embedding::vector(dim)) vector_cosine_ops WHERE model = '<name>'
    AND kind = 'text'`` (``halfvec`` above 2,000 dimensions; see
    ``cortex.register_embedding_model``). The table is hash-partitioned by ``user_id`` into 32
    partitions (Alembic 0013, schema ``cortex_partitions``), so a tenant's vector search walks
    one partition's part of the index.
    """

    __tablename__ = "embeddings"

    user_id: Mapped[str]
    note_id: Mapped[uuid.UUID]
    model: Mapped[str]
    session_id: Mapped[str] = mapped_column(server_default=text("'default'"))
    embedding: Mapped[Any] = mapped_column(Vector())
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    kind: Mapped[str] = mapped_column(server_default=text("'text'"))
    window_no: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "note_id", "model", "kind", "window_no"),
        CheckConstraint("kind IN ('text', 'context')", name="kind_known"),
        CheckConstraint("window_no >= 0", name="window_no_range"),
        ForeignKeyConstraint(["user_id", "note_id"], ["notes.user_id", "notes.id"], ondelete="CASCADE"),
        Index("ix_embeddings_model_user", "model", "user_id"),
        # the later windows of long notes only: search_notes v7 asks it whether a tenant has any
        Index("ix_embeddings_windows", "user_id", "model", postgresql_where=text("window_no > 0")),
    )


class EmbeddingModel(Base):
    """Registry of embedding models: name -> dimension; exactly one is active for search.

    Global (not a tenant table): it describes the store, not a user's data.
    """

    __tablename__ = "embedding_models"

    model: Mapped[str] = mapped_column(primary_key=True)
    dim: Mapped[int]
    active: Mapped[bool] = mapped_column(server_default=text("false"))
    index_name: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        CheckConstraint("dim BETWEEN 1 AND 4000", name="dim_range"),
        Index("uq_embedding_models_active", "active", unique=True, postgresql_where=text("active")),
    )


class NoteLink(Base):
    """A directed, typed, weighted link between two notes of one user."""

    __tablename__ = "note_links"

    user_id: Mapped[str]
    source_id: Mapped[uuid.UUID]
    target_id: Mapped[uuid.UUID]
    session_id: Mapped[str] = mapped_column(server_default=text("'default'"))
    type: Mapped[str] = mapped_column(server_default=text("'related'"))
    strength: Mapped[float] = mapped_column(server_default=text("0.5"))
    reason: Mapped[str | None]
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "source_id", "target_id"),
        ForeignKeyConstraint(["user_id", "source_id"], ["notes.user_id", "notes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["user_id", "target_id"], ["notes.user_id", "notes.id"], ondelete="CASCADE"),
        CheckConstraint("source_id <> target_id", name="no_self_link"),
        CheckConstraint("strength >= 0 AND strength <= 1", name="strength_range"),
        Index("ix_note_links_target", "user_id", "target_id"),
    )


class NoteHistory(Base):
    """Every insert, update, merge and delete of a note, with old and new values of changed fields.

    Written by triggers (``cortex.record_note_history_inserts`` once per INSERT statement,
    ``cortex.record_note_history`` per updated or deleted row), so changes made from plain SQL
    are recorded too. ``op`` is insert/update/delete, or the reason set with
    ``SET LOCAL cortex.change_reason`` (e.g. ``merge``).
    """

    __tablename__ = "note_history"

    user_id: Mapped[str]
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    note_id: Mapped[uuid.UUID]
    session_id: Mapped[str]
    op: Mapped[str]
    old: Mapped[dict[str, Any] | None]
    new: Mapped[dict[str, Any] | None]
    changed_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "id"),
        Index("ix_note_history_note", "user_id", "note_id", "changed_at"),
    )


ENTITY_KINDS = ("person", "organization", "concept", "other")


class Entity(Base):
    """A named thing of one user's memory (person, organization, concept, other).

    ``normalized_name`` is ``cortex.normalize_entity_name(name)`` (case- and whitespace-folded),
    unique per user; ``name`` keeps the first spelling seen. ``frequency`` is the number of
    notes that mention the entity (rows of ``entity_mentions``); ``contexts`` the snippets
    (<= 100 characters) of the last 10 mentions, oldest first. Counters change only in SQL
    (``INSERT ... ON CONFLICT DO UPDATE``; decrements by the note-delete trigger).
    """

    __tablename__ = "entities"

    user_id: Mapped[str]
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    name: Mapped[str]
    normalized_name: Mapped[str]
    kind: Mapped[str] = mapped_column(server_default=text("'other'"))
    first_seen: Mapped[datetime] = mapped_column(server_default=text("now()"))
    last_seen: Mapped[datetime] = mapped_column(server_default=text("now()"))
    frequency: Mapped[int] = mapped_column(server_default=text("0"))
    contexts: Mapped[list[str]] = mapped_column(server_default=text("'{}'"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "id"),
        UniqueConstraint("user_id", "normalized_name"),
        CheckConstraint("char_length(btrim(name)) BETWEEN 1 AND 200", name="name_length"),
        CheckConstraint("kind IN ('person', 'organization', 'concept', 'other')", name="kind_known"),
        CheckConstraint("frequency >= 0", name="frequency_non_negative"),
        CheckConstraint("cardinality(contexts) <= 10", name="contexts_at_most_10"),
    )


class EntityMention(Base):
    """Entity x note: the note (LTM or STM id; no foreign key, the tiers share ids) mentions it.

    ``char_offset`` is the character offset of the first mention in the note's content, when
    known; ``snippet`` the text around it (<= 100 characters); ``mentioned_at`` the note's time.
    """

    __tablename__ = "entity_mentions"

    user_id: Mapped[str]
    entity_id: Mapped[int] = mapped_column(BigInteger)
    note_id: Mapped[uuid.UUID]
    char_offset: Mapped[int | None]
    snippet: Mapped[str] = mapped_column(server_default=text("''"))
    mentioned_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "entity_id", "note_id"),
        ForeignKeyConstraint(
            ["user_id", "entity_id"], ["entities.user_id", "entities.id"], ondelete="CASCADE"
        ),
        CheckConstraint("char_length(snippet) <= 100", name="snippet_length"),
        Index("ix_entity_mentions_note", "user_id", "note_id"),
    )


class Relationship(Base):
    """A fact ``source --relation--> target`` between two entities, valid in [valid_from, valid_to).

    Bi-temporal in spirit: ``valid_from``/``valid_to`` is the time the fact held (from the
    notes' own times), ``created_at`` when it was recorded. A single-valued relation
    (``works_at``, ``lives_in``, ...) contradicted by a newer fact gets ``valid_to`` set and is
    kept. At most one open row (``valid_to IS NULL``) per (user, source, relation, target);
    ``weight`` counts the assertions of that row, ``note_ids`` the notes that asserted it
    (``source_note_id`` the first of them).
    """

    __tablename__ = "relationships"

    user_id: Mapped[str]
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    source_id: Mapped[int] = mapped_column(BigInteger)
    relation: Mapped[str]
    target_id: Mapped[int] = mapped_column(BigInteger)
    weight: Mapped[float] = mapped_column(server_default=text("1"))
    valid_from: Mapped[datetime] = mapped_column(server_default=text("now()"))
    valid_to: Mapped[datetime | None]
    source_note_id: Mapped[uuid.UUID | None]
    note_ids: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)), server_default=text("'{}'"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "id"),
        ForeignKeyConstraint(
            ["user_id", "source_id"], ["entities.user_id", "entities.id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(
            ["user_id", "target_id"], ["entities.user_id", "entities.id"], ondelete="CASCADE"
        ),
        CheckConstraint("relation ~ '^[a-z][a-z0-9_]{0,63}$'", name="relation_format"),
        CheckConstraint("valid_to IS NULL OR valid_to >= valid_from", name="valid_interval"),
        Index(
            "uq_relationships_open",
            "user_id",
            "source_id",
            "relation",
            "target_id",
            unique=True,
            postgresql_where=text("valid_to IS NULL"),
        ),
        Index("ix_relationships_target", "user_id", "target_id"),
        # open or closed: the cascade of an entity's delete (Alembic 0033)
        Index("ix_relationships_source", "user_id", "source_id"),
        Index("ix_relationships_note_ids", "note_ids", postgresql_using="gin"),
    )


JOB_STATUSES = ("queued", "running", "done", "failed")


class EvolutionJob(Base):
    """A durable evolution job: one note to compare with its neighbours (``kind = 'evolve'``).

    Lifecycle: ``queued`` -> ``running`` (taken with ``FOR UPDATE SKIP LOCKED``; ``locked_by``,
    ``locked_at`` set, ``attempts`` + 1) -> ``done`` (in the same transaction as its effects)
    or back to ``queued`` with ``run_after`` pushed out (backoff) or ``failed`` with ``error``
    after ``max_attempts``. A ``running`` job whose ``locked_at`` is older than the lock
    timeout belongs to a dead worker and is taken again. At most one queued or running job
    per (user_id, note_id, kind): an enqueue that finds the job running sets ``run_again``,
    and the job's end puts it back to ``queued`` (``max_attempts`` grows by the attempts used)
    instead of ``done`` or ``failed``, so a change made while it ran is handled too.
    """

    __tablename__ = "evolution_jobs"

    user_id: Mapped[str]
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False))
    note_id: Mapped[uuid.UUID | None]
    kind: Mapped[str] = mapped_column(server_default=text("'evolve'"))
    status: Mapped[str] = mapped_column(server_default=text("'queued'"))
    attempts: Mapped[int] = mapped_column(server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(server_default=text("5"))
    run_after: Mapped[datetime] = mapped_column(server_default=text("now()"))
    locked_by: Mapped[str | None]
    locked_at: Mapped[datetime | None]
    error: Mapped[str | None]
    result: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    collection_path: Mapped[str | None]
    run_again: Mapped[bool] = mapped_column(server_default=text("false"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "id"),
        ForeignKeyConstraint(["user_id", "note_id"], ["notes.user_id", "notes.id"], ondelete="CASCADE"),
        CheckConstraint("status IN ('queued', 'running', 'done', 'failed')", name="status_known"),
        CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="attempts_range"),
        CheckConstraint("num_nonnulls(note_id, collection_path) = 1", name="one_target"),
        Index("ix_evolution_jobs_ready", "run_after", "id", postgresql_where=text("status = 'queued'")),
        Index("ix_evolution_jobs_locked", "locked_at", postgresql_where=text("status = 'running'")),
        Index(
            "uq_evolution_jobs_active",
            "user_id",
            "note_id",
            "kind",
            unique=True,
            postgresql_where=text("status IN ('queued', 'running')"),
        ),
        Index("ix_evolution_jobs_status", "status"),
        # a note's jobs of any status: the cascade of a note's delete (Alembic 0033)
        Index("ix_evolution_jobs_note", "user_id", "note_id"),
        Index(
            "uq_evolution_jobs_collection_active",
            "user_id",
            "collection_path",
            "kind",
            unique=True,
            postgresql_where=text("status IN ('queued', 'running') AND collection_path IS NOT NULL"),
        ),
    )


class CategoryCount(Base):
    """How many current long-term notes of a user lie under a category prefix (``work`` counts
    ``work`` and ``work.*`` by whole segments). Kept exact by triggers on ``notes``
    (``collections/v1.sql``); a row that drops to 0 is deleted."""

    __tablename__ = "category_counts"

    user_id: Mapped[str]
    path: Mapped[str]
    note_count: Mapped[int] = mapped_column(server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (PrimaryKeyConstraint("user_id", "path"),)


class SpeakerCount(Base):
    """How many current long-term notes of a user a speaker said (``metadata.speaker``, read as
    ``cortex.speaker_words``: lower case, other characters as single spaces). Kept exact by
    triggers on ``notes`` (``speakers/v1.sql``); a row that drops to 0 is deleted. Search reads
    it for the speakers a query names (search_notes v14)."""

    __tablename__ = "speaker_counts"

    user_id: Mapped[str]
    words: Mapped[str]
    note_count: Mapped[int] = mapped_column(server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (PrimaryKeyConstraint("user_id", "words"),)


class Collection(Base):
    """A smart collection: a category prefix with enough notes (see ``collections/v1.sql``).

    ``centroid`` is ``avg()`` of the members' text embeddings of ``model`` (untyped ``vector``);
    ``description`` and ``query_helper`` (space-separated keywords appended to queries) come
    from one LLM call or offline from the members' top keywords (``source``).
    """

    __tablename__ = "collections"

    user_id: Mapped[str]
    path: Mapped[str]
    model: Mapped[str]
    description: Mapped[str] = mapped_column(server_default=text("''"))
    query_helper: Mapped[str] = mapped_column(server_default=text("''"))
    centroid: Mapped[Any | None] = mapped_column(Vector())
    memory_count: Mapped[int] = mapped_column(server_default=text("0"))
    source: Mapped[str] = mapped_column(server_default=text("'offline'"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    refreshed_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "path"),
        CheckConstraint("memory_count >= 0", name="memory_count_range"),
    )


class ContextFrame(Base):
    """One frame of a calute context stack: (user_id, scope) names the stack, ``depth`` the
    position (1 = bottom). Pushed and popped only by ``cortex.context_push`` /
    ``cortex.context_pop``, which serialise on an advisory lock per stack, so depths stay
    1..n without gaps and two concurrent pops never return the same frame.
    """

    __tablename__ = "context_frames"

    user_id: Mapped[str]
    scope: Mapped[str]
    depth: Mapped[int]
    type: Mapped[str]
    data: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    pushed_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "scope", "depth"),
        CheckConstraint("depth >= 1", name="depth_positive"),
        CheckConstraint("char_length(scope) BETWEEN 1 AND 255", name="scope_length"),
    )


class UserPreference(Base):
    """A user's preferences (calute ``UserMemory``): only the keys the user set; defaults are
    applied on read. Updates merge (``preferences || patch``) in one ``INSERT ... ON CONFLICT``.
    """

    __tablename__ = "user_preferences"

    user_id: Mapped[str]
    preferences: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))

    __table_args__ = (
        PrimaryKeyConstraint("user_id"),
        CheckConstraint("jsonb_typeof(preferences) = 'object'", name="preferences_object"),
    )


class Bm25Corpus(Base):
    """A tenant's BM25 corpus statistics: current LTM notes and their total length (sum of
    distinct lexemes); kept by the triggers of ``bm25_index/v1.sql``."""

    __tablename__ = "bm25_corpus"

    user_id: Mapped[str]
    doc_count: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    total_length: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))

    __table_args__ = (PrimaryKeyConstraint("user_id"),)


class Bm25Term(Base):
    """Document frequency of a lexeme among a tenant's current LTM notes (trigger-kept)."""

    __tablename__ = "bm25_terms"

    user_id: Mapped[str]
    lexeme: Mapped[str]
    df: Mapped[int]

    __table_args__ = (PrimaryKeyConstraint("user_id", "lexeme"),)


class Bm25Posting(Base):
    """One (note, lexeme) of a tenant's inverted index: tf, dl and the impact that orders a
    term's postings for candidate generation (trigger-kept)."""

    __tablename__ = "bm25_postings"

    user_id: Mapped[str]
    note_id: Mapped[uuid.UUID]
    lexeme: Mapped[str]
    tf: Mapped[int]
    dl: Mapped[int]
    impact: Mapped[float]

    __table_args__ = (
        PrimaryKeyConstraint("user_id", "note_id", "lexeme"),
        Index("ix_bm25_postings_impact", "user_id", "lexeme", text("impact DESC"), "note_id"),
    )


class ApiKey(Base):
    """A bearer key of the HTTP service, bound to one ``user_id``: only its SHA-256 (hex) is
    stored. Global, not a tenant table (a key is looked up before its tenant is known; with
    Citus a reference table); RLS on with no policy, read through ``cortex.api_key_user``."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(server_default=text("gen_random_uuid()"))
    user_id: Mapped[str]
    name: Mapped[str | None]
    prefix: Mapped[str]
    key_hash: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    revoked_at: Mapped[datetime | None]

    __table_args__ = (
        PrimaryKeyConstraint("id"),
        UniqueConstraint("key_hash"),
        CheckConstraint("key_hash ~ '^[0-9a-f]{64}$'", name="key_hash_sha256_hex"),
        Index("ix_api_keys_user_id", "user_id"),
    )


class StmScope(Base):
    """A (user_id, session_id) that has had short-term memory: when its current STM began and
    when STM written before was last found emptied by crash recovery; ``lost_pinned``: the
    STM written since ``began_at`` was found emptied and counted, ``lost_at`` is that loss;
    ``lost_reported`` false: a write found the loss ``lost_at`` before the server's check did,
    which counts it next. LOGGED, so it outlives the crash that empties ``stm_notes``; its UNLOGGED twin is
    :class:`StmMark` (see ``stm_loss/v1.sql`` and ``v3.sql``). Written by the trigger on
    ``stm_notes`` and by ``cortex.stm_check()``."""

    __tablename__ = "stm_scopes"

    user_id: Mapped[str]
    session_id: Mapped[str]
    began_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    lost_at: Mapped[datetime | None]
    lost_pinned: Mapped[bool] = mapped_column(server_default=text("false"))
    lost_reported: Mapped[bool] = mapped_column(server_default=text("true"))

    __table_args__ = (PrimaryKeyConstraint("user_id", "session_id"),)


class StmMark(Base):
    """UNLOGGED: present while the STM of a scope written since ``stm_scopes.began_at`` can
    still be there; crash recovery empties it together with ``stm_notes``."""

    __tablename__ = "stm_marks"

    user_id: Mapped[str]
    session_id: Mapped[str]

    __table_args__ = (PrimaryKeyConstraint("user_id", "session_id"), {"prefixes": ["UNLOGGED"]})


class StmServer(Base):
    """UNLOGGED, one row: written by the first ``cortex.stm_check()`` of a server run after a
    reset (and by the migration), so ``MemoryStore.open()`` finds a reset in one read. Global
    (with Citus it stays on the coordinator)."""

    __tablename__ = "stm_server"

    singleton: Mapped[bool] = mapped_column(server_default=text("true"))
    started_at: Mapped[datetime]

    __table_args__ = (
        PrimaryKeyConstraint("singleton"),
        CheckConstraint("singleton", name="one_row"),
        {"prefixes": ["UNLOGGED"]},
    )
