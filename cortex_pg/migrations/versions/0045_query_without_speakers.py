"""cortex.query_without_speakers: a query without the names of the tenant's speakers it names

``functions/speakers/v2``: the query with the names of the speakers it names (search v13/v14's
rule, over ``cortex.speaker_counts``) taken out, or NULL when it names none. The library embeds
it beside the query and searches with a blend of both embeddings (``Ranking.unnamed_query_weight``).
Stored data is unchanged.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-05 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0045"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/speakers/v2.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.query_without_speakers(text, text)")
