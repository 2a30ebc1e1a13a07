"""search_notes v4: BM25 statistics and postings kept by triggers; a pool that scales with the limit

Adds ``cortex.bm25_corpus`` (per tenant: N, total length), ``cortex.bm25_terms`` (per tenant
and lexeme: df) and ``cortex.bm25_postings`` (per tenant, note and lexeme: tf, dl, impact),
kept exact by the triggers of ``bm25_index/v1.sql`` and back-filled here from the existing
notes (one statement; on a large database run it at a quiet time). Replaces
``cortex.search_notes`` v3 with v4 (same signature and results; see the SQL file).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH_SIGNATURE = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector, text[], real, boolean)"
)
BM25_TABLES = ("bm25_corpus", "bm25_terms", "bm25_postings")


def upgrade() -> None:
    op.create_table(
        "bm25_corpus",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("doc_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("total_length", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_bm25_corpus")),
        schema="cortex",
    )
    op.create_table(
        "bm25_terms",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "lexeme", name=op.f("pk_bm25_terms")),
        schema="cortex",
    )
    op.create_table(
        "bm25_postings",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("note_id", sa.UUID(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("tf", sa.Integer(), nullable=False),
        sa.Column("dl", sa.Integer(), nullable=False),
        sa.Column("impact", sa.REAL(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "note_id", "lexeme", name=op.f("pk_bm25_postings")),
        schema="cortex",
    )
    op.execute(
        "CREATE INDEX ix_bm25_postings_impact ON cortex.bm25_postings (user_id, lexeme, impact DESC, note_id)"
    )
    op.execute(read_sql("functions/bm25_index/v1.sql"))
    # back-fill: every current note through the same function the triggers use
    op.execute(
        "SELECT cortex.bm25_apply(array_agg(user_id), array_agg(id), array_agg(tsv), 1) "
        "FROM (SELECT user_id, id, tsv FROM cortex.notes WHERE merged_into IS NULL ORDER BY user_id, id) n"
    )
    for table in BM25_TABLES:
        for statement in tenant_policy_sql(table):
            op.execute(statement)
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_SIGNATURE}")
    op.execute(read_sql("functions/search_notes/v4.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_SIGNATURE}")
    op.execute(read_sql("functions/search_notes/v3.sql"))
    for trigger in ("bm25_insert", "bm25_delete", "bm25_update", "bm25_truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON cortex.notes")
    for fn in (
        "bm25_on_insert()",
        "bm25_on_delete()",
        "bm25_on_update()",
        "bm25_on_truncate()",
        "bm25_apply(text[], uuid[], tsvector[], int)",
        "bm25_impact(int, int, float8)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS cortex.{fn}")
    for table in reversed(BM25_TABLES):
        op.drop_table(table, schema="cortex")
