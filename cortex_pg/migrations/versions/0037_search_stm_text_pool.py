"""search_statement v15: the short-term notes the query's terms match are bounded by the pool

``cortex.search_statement`` v15 ranks the short-term full-text matches by BM25 and keeps the
best ``pool`` of them as candidates (v9-v14 kept every one). Only the candidate statement is
replaced; ``cortex.search_notes`` stays v14's. Stored data is unchanged.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-03 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v15.sql"))


def downgrade() -> None:
    # v9.sql holds v9's candidate statement and helpers, and search_notes v9: v14 comes back after
    op.execute(read_sql("functions/search_notes/v9.sql"))
    op.execute(read_sql("functions/search_notes/v14.sql"))
