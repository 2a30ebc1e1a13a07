"""smart collections: category_counts, collections, collection jobs, the $under filter

``cortex.category_counts`` (per user and category prefix, kept exact by triggers on
``cortex.notes``) and ``cortex.collections`` (path, description, query helper, centroid,
memory_count); ``cortex.evolution_jobs`` takes jobs of kind ``collection`` that name a
``collection_path`` instead of a note (``functions/collections/v1``). ``functions/compile_filter/v3``
adds ``{"category": {"$under": "work"}}`` (whole dot-path segments). The counts are filled
from the notes stored before the upgrade; collections appear as their jobs run.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE_COLLECTION_JOB = "status IN ('queued', 'running') AND collection_path IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "category_counts",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("note_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "path", name=op.f("pk_category_counts")),
        schema="cortex",
    )
    op.create_table(
        "collections",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("query_helper", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("centroid", pgvector.sqlalchemy.vector.VECTOR(), nullable=True),
        sa.Column("memory_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("source", sa.Text(), server_default=sa.text("'offline'"), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "refreshed_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint("memory_count >= 0", name=op.f("ck_collections_memory_count_range")),
        sa.PrimaryKeyConstraint("user_id", "path", name=op.f("pk_collections")),
        schema="cortex",
    )
    op.add_column("evolution_jobs", sa.Column("collection_path", sa.Text(), nullable=True), schema="cortex")
    op.alter_column("evolution_jobs", "note_id", nullable=True, schema="cortex")
    op.create_check_constraint(
        op.f("ck_evolution_jobs_one_target"),
        "evolution_jobs",
        "num_nonnulls(note_id, collection_path) = 1",
        schema="cortex",
    )
    op.create_index(
        "uq_evolution_jobs_collection_active",
        "evolution_jobs",
        ["user_id", "collection_path", "kind"],
        unique=True,
        schema="cortex",
        postgresql_where=sa.text(ACTIVE_COLLECTION_JOB),
    )
    op.execute(read_sql("functions/collections/v1.sql"))
    op.execute(read_sql("functions/compile_filter/v3.sql"))
    op.execute(
        "INSERT INTO cortex.category_counts (user_id, path, note_count) "
        "SELECT n.user_id, p.path, count(*) FROM cortex.notes n, "
        "LATERAL unnest(cortex.category_prefixes(n.category)) AS p(path) "
        "WHERE n.merged_into IS NULL AND n.category IS NOT NULL GROUP BY n.user_id, p.path"
    )
    op.execute(
        "SELECT cortex.enqueue_collection_job(c.user_id, c.path) FROM cortex.category_counts c "
        "LEFT JOIN cortex.category_counts parent "
        "  ON parent.user_id = c.user_id AND parent.path = cortex.category_parent(c.path) "
        "WHERE c.note_count >= cortex.collection_min_notes() "
        "  AND NOT (coalesce(parent.note_count, 0) >= 30 AND c.note_count < 0.3 * parent.note_count) "
        "ORDER BY c.user_id, c.path"
    )
    for table in ("category_counts", "collections"):
        for statement in tenant_policy_sql(table):
            op.execute(statement)


def downgrade() -> None:
    op.execute("DROP FUNCTION cortex.compile_filter_value(text, text, jsonb, text, text)")
    op.execute(
        "ALTER FUNCTION cortex.compile_filter_value_v2(text, text, jsonb, text, text) RENAME TO compile_filter_value"
    )
    for event in ("insert", "delete", "update", "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS category_counts_{event} ON cortex.notes")
        op.execute(f"DROP FUNCTION IF EXISTS cortex.category_counts_on_{event}()")
    for signature in (
        "category_count_apply(text[], text[], int)",
        "schedule_collections(text[], text[])",
        "enqueue_collection_job(text, text)",
        "collection_min_notes()",
        "category_parent(text)",
        "category_under(text, text)",
        "category_prefixes(text)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS cortex.{signature}")
    op.execute("DELETE FROM cortex.evolution_jobs WHERE collection_path IS NOT NULL")
    op.drop_index(
        "uq_evolution_jobs_collection_active",
        table_name="evolution_jobs",
        schema="cortex",
        postgresql_where=sa.text(ACTIVE_COLLECTION_JOB),
    )
    op.drop_constraint(op.f("ck_evolution_jobs_one_target"), "evolution_jobs", schema="cortex", type_="check")
    op.alter_column("evolution_jobs", "note_id", nullable=False, schema="cortex")
    op.drop_column("evolution_jobs", "collection_path", schema="cortex")
    op.drop_table("collections", schema="cortex")
    op.drop_table("category_counts", schema="cortex")
