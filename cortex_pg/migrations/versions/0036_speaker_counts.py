"""the tenant's speakers, and search_notes v14: a named speaker's words leave the full-text terms

``cortex.speaker_counts`` (per user and speaker: how many current long-term notes that speaker
said, kept exact by triggers on ``cortex.notes``, ``functions/speakers/v1``) is filled from the
notes stored before the upgrade. ``cortex.search_notes`` v14 leaves the lexemes of every
speaker of the tenant that the query names out of its full-text terms (unless none would be
left); its helpers stay v9's.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-03 08:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "speaker_counts",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("words", sa.Text(), nullable=False),
        sa.Column("note_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "words", name=op.f("pk_speaker_counts")),
        schema="cortex",
    )
    op.execute(read_sql("functions/speakers/v1.sql"))
    op.execute(
        "INSERT INTO cortex.speaker_counts (user_id, words, note_count) "
        "SELECT n.user_id, w.words, count(*) FROM cortex.notes n "
        "CROSS JOIN LATERAL (SELECT cortex.speaker_words(n.metadata) AS words) w "
        "WHERE n.merged_into IS NULL AND w.words IS NOT NULL GROUP BY n.user_id, w.words"
    )
    for statement in tenant_policy_sql("speaker_counts"):
        op.execute(statement)
    op.execute(read_sql("functions/search_notes/v14.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/search_notes/v13.sql"))
    for event in ("insert", "delete", "update", "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS speaker_counts_{event} ON cortex.notes")
        op.execute(f"DROP FUNCTION IF EXISTS cortex.speaker_counts_on_{event}()")
    op.execute("DROP FUNCTION IF EXISTS cortex.speaker_count_apply(text[], text[], int[])")
    op.execute("DROP TABLE cortex.speaker_counts")
    op.execute("DROP FUNCTION IF EXISTS cortex.speaker_words(jsonb)")
