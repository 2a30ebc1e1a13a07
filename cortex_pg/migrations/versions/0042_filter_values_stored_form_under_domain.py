"""where_filter: values read as notes store them, $under checked with its field's other conditions, importance within 0..1

``functions/compile_filter/v9``: a category value of ``$eq``, ``$ne``, ``$in``, ``$nin`` and
``$under`` is read in the form notes store it ("/" read as ".", segments stripped:
``{"category": "work/python"}`` matches the note saved with that category), as are the values
of tags and keywords (stripped); a value no note can hold where one must be (``{"category":
"..a"}``, ``{"tags": " "}``) is an error. ``$under`` is checked against the other conditions of
its field, in one operator object or a conjunction (``{"category": {"$eq": "work", "$under":
"home"}}``, two ``$under`` paths neither of which lies under the other), and importance
against the 0..1 its CHECK keeps it in (``{"importance": {"$gt": 1}}``): SQLSTATE 22023 naming
the path, instead of a condition no row meets. Filters whose values are in stored form and that
some row meets compile to the same text. Version 7's ``compile_filter`` and version 8's
``filter_conjunction_problem`` are kept as ``compile_filter_v8`` and
``filter_conjunction_problem_v8``. Stored data is unchanged.

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v9.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter(jsonb, text, text)")
    op.execute("DROP FUNCTION cortex.filter_conjunction_problem(text, jsonb)")
    op.execute("DROP FUNCTION cortex.filter_value_problem(jsonb, text)")
    op.execute("DROP FUNCTION cortex.filter_stored_form(jsonb)")
    op.execute("DROP FUNCTION cortex.filter_stored_value(text, text, jsonb)")
    op.execute("DROP FUNCTION cortex.filter_tag(text)")
    op.execute("DROP FUNCTION cortex.filter_category(text)")
    op.execute("DROP FUNCTION cortex.filter_strip(text)")
    op.execute(
        "ALTER FUNCTION cortex.filter_conjunction_problem_v8(text, jsonb) RENAME TO filter_conjunction_problem"
    )
    op.execute("ALTER FUNCTION cortex.compile_filter_v8(jsonb, text, text) RENAME TO compile_filter")
