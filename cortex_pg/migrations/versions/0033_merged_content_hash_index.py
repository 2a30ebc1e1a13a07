"""The duplicate check of a write looks merged notes up by index (``ix_notes_merged_content_hash``)

Every ``add`` and every batch of ``add_many`` asks whether a note with the same text already
exists in its session (``store.sql.FIND_EXISTING``): as a current note, or as a note that
evolution merged into another (whose keeper is then returned). The one index on content hashes,
``uq_notes_content_hash``, is partial (``WHERE merged_into IS NULL``, so that a merged note's
text may come back), and a question that also asked for merged notes could not use it: the
check read every note of the database (a parallel sequential scan, 40-47 ms per batch of 256
at 100,000 notes, growing with the database) or the whole session. This index covers the merged
notes, few, so that both halves of the check are index lookups.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-02 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_notes_merged_content_hash",
        "notes",
        ["user_id", "session_id", "content_hash"],
        schema="cortex",
        postgresql_where="merged_into IS NOT NULL",
    )


def downgrade() -> None:
    op.drop_index("ix_notes_merged_content_hash", table_name="notes", schema="cortex")
