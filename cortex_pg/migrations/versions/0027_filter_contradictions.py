"""where_filter: operators of one field that no value meets together, and times not in ISO 8601, are errors

``functions/compile_filter/v5`` keeps version 4's ``cortex.compile_filter`` as
``compile_filter_v4`` and wraps it. A field whose ``$eq`` or ``$in`` values are all excluded by
its other operators (``{"n": {"$eq": 5, "$ne": 5}}``, ``{"n": {"$eq": 5, "$gt": 6}}``,
``{"tags": {"$in": ["a"], "$nin": ["a"]}}``) raises SQLSTATE 22023 naming its path instead of
compiling to a condition no row meets; so does a time that is not ISO 8601 (``"today"``,
``"epoch"``, ``"05/08/2023"``, whose meaning followed the session's DateStyle). New:
``cortex.filter_compare``. Stored data is unchanged.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v5.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter(jsonb, text, text)")
    op.execute("DROP FUNCTION cortex.filter_compare(jsonb, jsonb, text)")
    op.execute("ALTER FUNCTION cortex.compile_filter_v4(jsonb, text, text) RENAME TO compile_filter")
