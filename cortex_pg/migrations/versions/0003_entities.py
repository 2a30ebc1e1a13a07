"""entities, mentions, relationships

The knowledge graph of issue 5: ``entities`` (unique per user and normalized name),
``entity_mentions`` (entity x note, LTM or STM id), ``relationships`` (bi-temporal facts
between entities), and the SQL files ``entity_writes/v1`` (name normalisation, relationship
upsert with contradiction closing, note-delete triggers that adjust mentions and counters)
and ``related_entities/v1`` (the recursive-CTE traversal).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 11:29:02.144722
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from cortex_pg.db.migrate import read_sql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQL_FILES = (
    "functions/entity_writes/v1.sql",
    "functions/related_entities/v1.sql",
)


def upgrade() -> None:
    op.create_table(
        "entities",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("normalized_name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), server_default=sa.text("'other'"), nullable=False),
        sa.Column("first_seen", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_seen", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("frequency", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("contexts", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "kind IN ('person', 'organization', 'concept', 'other')", name=op.f("ck_entities_kind_known")
        ),
        sa.CheckConstraint("cardinality(contexts) <= 10", name=op.f("ck_entities_contexts_at_most_10")),
        sa.CheckConstraint(
            "char_length(btrim(name)) BETWEEN 1 AND 200", name=op.f("ck_entities_name_length")
        ),
        sa.CheckConstraint("frequency >= 0", name=op.f("ck_entities_frequency_non_negative")),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_entities")),
        sa.UniqueConstraint("user_id", "normalized_name", name=op.f("uq_entities_user_id_normalized_name")),
        schema="cortex",
    )
    op.create_table(
        "entity_mentions",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("entity_id", sa.BigInteger(), nullable=False),
        sa.Column("note_id", sa.UUID(), nullable=False),
        sa.Column("char_offset", sa.Integer(), nullable=True),
        sa.Column("snippet", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column(
            "mentioned_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint("char_length(snippet) <= 100", name=op.f("ck_entity_mentions_snippet_length")),
        sa.ForeignKeyConstraint(
            ["user_id", "entity_id"],
            ["cortex.entities.user_id", "cortex.entities.id"],
            name=op.f("fk_entity_mentions_user_id_entity_id_entities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "entity_id", "note_id", name=op.f("pk_entity_mentions")),
        schema="cortex",
    )
    op.create_index(
        "ix_entity_mentions_note", "entity_mentions", ["user_id", "note_id"], unique=False, schema="cortex"
    )
    op.create_table(
        "relationships",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("relation", sa.Text(), nullable=False),
        sa.Column("target_id", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.REAL(), server_default=sa.text("1"), nullable=False),
        sa.Column("valid_from", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("valid_to", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("source_note_id", sa.UUID(), nullable=True),
        sa.Column("note_ids", postgresql.ARRAY(sa.UUID()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "relation ~ '^[a-z][a-z0-9_]{0,63}$'", name=op.f("ck_relationships_relation_format")
        ),
        sa.CheckConstraint(
            "valid_to IS NULL OR valid_to >= valid_from", name=op.f("ck_relationships_valid_interval")
        ),
        sa.ForeignKeyConstraint(
            ["user_id", "source_id"],
            ["cortex.entities.user_id", "cortex.entities.id"],
            name=op.f("fk_relationships_user_id_source_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id", "target_id"],
            ["cortex.entities.user_id", "cortex.entities.id"],
            name=op.f("fk_relationships_user_id_target_id_entities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_relationships")),
        schema="cortex",
    )
    op.create_index(
        "ix_relationships_note_ids",
        "relationships",
        ["note_ids"],
        unique=False,
        schema="cortex",
        postgresql_using="gin",
    )
    op.create_index(
        "ix_relationships_target", "relationships", ["user_id", "target_id"], unique=False, schema="cortex"
    )
    op.create_index(
        "uq_relationships_open",
        "relationships",
        ["user_id", "source_id", "relation", "target_id"],
        unique=True,
        schema="cortex",
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    for name in SQL_FILES:
        op.execute(read_sql(name))


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS cortex.related_entities(text, text, int, timestamptz)")
    op.execute("DROP TRIGGER IF EXISTS notes_forget_entities ON cortex.notes")
    op.execute("DROP TRIGGER IF EXISTS stm_notes_forget_entities ON cortex.stm_notes")
    op.execute("DROP FUNCTION IF EXISTS cortex.forget_deleted_note_entities()")
    op.execute("DROP FUNCTION IF EXISTS cortex.forget_note_entities(text, uuid[])")
    op.execute(
        "DROP FUNCTION IF EXISTS cortex.assert_relationship("
        "text, bigint, text, bigint, timestamptz, uuid, boolean)"
    )
    op.drop_index(
        "uq_relationships_open",
        table_name="relationships",
        schema="cortex",
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    op.drop_index("ix_relationships_target", table_name="relationships", schema="cortex")
    op.drop_index(
        "ix_relationships_note_ids", table_name="relationships", schema="cortex", postgresql_using="gin"
    )
    op.drop_table("relationships", schema="cortex")
    op.drop_index("ix_entity_mentions_note", table_name="entity_mentions", schema="cortex")
    op.drop_table("entity_mentions", schema="cortex")
    op.drop_table("entities", schema="cortex")
    op.execute("DROP FUNCTION IF EXISTS cortex.normalize_entity_name(text)")
