"""search_notes v3: entity signal, coverage-weighted RRF, a cap on query terms

Replaces ``cortex.search_notes`` v2 with v3 (new parameters ``p_query_entities``,
``p_entity_weight``, ``p_expand_entities``; new columns ``entity_score``, ``entity_rank``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

V2 = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector)"
)
V3 = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector, text[], real, boolean)"
)


def upgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V2}")
    op.execute(read_sql("functions/search_notes/v3.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V3}")
    op.execute(read_sql("functions/search_notes/v2.sql"))
