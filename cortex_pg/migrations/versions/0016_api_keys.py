"""API keys of the HTTP service: cortex.api_keys and cortex.api_key_user

``cortex.api_keys`` binds the SHA-256 (hex) of each bearer key to one ``user_id``; the key
itself is never stored. Row-Level Security is enabled with no policy, so the service's
non-owner role reads none of it; ``cortex.api_key_user(hash)`` (``functions/api_keys/v1.sql``,
SECURITY DEFINER) resolves a key to its user. A global table (with Citus, a reference table):
a key is looked up before its tenant is known. New table and function only; no lock on
existing data.

Revision ID: 0016
Revises: 0013
Create Date: 2026-12-01 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql

revision: str = "0016"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("prefix", sa.Text(), nullable=False),
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("revoked_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.CheckConstraint("key_hash ~ '^[0-9a-f]{64}$'", name=op.f("ck_api_keys_key_hash_sha256_hex")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        schema="cortex",
    )
    op.create_index(op.f("ix_api_keys_user_id"), "api_keys", ["user_id"], schema="cortex")
    op.execute("ALTER TABLE cortex.api_keys ENABLE ROW LEVEL SECURITY")
    op.execute(read_sql("functions/api_keys/v1.sql"))


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS cortex.api_key_user(text)")
    op.drop_table("api_keys", schema="cortex")
