"""Touching reads lock their rows in one order: ``cortex.touch_notes``

A read that counts its notes as accessed (a search, ``get(touch=True)``, calute's shelf reads
and long-term search, a smart-collection search) updated the rows in the order of its own
plan, so two of them over overlapping notes could deadlock and one waited the server's
``deadlock_timeout`` (1 s) before being retried. ``cortex.touch_notes`` locks the LTM rows, then
the STM rows, each in id order, and every touching read calls it. Stored data is unchanged.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01 21:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/touch_notes/v1.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS cortex.touch_notes(text, uuid[], text)")
