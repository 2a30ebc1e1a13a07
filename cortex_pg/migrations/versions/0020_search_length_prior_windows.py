"""search_notes v7 (length prior, one pool place per long note); index steps take a flag

``search_notes`` v7 multiplies the cosine of a note's text by least(1, sqrt(dl / 24)), dl being
its distinct lexemes, and reads 3 * pool vector rows for a tenant that has long notes (several
text windows per note), so one note's windows do not crowd the pool. ``ix_embeddings_windows``
holds the later windows (``window_no > 0``) only: the search asks it whether a tenant has any.
``cortex.embedding_index_steps`` takes ``p_concurrently`` (default true);
``cortex.build_embedding_index`` runs the steps without CONCURRENTLY through it instead of
rewriting their text (``register_embedding_model/v4.sql``).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01 10:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/register_embedding_model/v4.sql"))
    op.create_index(
        "ix_embeddings_windows",
        "embeddings",
        ["user_id", "model"],
        schema="cortex",
        postgresql_where="window_no > 0",
    )
    op.execute(read_sql("functions/search_notes/v7.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v6.sql"))
    op.drop_index("ix_embeddings_windows", table_name="embeddings", schema="cortex")
    op.execute("DROP FUNCTION IF EXISTS cortex.embedding_index_steps(text, int, boolean)")
    op.execute(read_sql("functions/register_embedding_model/v3.sql"))
