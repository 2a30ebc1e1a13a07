"""A job asked for again while it runs runs again after it (``evolution_jobs.run_again``)

An enqueue that finds the note's job of that kind already running (a note changed while its
job ran: a Prem Cortex ``update(content=...)`` during the note's processing) used to queue
nothing, and the running job, which had read the note before the change, ended ``done``: the
change was never processed. It now marks the running job ``run_again``; the job's end (done, or
a failed attempt) puts it back in the queue instead, with a fresh budget of attempts
(``max_attempts`` grows by the attempts used; ``attempts`` keeps counting, as a lease is a
worker and an attempt number). Existing rows get
``false``.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-02 12:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "evolution_jobs",
        sa.Column("run_again", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        schema="cortex",
    )


def downgrade() -> None:
    # a running job marked to run again goes back to the queue now (its worker loses the lease,
    # so its effects roll back): the code before this revision would end it done
    op.execute(
        "UPDATE cortex.evolution_jobs SET status = 'queued', max_attempts = attempts + max_attempts, run_after = now(), "
        "locked_by = NULL, locked_at = NULL, updated_at = now() WHERE run_again AND status = 'running'"
    )
    op.drop_column("evolution_jobs", "run_again", schema="cortex")
