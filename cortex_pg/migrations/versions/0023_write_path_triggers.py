"""Write path: BM25 postings inserted without an upsert; note history written per statement

``cortex.bm25_apply`` v2 inserts the postings of added notes instead of upserting them (an
added note has no postings yet; the upsert's speculative insertion doubled the statement's
time), and the history of inserted notes is written by one statement-level trigger with a
transition table (``cortex.record_note_history_inserts``) instead of a PL/pgSQL call per row.
Updates and deletes keep their per-row history trigger. ``TRUNCATE cortex.notes`` now empties
the postings too (v1 left them), and the postings an earlier TRUNCATE left are deleted (those of
notes no longer in the corpus, and those of words a note added again with its id no longer
has). Other stored data is unchanged.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-01 18:00:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# postings that are not those of a note in the corpus: only a TRUNCATE of cortex.notes under
# v1 left them. Either the note is gone, or a note was added again with the same id and other
# text, and v1's upsert rewrote the postings of its new words but kept those of words it lost,
# with the old length.
DELETE_STALE_POSTINGS = """
DELETE FROM cortex.bm25_postings p
WHERE NOT EXISTS (SELECT 1 FROM cortex.notes n
                  WHERE n.user_id = p.user_id AND n.id = p.note_id AND n.merged_into IS NULL
                    AND length(n.tsv) = p.dl AND p.lexeme = ANY (tsvector_to_array(n.tsv)))
"""


def upgrade() -> None:
    op.execute(read_sql("functions/bm25_index/v2.sql"))
    op.execute(read_sql("functions/note_triggers/v2.sql"))
    op.execute(DELETE_STALE_POSTINGS)


def _function(sql: str, name: str) -> str:
    """The ``CREATE OR REPLACE FUNCTION <name>`` statement of a versioned file (to its ``$$;``)."""
    found = re.search(rf"CREATE OR REPLACE FUNCTION {re.escape(name)}\(.*?\$\$;", sql, re.S)
    if found is None:
        raise RuntimeError(f"{name} is not defined in the file")
    return found.group(0)


def downgrade() -> None:
    v1 = read_sql("functions/bm25_index/v1.sql")
    op.execute(_function(v1, "cortex.bm25_apply"))
    op.execute(_function(v1, "cortex.bm25_on_truncate"))
    op.execute("DROP TRIGGER IF EXISTS notes_history_insert ON cortex.notes")
    op.execute("DROP TRIGGER IF EXISTS notes_history ON cortex.notes")
    op.execute(
        "CREATE TRIGGER notes_history AFTER INSERT OR UPDATE OR DELETE ON cortex.notes "
        "FOR EACH ROW EXECUTE FUNCTION cortex.record_note_history()"
    )
    op.execute("DROP FUNCTION IF EXISTS cortex.record_note_history_inserts()")
