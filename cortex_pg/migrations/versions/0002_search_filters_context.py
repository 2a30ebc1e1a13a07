"""search_notes v2: where_filter (cortex.compile_filter) and context re-ranking

Replaces ``cortex.search_notes`` v1 with v2 (new parameters ``p_filter`` before ``p_now``, and
``p_context_embedding``; a ``context_score`` column) and adds ``cortex.compile_filter``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 11:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH_V1_SIGNATURE = "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, timestamptz, text, text, text)"
SEARCH_V2_SIGNATURE = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector)"
)
FILTER_FUNCTIONS = (
    "cortex.compile_filter(jsonb, text, text)",
    "cortex.compile_filter_value(text, text, jsonb, text, text)",
    "cortex.compile_filter_literal(jsonb, text, text)",
    "cortex.filter_error(text, text)",
)


def upgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_V1_SIGNATURE}")
    op.execute(read_sql("functions/compile_filter/v1.sql"))
    op.execute(read_sql("functions/search_notes/v2.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_V2_SIGNATURE}")
    for fn in FILTER_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute(read_sql("functions/search_notes/v1.sql"))
