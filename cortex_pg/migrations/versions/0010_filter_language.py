"""compile_filter v2: one filter language for every caller

``functions/compile_filter/v2`` replaces the bodies of ``cortex.compile_filter`` and its
helpers (same signatures): shapes that could only match nothing because of how they are
written (``"or": [...]`` without ``$``, ``{"gte": 1}``, bounds of two JSON types, a number
written as a string in a range, an empty numeric range) raise; ``"$fields": "item"`` selects the
calute item field names; the error's field is the first segment of the path given.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 03:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v2.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/compile_filter/v1.sql"))
