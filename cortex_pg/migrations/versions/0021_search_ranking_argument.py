"""search_notes v8: the ranking's constants as an argument (p_ranking); candidates and scoring apart

``cortex.search_notes`` v8 takes ``p_ranking jsonb`` (fusion, vector_weight, context_weight,
length_prior, smoothing_prev, smoothing_next, expansion, rrf_k; each optional) and ranks
exactly as v7 without it. The signatures of ``search_notes`` and ``search_statement`` change,
so v7's are dropped first. It plans
only its candidate statement (``cortex.search_statement``) per call; the scoring is static SQL
whose plan is kept for the session, with the signals of the new ``cortex.search_signals``.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

V7_SIGNATURE = (
    "cortex.search_notes(text, vector, text, int, real, timestamptz, timestamptz, jsonb, timestamptz, text, "
    "text, text, vector, text[], real, boolean)"
)
V8_SIGNATURE = V7_SIGNATURE[:-1] + ", jsonb)"
V7_STATEMENT = "cortex.search_statement(text, int, text, text, boolean)"
V8_STATEMENT = "cortex.search_statement(text, int, text, text, boolean, boolean, boolean, text, boolean)"


def upgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V7_SIGNATURE}")
    op.execute(f"DROP FUNCTION IF EXISTS {V7_STATEMENT}")
    op.execute(read_sql("functions/search_notes/v8.sql"))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {V8_SIGNATURE}")
    op.execute(f"DROP FUNCTION IF EXISTS {V8_STATEMENT}")
    op.execute(
        "DROP FUNCTION IF EXISTS cortex.search_signals(text, uuid[], text, vector, text[], float8, float8, "
        "text, float8, float8)"
    )
    op.execute(read_sql("functions/search_notes/v7.sql"))
