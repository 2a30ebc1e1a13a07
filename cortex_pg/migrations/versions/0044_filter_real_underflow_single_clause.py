"""where_filter: a number too small for a real names its path; one plain importance or access_count clause is checked once

``functions/compile_filter/v10``: a nonzero number too small in magnitude for a real
(``{"importance": {"$gt": 1e-50}}``) is SQLSTATE 22023 naming its path, where the search
failed with PostgreSQL's "out of range for type real" and no path. A single importance or
access_count clause that plainly fits its column's domain is answered without compiling it a
second time inside an exception block. Version 6's ``compile_filter_literal`` and version 9's
``filter_conjunction_problem`` are kept as ``compile_filter_literal_v6`` and
``filter_conjunction_problem_v9``. Stored data is unchanged.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-05 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0044"
down_revision: str | None = "0043"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v10.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.filter_conjunction_problem(text, jsonb)")
    op.execute("DROP FUNCTION cortex.filter_clause_plainly_fits(text, jsonb)")
    op.execute("DROP FUNCTION cortex.compile_filter_literal(jsonb, text, text)")
    op.execute(
        "ALTER FUNCTION cortex.filter_conjunction_problem_v9(text, jsonb) RENAME TO filter_conjunction_problem"
    )
    op.execute(
        "ALTER FUNCTION cortex.compile_filter_literal_v6(jsonb, text, text) RENAME TO compile_filter_literal"
    )
