"""where_filter: an empty range between string bounds (times, text, ids) is an error

``functions/compile_filter/v4`` keeps version 2's ``cortex.compile_filter`` as
``compile_filter_v2`` and wraps it: a field whose string bounds leave no value between them
(``{"created_at": {"$gte": "2023-06-01", "$lt": "2023-05-01"}}``) raises SQLSTATE 22023 naming
its path, as an empty numeric range already did, instead of compiling to a condition that no
row meets. Stored data is unchanged.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v4.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter(jsonb, text, text)")
    op.execute("ALTER FUNCTION cortex.compile_filter_v2(jsonb, text, text) RENAME TO compile_filter")
