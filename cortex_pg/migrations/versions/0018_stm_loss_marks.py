"""Short-term memory lost to crash recovery is detected: cortex.stm_scopes, stm_marks, stm_server

``cortex.stm_notes`` is UNLOGGED, so crash recovery empties it. Each (user_id, session_id)
that has STM gets a LOGGED row in ``stm_scopes`` and an UNLOGGED mark in ``stm_marks``
(written by a trigger on ``stm_notes``); recovery empties the marks with the notes, so a scope
row without its mark is STM lost to a reset (``functions/stm_loss/v1.sql``). ``stm_server``
(UNLOGGED, one row) lets ``MemoryStore.open()`` find a reset in one read. The back-fill marks
every scope that holds STM now and writes the ``stm_server`` row, so an upgraded database
reports only the losses that happen after the upgrade.

Revision ID: 0018
Revises: 0016
Create Date: 2026-12-01 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0018"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stm_scopes",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("began_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("lost_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "session_id", name=op.f("pk_stm_scopes")),
        schema="cortex",
    )
    op.create_table(
        "stm_marks",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", name=op.f("pk_stm_marks")),
        schema="cortex",
        prefixes=["UNLOGGED"],
    )
    op.create_table(
        "stm_server",
        sa.Column("singleton", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("started_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint("singleton", name=op.f("ck_stm_server_one_row")),
        sa.PrimaryKeyConstraint("singleton", name=op.f("pk_stm_server")),
        schema="cortex",
        prefixes=["UNLOGGED"],
    )
    op.execute(
        "INSERT INTO cortex.stm_scopes (user_id, session_id) "
        "SELECT DISTINCT user_id, session_id FROM cortex.stm_notes"
    )
    op.execute(
        "INSERT INTO cortex.stm_marks (user_id, session_id) SELECT user_id, session_id FROM cortex.stm_scopes"
    )
    op.execute("INSERT INTO cortex.stm_server (started_at) VALUES (pg_postmaster_start_time())")
    op.execute(read_sql("functions/stm_loss/v1.sql"))
    for table in ("stm_scopes", "stm_marks"):
        for statement in tenant_policy_sql(table):
            op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS stm_unmark_emptied ON cortex.stm_notes")
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_unmark_emptied()")
    op.execute("DROP TRIGGER IF EXISTS stm_mark_scope ON cortex.stm_notes")
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_mark_scope()")
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_losses(text, text)")
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_check()")
    for table in ("stm_server", "stm_marks", "stm_scopes"):
        op.drop_table(table, schema="cortex")
