"""Global note ids: the cortex.note_ids registry, referenced by notes and stm_notes

An id can never be stored for two tenants (see ``note_ids/v1.sql``). The back-fill registers
every stored id; when the database already holds one id under two tenants (possible before
this revision), the upgrade stops and names them, so nothing is changed behind the owner's back.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 02:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from cortex_pg.db.migrate import read_sql, tenant_policy_sql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARED_IDS = """
SELECT id, array_agg(DISTINCT user_id ORDER BY user_id) AS users
FROM (SELECT id, user_id FROM cortex.notes UNION ALL SELECT id, user_id FROM cortex.stm_notes) x
GROUP BY id HAVING count(DISTINCT user_id) > 1
ORDER BY id LIMIT 20
"""


def upgrade() -> None:
    shared = op.get_bind().execute(sa.text(SHARED_IDS)).all()
    if shared:
        listed = "; ".join(f"{r.id} ({', '.join(r.users)})" for r in shared)
        raise RuntimeError(
            "note ids used by more than one tenant must be renamed before upgrading "
            f"(UPDATE cortex.notes SET id = gen_random_uuid() WHERE ...): {listed}"
        )
    op.create_table(
        "note_ids",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_note_ids")),
        sa.UniqueConstraint("user_id", "id", name=op.f("uq_note_ids_user_id_id")),
        schema="cortex",
    )
    op.execute(
        "INSERT INTO cortex.note_ids (id, user_id) "
        "SELECT id, user_id FROM cortex.notes UNION SELECT id, user_id FROM cortex.stm_notes"
    )
    for table in ("notes", "stm_notes"):
        op.create_foreign_key(
            op.f(f"fk_{table}_user_id_id_note_ids"),
            table,
            "note_ids",
            ["user_id", "id"],
            ["user_id", "id"],
            source_schema="cortex",
            referent_schema="cortex",
        )
    op.execute(read_sql("functions/note_ids/v1.sql"))
    for statement in tenant_policy_sql("note_ids"):
        op.execute(statement)


def downgrade() -> None:
    for table in ("notes", "stm_notes"):
        op.execute(f"DROP TRIGGER IF EXISTS register_note_id ON cortex.{table}")
        op.drop_constraint(f"fk_{table}_user_id_id_note_ids", table, schema="cortex", type_="foreignkey")
    op.execute("DROP FUNCTION IF EXISTS cortex.register_note_id()")
    op.drop_table("note_ids", schema="cortex")
