"""search_notes v9: the usual search prepared once per session; large tenants by their HNSW index

``cortex.search_notes`` v9 prepares the candidate statement of a search without session, date
window or where_filter once per session and runs it on a generic plan (v8 planned it on every
call). A tenant of at least 256 notes that holds at least a fifth of its embeddings partition
(the new ``cortex.tenant_partition_share``) finds its vector candidates through its HNSW index,
which PostgreSQL's cost model passed over for an exact scan several times slower. Later windows
of long notes are ordered by the stored vectors' own distance, never through the index.
``cortex.search_statement`` takes ``p_scan`` ('planned', or for a generic plan 'index' or
'exact': candidate notes looked up one by one), so v8's signature is dropped. Results are v8's but for the index scan's
approximation.

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
V9_STATEMENT = V8_STATEMENT[:-1] + ", text)"


def upgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V8_STATEMENT}")
    op.execute(read_sql("functions/search_notes/v9.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V9_STATEMENT}")
    op.execute("DROP FUNCTION IF EXISTS cortex.tenant_partition_share(text)")
    op.execute(read_sql("functions/search_notes/v8.sql"))
