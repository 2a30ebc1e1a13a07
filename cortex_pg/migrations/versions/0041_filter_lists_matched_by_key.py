"""where_filter: value lists are matched by key, in time linear in their size

``functions/compile_filter/v8``: version 5's check of one operator object compared every value
its ``$eq`` / ``$in`` allow with every value its ``$ne`` / ``$nin`` exclude, and version 7's
check of a conjunction intersected its clauses' ``$in`` lists pair by pair; a filter with two
lists of 1,500 values kept a database process busy for 40 to 70 seconds. Values are now matched
through ``cortex.filter_key`` (hashed) and confirmed by ``cortex.filter_compare``, so the errors
raised and the compiled text are unchanged. Versions 5 and 7 of the two functions are kept as
``compile_filter_clauses_v7`` and ``filter_conjunction_problem_v7``. Stored data is unchanged.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-03 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v8.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.filter_conjunction_problem(text, jsonb)")
    op.execute("DROP FUNCTION cortex.compile_filter_clauses(jsonb, text, text)")
    op.execute("DROP FUNCTION cortex.filter_key(jsonb, text)")
    op.execute(
        "ALTER FUNCTION cortex.filter_conjunction_problem_v7(text, jsonb) RENAME TO filter_conjunction_problem"
    )
    op.execute(
        "ALTER FUNCTION cortex.compile_filter_clauses_v7(jsonb, text, text) RENAME TO compile_filter_clauses"
    )
