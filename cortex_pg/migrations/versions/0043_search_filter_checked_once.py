"""search_notes v17: the where_filter is compiled and checked once per search

``cortex.search_notes`` v17 checks its where_filter once (``cortex.compile_filter`` for the
long-term alias) and takes the short-term alias's clauses from ``cortex.compile_filter_clauses``
over the filter's stored form, which is what a second ``compile_filter`` call returned after
repeating every check. Results and errors are unchanged. Stored data is unchanged.

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0043"
down_revision: str | None = "0042"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v17.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v16.sql"))
