"""Indexes for three lookups that only partial indexes, or none, could answer

* ``ix_notes_merged_content_hash`` (merged notes' content hashes). Every ``add`` and every batch
  of ``add_many`` asks whether a note with the same text already exists in its session
  (``store.sql.FIND_EXISTING``): as a current note, or as a note that evolution merged into
  another (whose keeper is then returned). The one index on content hashes,
  ``uq_notes_content_hash``, is partial (``WHERE merged_into IS NULL``, so that a merged note's
  text may come back), and a question that also asked for merged notes could not use it: the
  check read every note of the database (a parallel sequential scan, 40-47 ms per batch of 256
  at 100,000 notes, growing with the database) or the whole session. The check now asks for
  each kind apart, each by its own partial index.
* ``ix_evolution_jobs_note`` (a note's jobs, of any status). Deleting a note deletes its jobs
  (``ON DELETE CASCADE``), and the only index led by (user_id, note_id) covered queued and
  running jobs: finished jobs, one or more per note a processing store ever queued, were found
  by a sequential scan of every tenant's jobs, once per deleted note (``delete_where`` of 2,000
  notes beside 40,000 finished jobs: 1.38 s, 0.36 s with the index).
* ``ix_relationships_source`` (an entity's relationships from it, open or closed). Deleting an
  entity deletes them (``ON DELETE CASCADE``); the open ones had a partial index, the closed
  ones were found by reading the tenant's relationships. (Those to it have
  ``ix_relationships_target``.)

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
    op.create_index("ix_evolution_jobs_note", "evolution_jobs", ["user_id", "note_id"], schema="cortex")
    op.create_index("ix_relationships_source", "relationships", ["user_id", "source_id"], schema="cortex")


def downgrade() -> None:
    op.drop_index("ix_relationships_source", table_name="relationships", schema="cortex")
    op.drop_index("ix_evolution_jobs_note", table_name="evolution_jobs", schema="cortex")
    op.drop_index("ix_notes_merged_content_hash", table_name="notes", schema="cortex")
