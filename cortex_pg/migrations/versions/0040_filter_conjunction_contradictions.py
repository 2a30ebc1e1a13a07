"""where_filter: contradictions spread over a conjunction's clauses, and integer ranges with no whole number, are errors

``functions/compile_filter/v7`` keeps version 5's ``cortex.compile_filter`` as
``compile_filter_clauses`` and wraps it. The clauses of a conjunction (an object's keys and its
``$and``, nested ``$and`` flattened) are checked together per field with version 5's rules for
one operator object: ``{"$and": [{"category": "work"}, {"category": "home"}]}``,
``{"category": "work", "$and": [{"category": "home"}]}`` and disjoint ranges in two clauses
raise SQLSTATE 22023 naming the clause's path instead of compiling to a condition no row meets;
so does a range of ``access_count`` (an integer column) that holds no whole number
(``{"$gt": 1, "$lt": 2}``). The compiled text of every other filter is unchanged. New:
``cortex.filter_conjunction``, ``cortex.filter_conjunction_problem``,
``cortex.filter_operators_problem``. Stored data is unchanged.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-03 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v7.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter(jsonb, text, text)")
    op.execute("DROP FUNCTION cortex.filter_conjunction_problem(text, jsonb)")
    op.execute("DROP FUNCTION cortex.filter_operators_problem(text, jsonb)")
    op.execute("DROP FUNCTION cortex.filter_conjunction(jsonb, boolean, text)")
    op.execute("ALTER FUNCTION cortex.compile_filter_clauses(jsonb, text, text) RENAME TO compile_filter")
