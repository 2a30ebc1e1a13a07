"""evolution jobs, linked_notes

The durable evolution queue ``evolution_jobs`` (taken with ``FOR UPDATE SKIP LOCKED``) and
the SQL file ``linked_notes/v1`` (graph traversal along ``note_links`` in one recursive CTE).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from cortex_pg.db.migrate import read_sql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQL_FILES = ("functions/linked_notes/v1.sql",)


def upgrade() -> None:
    op.create_table(
        "evolution_jobs",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("note_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), server_default=sa.text("'evolve'"), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("run_after", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("locked_by", sa.Text(), nullable=True),
        sa.Column("locked_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed')", name=op.f("ck_evolution_jobs_status_known")
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND max_attempts >= 1", name=op.f("ck_evolution_jobs_attempts_range")
        ),
        sa.ForeignKeyConstraint(
            ["user_id", "note_id"],
            ["cortex.notes.user_id", "cortex.notes.id"],
            name=op.f("fk_evolution_jobs_user_id_note_id_notes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "id", name=op.f("pk_evolution_jobs")),
        schema="cortex",
    )
    op.create_index(
        "ix_evolution_jobs_ready",
        "evolution_jobs",
        ["run_after", "id"],
        unique=False,
        schema="cortex",
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.create_index(
        "ix_evolution_jobs_locked",
        "evolution_jobs",
        ["locked_at"],
        unique=False,
        schema="cortex",
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index(
        "uq_evolution_jobs_active",
        "evolution_jobs",
        ["user_id", "note_id", "kind"],
        unique=True,
        schema="cortex",
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )
    op.create_index("ix_evolution_jobs_status", "evolution_jobs", ["status"], unique=False, schema="cortex")
    for name in SQL_FILES:
        op.execute(read_sql(name))


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS cortex.linked_notes(text, uuid, int, real)")
    op.drop_index("ix_evolution_jobs_status", table_name="evolution_jobs", schema="cortex")
    op.drop_index(
        "uq_evolution_jobs_active",
        table_name="evolution_jobs",
        schema="cortex",
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )
    op.drop_index(
        "ix_evolution_jobs_locked",
        table_name="evolution_jobs",
        schema="cortex",
        postgresql_where=sa.text("status = 'running'"),
    )
    op.drop_index(
        "ix_evolution_jobs_ready",
        table_name="evolution_jobs",
        schema="cortex",
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.drop_table("evolution_jobs", schema="cortex")
