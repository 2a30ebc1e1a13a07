"""Several embeddings per note (kind, window_no) and models above 2,000 dimensions (halfvec)

``cortex.embeddings`` is keyed (user_id, note_id, model, kind, window_no): ``kind`` 'text' is
the note's own text, window ``window_no`` of it (0 for a text that fits the model's window;
later windows of a long text follow), ``kind`` 'context' the note read with the conversation
before it. Search takes a note's best embedding. Existing rows become ('text', 0).
``register_embedding_model`` v2 accepts 1..4000 dimensions (halfvec index above 2,000), and
``search_notes`` v5 reads such models through that index. ``notes.seq`` (insertion order)
orders a session's notes that share a time (a conversation's turns), for the context embedding
and the neighbours of a note. The GIN index on ``notes.tsv`` goes:
full-text candidates come from ``cortex.bm25_postings`` (revision 0008).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 03:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH_SIGNATURE = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector, text[], real, boolean)"
)


def upgrade() -> None:
    op.add_column(
        "embeddings",
        sa.Column("kind", sa.Text(), server_default=sa.text("'text'"), nullable=False),
        schema="cortex",
    )
    op.add_column(
        "embeddings",
        sa.Column("window_no", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        schema="cortex",
    )
    op.create_check_constraint(
        op.f("ck_embeddings_kind_known"), "embeddings", "kind IN ('text', 'context')", schema="cortex"
    )
    op.create_check_constraint(
        op.f("ck_embeddings_window_no_range"), "embeddings", "window_no >= 0", schema="cortex"
    )
    op.drop_constraint(op.f("pk_embeddings"), "embeddings", schema="cortex", type_="primary")
    op.create_primary_key(
        op.f("pk_embeddings"),
        "embeddings",
        ["user_id", "note_id", "model", "kind", "window_no"],
        schema="cortex",
    )
    op.drop_constraint(
        op.f("ck_embedding_models_dim_range"), "embedding_models", schema="cortex", type_="check"
    )
    op.create_check_constraint(
        op.f("ck_embedding_models_dim_range"), "embedding_models", "dim BETWEEN 1 AND 4000", schema="cortex"
    )
    op.execute(read_sql("functions/register_embedding_model/v2.sql"))
    # the order of a session's notes: by time, then by insertion (turns that share a time)
    op.add_column(
        "notes",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        schema="cortex",
    )
    op.create_index(
        "ix_notes_session_order", "notes", ["user_id", "session_id", "created_at", "seq"], schema="cortex"
    )
    op.drop_index("ix_notes_user_session_created", table_name="notes", schema="cortex")
    # full-text search reads cortex.bm25_postings now: the GIN index on notes.tsv only cost writes
    op.drop_index("ix_notes_tsv", table_name="notes", schema="cortex", postgresql_using="gin")
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_SIGNATURE}")
    op.execute(read_sql("functions/search_notes/v5.sql"))


def downgrade() -> None:
    op.create_index(
        "ix_notes_user_session_created", "notes", ["user_id", "session_id", "created_at"], schema="cortex"
    )
    op.drop_index("ix_notes_session_order", table_name="notes", schema="cortex")
    op.drop_column("notes", "seq", schema="cortex")
    op.create_index("ix_notes_tsv", "notes", ["tsv"], unique=False, schema="cortex", postgresql_using="gin")
    op.execute("DROP FUNCTION IF EXISTS cortex.search_statement(text, int, text, text, boolean)")
    op.execute(f"DROP FUNCTION IF EXISTS {SEARCH_SIGNATURE}")
    op.execute(read_sql("functions/search_notes/v4.sql"))
    op.execute("DROP FUNCTION IF EXISTS cortex.embedding_index_ddl(text, int, boolean)")
    op.execute("DROP FUNCTION IF EXISTS cortex.embedding_index_type(int)")
    op.execute(read_sql("functions/register_embedding_model/v1.sql"))
    op.drop_constraint(
        op.f("ck_embedding_models_dim_range"), "embedding_models", schema="cortex", type_="check"
    )
    op.create_check_constraint(
        op.f("ck_embedding_models_dim_range"), "embedding_models", "dim BETWEEN 1 AND 2000", schema="cortex"
    )
    op.execute("DELETE FROM cortex.embeddings WHERE kind <> 'text' OR window_no <> 0")
    op.drop_constraint(op.f("pk_embeddings"), "embeddings", schema="cortex", type_="primary")
    op.create_primary_key(
        op.f("pk_embeddings"), "embeddings", ["user_id", "note_id", "model"], schema="cortex"
    )
    op.drop_constraint(op.f("ck_embeddings_window_no_range"), "embeddings", schema="cortex", type_="check")
    op.drop_constraint(op.f("ck_embeddings_kind_known"), "embeddings", schema="cortex", type_="check")
    op.drop_column("embeddings", "window_no", schema="cortex")
    op.drop_column("embeddings", "kind", schema="cortex")
