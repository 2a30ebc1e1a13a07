"""linked_notes v2 and related_entities v2: graph walks one hop at a time, not path by path

``cortex.linked_notes`` and ``cortex.related_entities`` enumerated every simple path up to the
requested depth, so a densely linked neighbourhood took seconds to hours (10 notes all linked
to each other: 8 s at depth 10; 200 notes with 4 links each: 66 s at depth 8) and a request
for depth 10 could keep a server process busy long after its client gave up. Version 2 walks
hop by hop and keeps one walk per note and hop: its cost grows with the links within reach.
Results are version 1's. New: the composite type ``cortex.link_walk``.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02 07:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(read_sql("functions/linked_notes/v2.sql"))
    op.execute(read_sql("functions/related_entities/v2.sql"))


def downgrade() -> None:
    op.execute(read_sql("functions/related_entities/v1.sql"))
    op.execute(read_sql("functions/linked_notes/v1.sql"))
    op.execute("DROP TYPE cortex.link_walk")
