"""Alembic helpers used by the store, the CLI and the tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from cortex_pg.config import SCHEMA


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations (works after ``pip install``)."""
    cfg = Config()
    cfg.set_main_option("script_location", "cortex_pg:migrations")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision the installed package knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table_schema": SCHEMA})
        return ctx.get_current_revision()


MIGRATION_LOCK = 0x636F7274  # "cort": advisory lock key held while migrating


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection holding the session advisory lock that serialises migrations.

    Several processes opening a new database at once (each with ``auto_migrate``) take turns:
    the first migrates, the others then find the schema at the head.
    """
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        conn.commit()
        try:
            yield conn
        finally:
            conn.rollback()
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            conn.commit()


def _run(engine: Engine, fn, revision: str) -> None:  # noqa: ANN001
    from alembic.util.exc import CommandError

    with _migration_lock(engine) as conn:
        try:
            fn(alembic_config(conn), revision)
        except CommandError as exc:
            from cortex_pg.errors import ValidationError

            raise ValidationError("revision", str(exc)) from None
        conn.commit()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run migrations up to ``revision`` (default head) in the database of ``engine``.

    Serialised across processes by an advisory lock; a database already there is left alone.

    Raises:
        ValidationError: unknown revision.
    """
    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Run migrations down to ``revision`` (``base`` removes every cortex object and its data).

    Raises:
        ValidationError: unknown revision, or a revision above the current one.
    """
    _run(engine, command.downgrade, revision)


def read_sql(relative: str) -> str:
    """Text of a versioned SQL file, e.g. ``functions/search_notes/v1.sql``.

    Files are read from the package (``cortex_pg/sql``; ``sql/`` at the repository root is a
    link to it), never "whatever the file says today" under another name: each migration
    names the exact version it applies.
    """
    node = resources.files("cortex_pg").joinpath("sql")
    for part in Path(relative).parts:
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def has_vector_extension(conn: Connection) -> bool:
    return conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first() is not None


def include_object(obj, name, type_, reflected, compare_to) -> bool:  # noqa: ANN001
    """Compare only objects of the cortex schema that the models declare.

    Per-model HNSW indexes (``ix_embeddings_hnsw_*``) and objects created by the SQL files
    (functions, triggers) are not models; a reflected object with no model counterpart is
    one of those and is skipped.
    """
    if type_ == "table":
        return getattr(obj, "schema", None) == SCHEMA and name != "alembic_version"
    if type_ == "index" and name and name.startswith("ix_embeddings_hnsw_"):
        return False
    return not (reflected and compare_to is None and type_ in ("index", "unique_constraint"))


def tenant_policy_sql(table: str) -> list[str]:
    """The statements that put a tenant table under the Row-Level Security policy of
    ``policies/tenant_rls/v1.sql`` (``user_id = current_setting('cortex.user_id')``), for the
    tables later migrations add. ``table`` is a table name of the ``cortex`` schema written in
    the migration itself."""
    return [
        f"ALTER TABLE cortex.{table} ENABLE ROW LEVEL SECURITY",
        f"CREATE POLICY tenant_isolation ON cortex.{table} "
        "USING (user_id = current_setting('cortex.user_id', true)) "
        "WITH CHECK (user_id = current_setting('cortex.user_id', true))",
    ]
