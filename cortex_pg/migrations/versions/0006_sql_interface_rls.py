"""Plain-SQL interface (stm_recent, notes_current, entity_facts) and tenant RLS policies

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 12:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RLS_TABLES = (
    "notes",
    "stm_notes",
    "embeddings",
    "note_links",
    "note_history",
    "entities",
    "entity_mentions",
    "relationships",
    "evolution_jobs",
)


def upgrade() -> None:
    op.execute(read_sql("functions/sql_interface/v1.sql"))
    op.execute(read_sql("policies/tenant_rls/v1.sql"))


def downgrade() -> None:
    for table in RLS_TABLES:
        op.execute(f"DROP POLICY IF EXISTS tenant_isolation ON cortex.{table}")
        op.execute(f"ALTER TABLE cortex.{table} DISABLE ROW LEVEL SECURITY")
    op.execute("DROP VIEW IF EXISTS cortex.entity_facts")
    op.execute("DROP VIEW IF EXISTS cortex.notes_current")
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_recent(text, text, int)")
    op.execute("DROP FUNCTION IF EXISTS cortex.linked_notes(uuid, int, real)")
