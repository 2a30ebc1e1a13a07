"""search_notes v12: the answer to a question inherits the question's relevance

``cortex.search_notes`` v12: a long-term candidate whose text holds a '?' brings its next note
of the session (its answer) into the candidates, and that note's relevance is at least
``p_ranking.answer_weight`` (0.9) times the question's. Only ``cortex.search_notes`` is
replaced; its helpers stay v9's. Stored data is unchanged.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-02 19:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/search_notes/v12.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v11.sql"))
