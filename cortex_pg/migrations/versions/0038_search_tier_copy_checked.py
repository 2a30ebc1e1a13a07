"""search_notes v16: a note kept in both tiers comes back as the copy that passes the search

``cortex.search_notes`` v16 returns a candidate's short-term copy only when that copy passes
the search's where_filter, window and session (its long-term row otherwise), and refuses a
window that holds no time and an all-zero query or context embedding (22023). Its helpers stay
v15's and v9's. Stored data is unchanged.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-03 09:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v16.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v14.sql"))
