"""search_notes v10: a note of any age has a recency (v9 raised for notes 14 to 113 years old)

``cortex.search_notes`` v10 computes the recency ``exp(-age_days / 7)`` in float8, 0 beyond 700
time constants (4,900 days). v9 computed it in numeric and cast it to float8, which failed for
ages whose value lies below float8's range, so a search raised "value out of range" whenever
such a note was among its candidates. Only ``cortex.search_notes`` is replaced; its helpers stay
v9's. Stored data is unchanged.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 06:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v10.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v9.sql"))
