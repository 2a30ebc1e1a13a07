"""calute: context frames, user preferences

The calute context stack (``context_frames``, one stack per (user_id, scope), with the SQL
functions ``context_push`` / ``context_pop`` / ``context_peek`` from
``functions/context_frames/v1``) and ``user_preferences`` (calute ``UserMemory``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQL_FILES = ("functions/context_frames/v1.sql",)


def upgrade() -> None:
    op.create_table(
        "context_frames",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column(
            "data",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("pushed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("depth >= 1", name=op.f("ck_context_frames_depth_positive")),
        sa.CheckConstraint(
            "char_length(scope) BETWEEN 1 AND 255", name=op.f("ck_context_frames_scope_length")
        ),
        sa.PrimaryKeyConstraint("user_id", "scope", "depth", name=op.f("pk_context_frames")),
        schema="cortex",
    )
    op.create_table(
        "user_preferences",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column(
            "preferences",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "jsonb_typeof(preferences) = 'object'", name=op.f("ck_user_preferences_preferences_object")
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_user_preferences")),
        schema="cortex",
    )
    for name in SQL_FILES:
        op.execute(read_sql(name))
    for table in ("context_frames", "user_preferences"):  # same tenant policy as 0006's tables
        for statement in tenant_policy_sql(table):
            op.execute(statement)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS cortex.context_peek(text, text)")
    op.execute("DROP FUNCTION IF EXISTS cortex.context_pop(text, text)")
    op.execute("DROP FUNCTION IF EXISTS cortex.context_push(text, text, text, jsonb)")
    op.execute("DROP FUNCTION IF EXISTS cortex.context_lock(text, text)")
    op.drop_table("user_preferences", schema="cortex")
    op.drop_table("context_frames", schema="cortex")
