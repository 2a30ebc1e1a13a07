"""search_notes v9: a large tenant's vector candidates by its HNSW index

``cortex.search_notes`` v9 plans the candidate statement with ``enable_sort`` off when the search
has a query embedding, no session, date window or where_filter, and the tenant holds at least
256 current long-term notes: PostgreSQL's cost model chose an exact scan of such a tenant
(1.3-1.6 ms at a thousand notes) over its HNSW index (0.3 ms). The later windows of long notes
are ordered by the stored vectors' own distance, never through the index. Signatures are v8's; results are v8's.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-01 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


V8_STATEMENT = "cortex.search_statement(text, int, text, text, boolean, boolean, boolean, text, boolean)"
V9_STATEMENT = V8_STATEMENT[:-1] + ", boolean)"


def upgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V8_STATEMENT}")
    op.execute(read_sql("functions/search_notes/v9.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V9_STATEMENT}")
    op.execute(read_sql("functions/search_notes/v8.sql"))
