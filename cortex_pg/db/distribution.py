"""How the cortex schema is laid out on Citus (distributed PostgreSQL), as data and as SQL.

Every tenant table is hash-distributed by ``user_id`` and co-located with ``cortex.notes``, so
one user's rows of every table live in one shard group on one worker; the global tables are
reference tables (a copy on every node); ``alembic_version`` stays on the coordinator. The
SQL functions that take a user are distributed functions with that user argument, so a
``SELECT cortex.search_notes('alice', ...)`` can be delegated to the worker that holds alice.

The constants below are the single source: ``tests/test_distribution.py`` checks the migrated
catalog against them (a new table, unique index or foreign key without ``user_id`` fails),
``docs/scale-out.md`` shows the statements :func:`statements` renders, and the one-shot
service of ``docker-compose.citus.yml`` runs them::

    DATABASE_URL=postgresql://... python -m cortex_pg.db.distribution          # apply
    DATABASE_URL=postgresql://... python -m cortex_pg.db.distribution --print  # show only

Tables named here that a database does not have yet (at an older revision) are skipped, so the statements work for any
revision; run the module again after an upgrade that adds tables (it skips tables and
functions that are already distributed).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from cortex_pg.config import SCHEMA

DISTRIBUTION_COLUMN = "user_id"

#: Global tables: one copy on every node. A foreign key from a distributed table to one of
#: them is allowed; nothing here references a distributed table.
REFERENCE_TABLES: tuple[str, ...] = (
    "embedding_models",  # the model registry (name -> dimension, the active model)
    "note_ids",  # global note-id registry: an id belongs to one tenant (id PK, UNIQUE (user_id, id))
    "api_keys",  # the HTTP service's keys (hash -> user_id): looked up before the tenant is known
)

#: Tables that stay on the coordinator only (bookkeeping, never joined with tenant data).
COORDINATOR_TABLES: tuple[str, ...] = (
    "alembic_version",
    "stm_server",  # one row: has the server been reset since the last STM check (stm_loss/v1.sql)
)

#: The co-location anchor: every distributed table is co-located with it.
COLOCATE_WITH = "notes"

#: Tenant tables, distributed by ``user_id``, in the order they are distributed: a table
#: comes after every table its foreign keys reference (notes first, entities before
#: mentions and relationships).
DISTRIBUTED_TABLES: tuple[str, ...] = (
    "notes",
    "stm_notes",
    "embeddings",
    "note_links",
    "note_history",
    "evolution_jobs",
    "entities",
    "entity_mentions",
    "relationships",
    "context_frames",
    "user_preferences",
    "bm25_corpus",  # per-tenant BM25 statistics (document count, total length)
    "bm25_terms",  # per-tenant term document frequencies (user_id, lexeme, df)
    "bm25_postings",  # per-tenant inverted index (user_id, note_id, lexeme): tf, dl, impact
    "stm_scopes",  # sessions that had STM: began_at, lost_at (logged)
    "stm_marks",  # their unlogged twins, emptied with stm_notes by a worker's crash recovery
    "category_counts",  # notes per category prefix (user_id, path), kept by triggers on notes
    "collections",  # smart collections (user_id, path): description, query helper, centroid
    "speaker_counts",  # notes per speaker (user_id, words), kept by triggers on notes
)

#: Functions that act for one user: distributed with that argument and co-located with
#: notes, so a top-level call runs on the worker holding the user's shard group.
TENANT_FUNCTIONS: dict[str, str] = {
    "search_notes": "p_user_id",
    "linked_notes": "p_user_id",  # the (user, note, depth, strength) overload only
    "related_entities": "p_user_id",
    "stm_recent": "p_user_id",
    "context_push": "p_user_id",
    "context_pop": "p_user_id",
    "context_peek": "p_user_id",
    "context_lock": "p_user_id",
    "assert_relationship": "p_user_id",
    "forget_note_entities": "p_user_id",
    "touch_notes": "p_user_id",
    "query_without_speakers": "p_user_id",  # reads the user's speaker_counts
}

#: Settings every node needs before tables with triggers are distributed: the note triggers
#: write history and entity rows of the same user (co-located, so safe).
SESSION_SETTINGS: tuple[str, ...] = ("SET citus.enable_unsafe_triggers TO on",)

#: Worker defaults for HNSW scans that do not come through a delegated search_notes call
#: (search_notes sets both per transaction itself; these cover a call run on the coordinator).
WORKER_DEFAULTS: dict[str, str] = {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": "250"}


@dataclass(frozen=True)
class Function:
    """One function of the cortex schema: ``signature`` as ``regprocedure`` prints it."""

    name: str
    signature: str
    arg_names: tuple[str, ...]
    is_trigger: bool


def _q(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def existing_tables(conn: Connection) -> set[str]:
    """Names of the ordinary (and unlogged) tables of the cortex schema."""
    return set(
        conn.execute(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :schema AND c.relkind IN ('r', 'p')"
            ),
            {"schema": SCHEMA},
        ).scalars()
    )


def functions(conn: Connection) -> list[Function]:
    """The functions of the cortex schema, by signature."""
    rows = conn.execute(
        text(
            "SELECT p.proname, p.oid::regprocedure::text, coalesce(p.proargnames, '{}'), "
            "       p.prorettype = 'trigger'::regtype "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = :schema AND p.prokind = 'f' ORDER BY 2"
        ),
        {"schema": SCHEMA},
    ).all()
    return [Function(r[0], r[1], tuple(r[2]), r[3]) for r in rows]


def statements(tables: set[str], funcs: Sequence[Function]) -> list[str]:
    """The statements that distribute a migrated database, in the order they must run.

    Args:
        tables: the cortex tables that exist (from :func:`existing_tables`); listed tables
            that do not exist are skipped.
        funcs: the cortex functions (from :func:`functions`).

    Order: settings, reference tables, distributed tables (``notes`` first, every table after
    the tables it references), worker defaults, helper functions (propagated to every node,
    no distribution argument), then the tenant functions (distribution argument, co-located
    with notes). Trigger functions are not listed: Citus propagates them with their tables.
    """
    out = list(SESSION_SETTINGS)
    for t in REFERENCE_TABLES:
        if t in tables:
            out.append(f"SELECT create_reference_table({_q(f'{SCHEMA}.{t}')})")
    anchor = f"{SCHEMA}.{COLOCATE_WITH}"
    for t in DISTRIBUTED_TABLES:
        if t not in tables:
            continue
        colocate = "none" if t == COLOCATE_WITH else anchor
        out.append(
            f"SELECT create_distributed_table({_q(f'{SCHEMA}.{t}')}, {_q(DISTRIBUTION_COLUMN)}, "
            f"colocate_with => {_q(colocate)})"
        )
    for name, value in WORKER_DEFAULTS.items():
        out.append(
            "SELECT run_command_on_workers(format('ALTER DATABASE %I SET "
            f"{name} = %L', current_database(), {_q(value)}))"
        )
    tenant, helpers = [], []
    for f in funcs:
        if f.is_trigger:
            continue
        arg = TENANT_FUNCTIONS.get(f.name)
        if arg is not None and arg in f.arg_names:
            tenant.append(
                f"SELECT create_distributed_function({_q(f.signature)}, "
                f"distribution_arg_name => {_q(arg)}, colocate_with => {_q(anchor)})"
            )
        else:
            helpers.append(f"SELECT create_distributed_function({_q(f.signature)})")
    return out + helpers + tenant


def statements_for(conn: Connection) -> list[str]:
    """:func:`statements` for the database behind ``conn``."""
    return statements(existing_tables(conn), functions(conn))


def is_distributed(conn: Connection) -> bool:
    """Whether the database behind ``conn`` runs Citus (its catalog ``pg_dist_partition``
    exists); asked once per pooled connection and kept in ``conn.info``. Statements that read
    several tenants at once go to every shard there, so callers use per-tenant ones."""
    known = conn.info.get("cortex_pg.distributed")
    if known is None:
        found = conn.execute(text("SELECT to_regclass('pg_catalog.pg_dist_partition')")).scalar()
        known = conn.info["cortex_pg.distributed"] = found is not None
    return bool(known)


def _already_distributed(conn: Connection) -> tuple[set[str], set[str]]:
    """Tables and functions Citus already knows (empty sets without Citus)."""
    if conn.execute(text("SELECT to_regclass('pg_catalog.pg_dist_partition')")).scalar() is None:
        return set(), set()
    tables = set(conn.execute(text("SELECT logicalrelid::regclass::text FROM pg_dist_partition")).scalars())
    funcs = set(
        conn.execute(
            text(
                "SELECT objid::regprocedure::text FROM pg_catalog.pg_dist_object "
                "WHERE classid = 'pg_proc'::regclass"
            )
        ).scalars()
    )
    return tables, funcs


def apply(conn: Connection) -> list[str]:
    """Run the statements on ``conn`` (the coordinator), skipping objects already distributed.

    Returns:
        The statements run, in order.
    """
    done_tables, done_funcs = _already_distributed(conn)
    ran = []
    for stmt in statements_for(conn):
        if any(_q(t) in stmt for t in done_tables) or any(_q(f) in stmt for f in done_funcs):
            continue
        conn.execute(text(stmt))
        ran.append(stmt)
    return ran


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cortex_pg.db.distribution [--print]`` against ``DATABASE_URL``."""
    from cortex_pg.db.engine import create_engine_for

    parser = argparse.ArgumentParser(description="Distribute a migrated cortex-pg database on Citus.")
    parser.add_argument("--print", action="store_true", help="print the statements, run nothing")
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)
    if not args.url:
        print("give --url or DATABASE_URL", file=sys.stderr)
        return 2
    engine = create_engine_for(args.url)
    try:
        # autocommit: each statement is its own transaction (Citus creates shards and
        # propagates functions per statement); the SET lasts for the session
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if args.print:
                for stmt in statements_for(conn):
                    print(stmt + ";")
                return 0
            for stmt in apply(conn):
                print(stmt + ";")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
