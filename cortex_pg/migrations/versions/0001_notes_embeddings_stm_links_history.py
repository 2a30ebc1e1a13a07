"""notes, embeddings, stm, links, history

The first revision: the ``vector`` extension, the tenant tables (LTM ``notes``,
``embeddings`` keyed by model, UNLOGGED ``stm_notes``, ``note_links``, ``note_history``),
the embedding-model registry, and the SQL files ``note_triggers/v1`` (content hash,
history), ``register_embedding_model/v1`` and ``search_notes/v1``.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:22:45.377855
"""

from __future__ import annotations

from collections.abc import Sequence

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from cortex_pg.db.migrate import read_sql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


SQL_FILES = (
    "functions/note_triggers/v1.sql",
    "functions/register_embedding_model/v1.sql",
    "functions/search_notes/v1.sql",
)


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "embedding_models",
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("index_name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("dim BETWEEN 1 AND 2000", name=op.f("ck_embedding_models_dim_range")),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_embedding_models")),
        schema="cortex",
    )
    op.create_index(
        "uq_embedding_models_active",
        "embedding_models",
        ["active"],
        unique=True,
        schema="cortex",
        postgresql_where=sa.text("active"),
    )
    op.create_table(
        "note_history",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("note_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("op", sa.Text(), nullable=False),
        sa.Column("old", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("new", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("changed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_note_history")),
        schema="cortex",
    )
    op.create_index(
        "ix_note_history_note",
        "note_history",
        ["user_id", "note_id", "changed_at"],
        unique=False,
        schema="cortex",
    )
    op.create_table(
        "notes",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("user_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("session_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("keywords", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("category", sa.Text(), nullable=True),
        sa.Column("memory_type", sa.Text(), server_default=sa.text("'note'"), nullable=False),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("importance", sa.REAL(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "last_accessed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("access_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
            nullable=False,
        ),
        sa.Column("merged_into", sa.UUID(), nullable=True),
        sa.Column(
            "evolution_history",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.CheckConstraint("char_length(btrim(content)) > 0", name=op.f("ck_notes_content_not_blank")),
        sa.CheckConstraint(
            "char_length(session_id) BETWEEN 1 AND 255", name=op.f("ck_notes_session_id_length")
        ),
        sa.CheckConstraint("char_length(user_id) BETWEEN 1 AND 255", name=op.f("ck_notes_user_id_length")),
        sa.CheckConstraint("importance >= 0 AND importance <= 1", name=op.f("ck_notes_importance_range")),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_notes")),
        schema="cortex",
    )
    op.create_index(
        "ix_notes_metadata",
        "notes",
        ["metadata"],
        unique=False,
        schema="cortex",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.create_index("ix_notes_tsv", "notes", ["tsv"], unique=False, schema="cortex", postgresql_using="gin")
    op.create_index(
        "ix_notes_user_created", "notes", ["user_id", "created_at"], unique=False, schema="cortex"
    )
    op.create_index("ix_notes_id", "notes", ["id"], unique=False, schema="cortex")
    op.create_index(
        "ix_notes_user_session_created",
        "notes",
        ["user_id", "session_id", "created_at"],
        unique=False,
        schema="cortex",
    )
    op.create_index(
        "uq_notes_content_hash",
        "notes",
        ["user_id", "session_id", "content_hash"],
        unique=True,
        schema="cortex",
        postgresql_where=sa.text("merged_into IS NULL"),
    )
    op.create_table(
        "stm_notes",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("user_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("session_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("keywords", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("category", sa.Text(), nullable=True),
        sa.Column("memory_type", sa.Text(), server_default=sa.text("'note'"), nullable=False),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("importance", sa.REAL(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "last_accessed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("access_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
            nullable=False,
        ),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=True),
        sa.CheckConstraint("char_length(btrim(content)) > 0", name=op.f("ck_stm_notes_content_not_blank")),
        sa.CheckConstraint(
            "char_length(session_id) BETWEEN 1 AND 255", name=op.f("ck_stm_notes_session_id_length")
        ),
        sa.CheckConstraint(
            "char_length(user_id) BETWEEN 1 AND 255", name=op.f("ck_stm_notes_user_id_length")
        ),
        sa.CheckConstraint("importance >= 0 AND importance <= 1", name=op.f("ck_stm_notes_importance_range")),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_stm_notes")),
        schema="cortex",
        prefixes=["UNLOGGED"],
    )
    op.create_index("ix_stm_notes_id", "stm_notes", ["id"], unique=False, schema="cortex")
    op.create_index(
        "ix_stm_notes_lru",
        "stm_notes",
        ["user_id", "session_id", "last_accessed_at", "seq"],
        unique=False,
        schema="cortex",
    )
    op.create_index(
        "ix_stm_notes_tsv", "stm_notes", ["tsv"], unique=False, schema="cortex", postgresql_using="gin"
    )
    op.create_index(
        "uq_stm_notes_content_hash",
        "stm_notes",
        ["user_id", "session_id", "content_hash"],
        unique=True,
        schema="cortex",
    )
    op.create_table(
        "embeddings",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("note_id", sa.UUID(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id", "note_id"],
            ["cortex.notes.user_id", "cortex.notes.id"],
            name=op.f("fk_embeddings_user_id_note_id_notes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "note_id", "model", name=op.f("pk_embeddings")),
        schema="cortex",
    )
    op.create_index(
        "ix_embeddings_model_user", "embeddings", ["model", "user_id"], unique=False, schema="cortex"
    )
    op.create_table(
        "note_links",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("source_id", sa.UUID(), nullable=False),
        sa.Column("target_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("type", sa.Text(), server_default=sa.text("'related'"), nullable=False),
        sa.Column("strength", sa.REAL(), server_default=sa.text("0.5"), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("source_id <> target_id", name=op.f("ck_note_links_no_self_link")),
        sa.CheckConstraint("strength >= 0 AND strength <= 1", name=op.f("ck_note_links_strength_range")),
        sa.ForeignKeyConstraint(
            ["user_id", "source_id"],
            ["cortex.notes.user_id", "cortex.notes.id"],
            name=op.f("fk_note_links_user_id_source_id_notes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id", "target_id"],
            ["cortex.notes.user_id", "cortex.notes.id"],
            name=op.f("fk_note_links_user_id_target_id_notes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "source_id", "target_id", name=op.f("pk_note_links")),
        schema="cortex",
    )
    op.create_index(
        "ix_note_links_target", "note_links", ["user_id", "target_id"], unique=False, schema="cortex"
    )
    for name in SQL_FILES:
        op.execute(read_sql(name))


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION IF EXISTS cortex.search_notes(text, vector, text, int, real, timestamptz, "
        "timestamptz, timestamptz, text, text, text)"
    )
    op.execute("DROP FUNCTION IF EXISTS cortex.register_embedding_model(text, int, boolean)")
    op.execute("DROP FUNCTION IF EXISTS cortex.embedding_index_name(text)")
    op.drop_index("ix_note_links_target", table_name="note_links", schema="cortex")
    op.drop_table("note_links", schema="cortex")
    op.drop_index("ix_embeddings_model_user", table_name="embeddings", schema="cortex")
    op.drop_table("embeddings", schema="cortex")
    op.drop_index("uq_stm_notes_content_hash", table_name="stm_notes", schema="cortex")
    op.drop_index("ix_stm_notes_tsv", table_name="stm_notes", schema="cortex", postgresql_using="gin")
    op.drop_index("ix_stm_notes_lru", table_name="stm_notes", schema="cortex")
    op.drop_table("stm_notes", schema="cortex")
    op.drop_index(
        "uq_notes_content_hash",
        table_name="notes",
        schema="cortex",
        postgresql_where=sa.text("merged_into IS NULL"),
    )
    op.drop_index("ix_notes_user_session_created", table_name="notes", schema="cortex")
    op.drop_index("ix_notes_user_created", table_name="notes", schema="cortex")
    op.drop_index("ix_notes_tsv", table_name="notes", schema="cortex", postgresql_using="gin")
    op.drop_index(
        "ix_notes_metadata",
        table_name="notes",
        schema="cortex",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.drop_table("notes", schema="cortex")
    op.drop_index("ix_note_history_note", table_name="note_history", schema="cortex")
    op.drop_table("note_history", schema="cortex")
    op.drop_index(
        "uq_embedding_models_active",
        table_name="embedding_models",
        schema="cortex",
        postgresql_where=sa.text("active"),
    )
    op.drop_table("embedding_models", schema="cortex")
    # the trigger functions go after their tables (the triggers went with the tables)
    op.execute("DROP FUNCTION IF EXISTS cortex.record_note_history()")
    op.execute("DROP FUNCTION IF EXISTS cortex.set_note_derived()")
