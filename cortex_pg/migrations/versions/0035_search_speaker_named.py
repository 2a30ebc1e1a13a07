"""search_notes v13: a note said by a person the query names gains relevance

``cortex.search_notes`` v13: when the query's words name the speaker of a candidate (its
``metadata.speaker``), each candidate's relevance becomes ``(relevance + speaker_weight *
named) / (1 + speaker_weight)`` (``p_ranking.speaker_weight``, 0.08). Only
``cortex.search_notes`` is replaced; its helpers stay v9's. Stored data is unchanged.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-03 04:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v13.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v12.sql"))
