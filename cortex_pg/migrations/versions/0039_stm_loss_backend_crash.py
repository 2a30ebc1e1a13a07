"""STM loss v3: a backend crash's loss is dated at its recovery and counted once

``functions/stm_loss/v3``: a backend killed abnormally (the OOM killer) makes the postmaster run
crash recovery without restarting, so ``pg_postmaster_start_time()``, the time v1-v2 gave every
loss, could precede the session's STM; and since v1-v2 told a counted loss from the times
(``lost_at >= began_at``), every later check counted such a session again. v3 dates a loss at
the last crash recovery (``cortex.stm_reset_at()``), never before its session began, and keeps
which loss was counted in a new column, ``stm_scopes.lost_pinned``; a second one,
``stm_scopes.lost_reported``, keeps a loss that a write found first (it dates the loss and
begins the session's STM anew) for the check to count.

Data: a scope without its mark whose ``lost_at`` is set was counted by the check that ran
after its loss when ``lost_at >= began_at`` (v1's own test), or, when it is earlier, when the
check after the last reset has run (``cortex.stm_server`` has its row: every scope without
its mark was counted by it); those are pinned, a time before ``began_at`` moved to
``began_at`` (the earliest the loss can have been). Before that check (the upgrade is the first
open after a reset), such a scope cannot be told from one written again and lost anew: it is
left to the check, which counts it (once more rather than never). Likewise a scope written again
since that reset, before the check (it has its mark and a ``lost_at``, and its STM began after
the last crash recovery, ``cortex.stm_reset_at()``, which a clean restart keeps), is left to
the check (``lost_reported`` false).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-03 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "stm_scopes",
        sa.Column("lost_pinned", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        schema="cortex",
    )
    op.add_column(
        "stm_scopes",
        sa.Column("lost_reported", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        schema="cortex",
    )
    bind = op.get_bind()
    checked = bind.execute(sa.text("SELECT EXISTS (SELECT 1 FROM cortex.stm_server)")).scalar_one()
    bind.execute(
        sa.text(
            "UPDATE cortex.stm_scopes s SET lost_pinned = true, lost_at = greatest(s.lost_at, s.began_at) "
            "WHERE s.lost_at IS NOT NULL AND (s.lost_at >= s.began_at OR :checked) "
            "AND NOT EXISTS (SELECT 1 FROM cortex.stm_marks m "
            "WHERE m.user_id = s.user_id AND m.session_id = s.session_id)"
        ),
        {"checked": checked},
    )
    op.execute(read_sql("functions/stm_loss/v3.sql"))
    bind.execute(
        sa.text(
            "UPDATE cortex.stm_scopes s SET lost_reported = false "
            "WHERE NOT :checked AND s.lost_at IS NOT NULL AND s.began_at >= cortex.stm_reset_at() "
            "AND EXISTS (SELECT 1 FROM cortex.stm_marks m "
            "WHERE m.user_id = s.user_id AND m.session_id = s.session_id)"
        ),
        {"checked": checked},
    )


def downgrade() -> None:
    # v1.sql creates the triggers with the functions: drop them first; v2 makes the check definer
    op.execute("DROP TRIGGER IF EXISTS stm_mark_scope ON cortex.stm_notes")
    op.execute("DROP TRIGGER IF EXISTS stm_unmark_emptied ON cortex.stm_notes")
    op.execute(read_sql("functions/stm_loss/v1.sql"))
    op.execute(read_sql("functions/stm_loss/v2.sql"))
    op.execute("DROP FUNCTION IF EXISTS cortex.stm_reset_at()")
    op.drop_column("stm_scopes", "lost_reported", schema="cortex")
    op.drop_column("stm_scopes", "lost_pinned", schema="cortex")
