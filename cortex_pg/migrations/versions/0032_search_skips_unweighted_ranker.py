"""search_notes v11: a ranker weighed 0 is not run (a vector-only search scans no postings)

``cortex.search_notes`` v11: with ``p_ranking.vector_weight`` 1 and a query embedding the
query text is left out of the ranking (no full-text candidates, no BM25), and with
``vector_weight`` 0 and query terms the embedding is left out (no HNSW scan), as a call without
that argument would. v10 ran both rankers and weighed one of them 0. Only
``cortex.search_notes`` is replaced; its helpers stay v9's. Stored data is unchanged.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-02 14:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v11.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v10.sql"))
