"""where_filter: a whole number written as 1.0 matches an integer field

``functions/compile_filter/v6`` keeps version 2's ``cortex.compile_filter_literal`` as
``compile_filter_literal_v2`` and wraps it: ``{"access_count": 1.0}`` compiled to
``'1.0'::integer``, which raised at run time; it now compiles to ``'1'::integer``. Stored data
is unchanged.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v6.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter_literal(jsonb, text, text)")
    op.execute(
        "ALTER FUNCTION cortex.compile_filter_literal_v2(jsonb, text, text) RENAME TO compile_filter_literal"
    )
