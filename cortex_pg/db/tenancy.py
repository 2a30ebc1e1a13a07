"""Tenant isolation with Row-Level Security (``isolation="rls"``).

The migrations put a ``tenant_isolation`` policy on every tenant table:
``user_id = current_setting('cortex.user_id', true)``. With isolation on, the store's
connections act as a dedicated non-owner role (``SET ROLE cortex_app`` on connect), and every
transaction starts with ``SELECT set_config('cortex.user_id', <tenant>, true)`` (a
transaction-local setting, as Citus needs), the tenant coming from :func:`tenant_scope`. A
query that forgets its ``WHERE user_id = ...`` still sees one tenant's rows only; with no
tenant set it sees none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from psycopg import sql as psql
from sqlalchemy import Connection, Engine, event, text

from cortex_pg.errors import ValidationError

DEFAULT_APP_ROLE = "cortex_app"

current_tenant: ContextVar[str | None] = ContextVar("cortex_pg_tenant", default=None)


@contextmanager
def tenant_scope(user_id: str) -> Iterator[None]:
    """Transactions begun inside this block act for ``user_id`` (under RLS)."""
    token = current_tenant.set(user_id)
    try:
        yield
    finally:
        current_tenant.reset(token)


def ensure_app_role(conn: Connection, role: str = DEFAULT_APP_ROLE) -> None:
    """Create the non-owner role (if missing), grant it the cortex objects, and let the
    current user ``SET ROLE`` to it. Needs CREATEROLE (or a role created by an administrator).

    Raises:
        ValidationError: ``role`` is not a simple identifier.
    """
    if not role.replace("_", "").isalnum():
        raise ValidationError("app_role", f"{role!r} is not a simple role name")
    ident = psql.Identifier(role).as_string(None)
    exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
    if not exists:
        conn.execute(text(f"CREATE ROLE {ident} NOLOGIN NOBYPASSRLS"))
    for stmt in (
        f"GRANT USAGE ON SCHEMA cortex TO {ident}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cortex TO {ident}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA cortex TO {ident}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cortex TO {ident}",
        f"REVOKE INSERT, UPDATE, DELETE ON cortex.embedding_models FROM {ident}",
        # tables no tenant owns: the schema's revision (a tenant deleting it stopped every
        # store from opening) and the STM check's row, which cortex.stm_check() (with its
        # owner's rights) writes once per server run (written by a tenant first, the check
        # would find it and report no loss)
        f"REVOKE INSERT, UPDATE, DELETE ON cortex.alembic_version FROM {ident}",
        f"REVOKE INSERT, UPDATE, DELETE ON cortex.stm_server FROM {ident}",
    ):
        conn.execute(text(stmt))
    member = conn.execute(text("SELECT pg_has_role(current_user, :r, 'MEMBER')"), {"r": role}).scalar()
    if not member:
        conn.execute(text(f"GRANT {ident} TO CURRENT_USER"))


def install(engine: Engine, role: str = DEFAULT_APP_ROLE) -> None:
    """Make ``engine``'s connections act as ``role`` and set the tenant per transaction."""
    ident = psql.Identifier(role).as_string(None)

    @event.listens_for(engine, "connect")
    def _set_role(dbapi_conn, _record) -> None:  # noqa: ANN001
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET ROLE {ident}")
        dbapi_conn.commit()

    @event.listens_for(engine, "begin")
    def _set_tenant(conn: Connection) -> None:
        conn.exec_driver_sql("SELECT set_config('cortex.user_id', %s, true)", (current_tenant.get() or "",))
