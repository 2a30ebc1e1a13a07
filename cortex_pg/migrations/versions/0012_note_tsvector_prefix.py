"""Full text for every script: tsv = cortex.note_tsvector(content)

A note of up to 500,000 characters is stored whole in any script: the generated column
``tsv`` of ``cortex.notes`` and ``cortex.stm_notes`` becomes ``cortex.note_tsvector(content)``
(``functions/note_tsvector/v1.sql``: the whole text when its tsvector fits PostgreSQL's 1 MB
limit, else the longest fitting prefix, cut at a character boundary). Every note stored before
this revision fits, so every stored tsvector (and the BM25 statistics read from it) is
unchanged. The column is dropped and re-added (``ALTER COLUMN ... SET EXPRESSION`` needs
PostgreSQL 17); the GIN index of ``stm_notes.tsv`` (``notes.tsv`` has none since 0011) and
the ``bm25_update`` trigger, which reads ``notes.tsv``, are re-created.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_EXPR = "to_tsvector('english'::regconfig, content)"
NEW_EXPR = "cortex.note_tsvector(content)"

# the trigger of functions/bm25_index/v1.sql that reads tsv (so depends on the column)
BM25_UPDATE_TRIGGER = """
CREATE TRIGGER bm25_update AFTER UPDATE ON cortex.notes
    FOR EACH ROW WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv
                       OR (OLD.merged_into IS NULL) <> (NEW.merged_into IS NULL)
                       OR OLD.user_id IS DISTINCT FROM NEW.user_id OR OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION cortex.bm25_on_update()
"""


def _set_expression(expr: str) -> None:
    op.execute("DROP TRIGGER bm25_update ON cortex.notes")
    for table in ("notes", "stm_notes"):
        op.execute(f"ALTER TABLE cortex.{table} DROP COLUMN tsv")
        op.execute(f"ALTER TABLE cortex.{table} ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({expr}) STORED")
        if table == "stm_notes":
            op.execute("CREATE INDEX ix_stm_notes_tsv ON cortex.stm_notes USING gin (tsv)")
    op.execute(BM25_UPDATE_TRIGGER)


def upgrade() -> None:
    op.execute(read_sql("functions/note_tsvector/v1.sql"))
    _set_expression(NEW_EXPR)


def downgrade() -> None:
    _set_expression(OLD_EXPR)
    op.execute("DROP FUNCTION cortex.note_tsvector(text)")
