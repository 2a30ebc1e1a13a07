"""cortex.stm_check() runs with its owner's rights

``functions/stm_loss/v2``: under Row-Level Security the check after a crash ran as the
application role, saw no tenant's STM scopes and pinned none, and any tenant could insert the
check's row first and hide the loss. Stored data is unchanged.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/stm_loss/v2.sql"))


def downgrade() -> None:
    op.execute("ALTER FUNCTION cortex.stm_check() SECURITY INVOKER RESET search_path")
