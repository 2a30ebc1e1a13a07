"""The schema stays distributable on Citus (cortex_pg/db/distribution.py is the source).

- Schema: every table of a migrated database is listed once (reference, distributed or
  coordinator-only); every distributed table has ``user_id``, every primary key and unique
  index of one includes it, every foreign key from one carries it to a co-located table or
  points at a reference table. Checked on the real catalog, and shown to fail on bad objects.
- Statements: the distribution statements run against plain PostgreSQL with
  ``create_reference_table``, ``create_distributed_table``, ``create_distributed_function``
  and ``run_command_on_workers`` stubbed by SQL functions that check their arguments and the
  order (a table after the tables it references, co-location with a table already
  distributed, the distribution argument exists) and record each call. No Citus cluster runs
  here (no Docker engine in CI); the compose file is checked for what it runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from cortex_pg.db import distribution
from cortex_pg.db.engine import create_engine_for

ROOT = Path(__file__).resolve().parents[1]

COLUMNS_OF = """
SELECT array_agg(a.attname ORDER BY k.ord)
FROM unnest(:keys) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = :rel AND a.attnum = k.attnum
"""

UNIQUE_INDEXES = """
SELECT c.relname AS tbl, i.indexrelid::regclass::text AS idx,
       ARRAY(SELECT a.attname FROM unnest(i.indkey) k JOIN pg_attribute a
             ON a.attrelid = i.indrelid AND a.attnum = k) AS cols
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'cortex' AND (i.indisunique OR i.indisprimary OR i.indisexclusion)
"""

FOREIGN_KEYS = """
SELECT con.conname, src.relname AS src, dst.relname AS dst,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, o)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.o) AS src_cols,
       ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(n, o)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.o) AS dst_cols
FROM pg_constraint con
JOIN pg_class src ON src.oid = con.conrelid JOIN pg_namespace n ON n.oid = src.relnamespace
JOIN pg_class dst ON dst.oid = con.confrelid
WHERE n.nspname = 'cortex' AND con.contype = 'f'
"""

USER_ID_COLUMNS = """
SELECT c.relname, a.attnotnull, format_type(a.atttypid, a.atttypmod)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
WHERE n.nspname = 'cortex' AND c.relkind IN ('r', 'p')
"""


def distribution_problems(conn) -> list[str]:
    """What keeps the migrated schema behind ``conn`` from distributing by user_id (empty: none)."""
    problems = []
    ref, dist, coord = (
        set(distribution.REFERENCE_TABLES),
        set(distribution.DISTRIBUTED_TABLES),
        set(distribution.COORDINATOR_TABLES),
    )
    for name, a, b in (("reference", ref, dist), ("reference", ref, coord), ("distributed", dist, coord)):
        if a & b:
            problems.append(f"listed twice ({name} and another list): {sorted(a & b)}")
    for t in sorted(distribution.existing_tables(conn)):
        if t not in ref | dist | coord:
            problems.append(f"table {t} is in no list of cortex_pg/db/distribution.py")
    user_id = {r[0]: (r[1], r[2]) for r in conn.execute(text(USER_ID_COLUMNS))}
    for t in sorted(distribution.existing_tables(conn) & dist):
        if t not in user_id:
            problems.append(f"distributed table {t} has no user_id column")
        elif user_id[t] != (True, "text"):
            problems.append(f"distributed table {t}: user_id must be text NOT NULL, is {user_id[t]}")
    for r in conn.execute(text(UNIQUE_INDEXES)).mappings():
        if r["tbl"] in dist and "user_id" not in r["cols"]:
            problems.append(f"unique index {r['idx']} on {r['tbl']} lacks user_id ({r['cols']})")
    for r in conn.execute(text(FOREIGN_KEYS)).mappings():
        pairs = dict(zip(r["src_cols"], r["dst_cols"], strict=True))
        if r["src"] in dist and r["dst"] in dist:
            if pairs.get("user_id") != "user_id":
                problems.append(
                    f"foreign key {r['conname']} {r['src']}{r['src_cols']} -> {r['dst']}{r['dst_cols']} "
                    "does not carry user_id to user_id"
                )
        elif r["src"] in dist and r["dst"] in ref:
            continue  # distributed -> reference: allowed
        elif r["src"] in ref and r["dst"] in ref:
            continue
        else:
            problems.append(f"foreign key {r['conname']} {r['src']} -> {r['dst']} crosses table kinds")
    return problems


@pytest.fixture
def engine(db_url):
    e = create_engine_for(db_url)
    yield e
    e.dispose()


def test_migrated_schema_distributes_by_user_id(engine):
    with engine.connect() as conn:
        tables = distribution.existing_tables(conn)
        assert distribution_problems(conn) == []
    # the lists name every table of the head revision (tables of later migrations may be missing)
    assert {"notes", "embeddings", "embedding_models", "alembic_version"} <= tables
    assert len(tables - set(distribution.COORDINATOR_TABLES)) >= 12


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        (
            "CREATE TABLE cortex.widgets (user_id text NOT NULL, id int, PRIMARY KEY (user_id, id))",
            "table widgets is in no list",
        ),
        (
            "CREATE UNIQUE INDEX uq_entities_name_only ON cortex.entities (normalized_name)",
            "unique index cortex.uq_entities_name_only on entities lacks user_id",
        ),
        (
            "CREATE UNIQUE INDEX uq_notes_id_only ON cortex.notes (id); "
            "ALTER TABLE cortex.note_links ADD CONSTRAINT fk_bad FOREIGN KEY (target_id) "
            "REFERENCES cortex.notes (id)",
            "foreign key fk_bad note_links['target_id'] -> notes['id'] does not carry user_id",
        ),
        (
            "CREATE UNIQUE INDEX uq_notes_session_user ON cortex.notes (session_id, user_id); "
            "ALTER TABLE cortex.note_links ADD CONSTRAINT fk_swapped FOREIGN KEY (user_id, session_id) "
            "REFERENCES cortex.notes (session_id, user_id)",
            "foreign key fk_swapped note_links['user_id', 'session_id'] -> notes['session_id', 'user_id']",
        ),
        (
            "DROP TABLE cortex.bm25_corpus; CREATE TABLE cortex.bm25_corpus (tenant text PRIMARY KEY, n bigint)",
            "distributed table bm25_corpus has no user_id column",
        ),
        (
            "DROP TABLE cortex.bm25_terms; CREATE TABLE cortex.bm25_terms (user_id text, lexeme text, df int)",
            "distributed table bm25_terms: user_id must be text NOT NULL",
        ),
        (
            "ALTER TABLE cortex.embedding_models ADD COLUMN owner_id uuid, ADD COLUMN owner text, "
            "ADD CONSTRAINT fk_ref_to_dist FOREIGN KEY (owner, owner_id) REFERENCES cortex.notes (user_id, id)",
            "foreign key fk_ref_to_dist embedding_models -> notes crosses table kinds",
        ),
    ],
)
def test_schema_check_fails_on_objects_without_user_id(engine, ddl, expected):
    with engine.begin() as conn:
        for stmt in ddl.split("; "):
            conn.execute(text(stmt))
        problems = distribution_problems(conn)
    assert any(expected in p for p in problems), problems


def test_a_foreign_key_to_the_note_id_registry_is_allowed(engine):
    # the note-id registry is a reference table that notes and stm_notes reference
    with engine.begin() as conn:
        fks = (
            conn.execute(
                text(
                    "SELECT conrelid::regclass::text FROM pg_constraint "
                    "WHERE contype = 'f' AND confrelid = 'cortex.note_ids'::regclass ORDER BY 1"
                )
            )
            .scalars()
            .all()
        )
        assert fks == ["cortex.notes", "cortex.stm_notes"]
        assert distribution_problems(conn) == []
        stmts = distribution.statements_for(conn)
    refs = [s for s in stmts if "create_reference_table" in s]
    assert refs == [
        "SELECT create_reference_table('cortex.embedding_models')",
        "SELECT create_reference_table('cortex.note_ids')",
        "SELECT create_reference_table('cortex.api_keys')",
    ]
    # the registry must be a reference table before notes references it
    assert stmts.index(refs[1]) < next(i for i, s in enumerate(stmts) if "'cortex.notes'" in s)


STUBS = """
CREATE TABLE public.citus_calls (
    seq serial PRIMARY KEY, fn text NOT NULL, obj text NOT NULL, arg text, colocate text
);

CREATE FUNCTION public.create_reference_table(table_name regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.citus_calls WHERE obj = table_name::text) THEN
        RAISE EXCEPTION 'table % is already distributed', table_name;
    END IF;
    INSERT INTO public.citus_calls (fn, obj) VALUES ('create_reference_table', table_name::text);
END $$;

CREATE FUNCTION public.create_distributed_table(
    table_name regclass, distribution_column text, distribution_type text DEFAULT 'hash',
    colocate_with text DEFAULT 'default', shard_count int DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = table_name
                   AND attname = distribution_column AND NOT attisdropped) THEN
        RAISE EXCEPTION 'table % has no column %', table_name, distribution_column;
    END IF;
    IF EXISTS (SELECT 1 FROM public.citus_calls WHERE obj = table_name::text) THEN
        RAISE EXCEPTION 'table % is already distributed', table_name;
    END IF;
    IF colocate_with NOT IN ('default', 'none') AND NOT EXISTS (
        SELECT 1 FROM public.citus_calls
        WHERE fn = 'create_distributed_table' AND obj = colocate_with::regclass::text) THEN
        RAISE EXCEPTION 'colocate_with % is not distributed yet (table %)', colocate_with, table_name;
    END IF;
    -- every table this one references must be distributed or a reference table already
    SELECT string_agg(c.confrelid::regclass::text, ', ') INTO missing
    FROM pg_constraint c
    WHERE c.conrelid = table_name AND c.contype = 'f' AND c.confrelid <> table_name
      AND NOT EXISTS (SELECT 1 FROM public.citus_calls k WHERE k.obj = c.confrelid::regclass::text);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'table % references % which is not distributed yet', table_name, missing;
    END IF;
    INSERT INTO public.citus_calls (fn, obj, arg, colocate)
    VALUES ('create_distributed_table', table_name::text, distribution_column, colocate_with);
END $$;

CREATE FUNCTION public.create_distributed_function(
    function_name regprocedure, distribution_arg_name text DEFAULT NULL,
    colocate_with text DEFAULT 'default', force_delegation bool DEFAULT NULL) RETURNS void
LANGUAGE plpgsql CALLED ON NULL INPUT AS $$
BEGIN
    IF distribution_arg_name IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = function_name
                       AND distribution_arg_name = ANY (proargnames)) THEN
            RAISE EXCEPTION 'function % has no argument %', function_name, distribution_arg_name;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM public.citus_calls
                       WHERE fn = 'create_distributed_table' AND obj = colocate_with::regclass::text) THEN
            RAISE EXCEPTION 'function % co-located with % which is not distributed', function_name, colocate_with;
        END IF;
    END IF;
    INSERT INTO public.citus_calls (fn, obj, arg, colocate)
    VALUES ('create_distributed_function', function_name::text, distribution_arg_name, colocate_with);
END $$;

CREATE FUNCTION public.run_command_on_workers(command text, parallel bool DEFAULT true)
RETURNS TABLE (nodename text, nodeport int, success bool, result text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE command;  -- the command must be valid here too (it runs on every worker)
    INSERT INTO public.citus_calls (fn, obj) VALUES ('run_command_on_workers', command);
    RETURN QUERY SELECT 'localhost'::text, 5432, true, 'ok'::text;
END $$;
"""


@pytest.fixture
def stubbed(engine):
    with engine.begin() as conn:
        conn.execute(text(STUBS))
    return engine


def _calls(conn) -> list[tuple]:
    return [
        tuple(r)
        for r in conn.execute(text("SELECT fn, obj, arg, colocate FROM public.citus_calls ORDER BY seq"))
    ]


def test_distribution_statements_run_in_order_against_stubs(stubbed):
    with stubbed.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        ran = distribution.apply(conn)
        calls = _calls(conn)
        tables = distribution.existing_tables(conn)
        funcs = distribution.functions(conn)
        unsafe_triggers = conn.execute(text("SHOW citus.enable_unsafe_triggers")).scalar()
        db_settings = conn.execute(
            text(
                "SELECT setconfig FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase "
                "WHERE d.datname = current_database() AND s.setrole = 0"
            )
        ).scalar()
    assert unsafe_triggers == "on"
    assert len(ran) == len(calls) + len(distribution.SESSION_SETTINGS)
    kinds = [c[0] for c in calls]
    # reference tables, then distributed tables, then worker defaults, then functions
    assert kinds == sorted(
        kinds,
        key=[
            "create_reference_table",
            "create_distributed_table",
            "run_command_on_workers",
            "create_distributed_function",
        ].index,
    )
    assert [c[1] for c in calls if c[0] == "create_reference_table"] == [
        "cortex.embedding_models",
        "cortex.note_ids",
        "cortex.api_keys",
    ]
    dist = [c for c in calls if c[0] == "create_distributed_table"]
    assert dist[0] == ("create_distributed_table", "cortex.notes", "user_id", "none")
    assert all(c[2] == "user_id" and c[3] == "cortex.notes" for c in dist[1:])
    covered = {c[1].removeprefix("cortex.") for c in calls if c[0].endswith("_table")}
    assert covered == tables - set(distribution.COORDINATOR_TABLES)
    assert "hnsw.iterative_scan=relaxed_order" in db_settings
    # every tenant function is distributed by its user argument, co-located with notes
    by_sig = {c[1]: c for c in calls if c[0] == "create_distributed_function"}
    tenant = {
        f.signature for f in funcs if f.name in distribution.TENANT_FUNCTIONS and "p_user_id" in f.arg_names
    }
    assert {"search_notes", "linked_notes", "related_entities", "context_push", "context_pop"} <= {
        s.split("(")[0].removeprefix("cortex.") for s in tenant
    }
    for sig in tenant:
        assert by_sig[sig][2:] == ("p_user_id", "cortex.notes"), sig
    # the note-only overload of linked_notes has no user: propagated, not delegated
    assert by_sig["cortex.linked_notes(uuid,integer,real)"][2] is None
    assert not any(f.is_trigger and f.signature in by_sig for f in funcs)


def test_statements_out_of_order_are_refused_by_the_stubs(stubbed, monkeypatch):
    reordered = ("embeddings",) + tuple(t for t in distribution.DISTRIBUTED_TABLES if t != "embeddings")
    monkeypatch.setattr(distribution, "DISTRIBUTED_TABLES", reordered)
    with (
        stubbed.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
        pytest.raises(Exception, match="not distributed yet"),
    ):
        distribution.apply(conn)


def test_print_shows_the_statements_of_the_doc(db_url, capsys):
    assert distribution.main(["--print", "--url", db_url]) == 0
    printed = [s for s in capsys.readouterr().out.splitlines() if s]
    doc = (ROOT / "docs" / "scale-out.md").read_text()
    assert len(printed) > 20
    for stmt in printed:
        assert stmt in doc, stmt  # the doc shows the statements of the head revision
    assert "distribution_arg_name => 'p_user_id'" in doc


def test_citus_compose_file_runs_upgrade_then_distribution():
    compose = yaml.safe_load((ROOT / "docker-compose.citus.yml").read_text())
    services = compose["services"]
    assert {"coordinator", "worker1", "worker2", "cluster", "setup"} <= set(services)
    for name in ("coordinator", "worker1", "worker2"):
        node = services[name]
        assert "citusdata/citus" in node["build"]["dockerfile_inline"]
        assert "pgvector" in node["build"]["dockerfile_inline"]
        assert "pg_isready" in " ".join(node["healthcheck"]["test"])
        assert "citus.enable_unsafe_triggers=on" in " ".join(node["command"])
    cluster = services["cluster"]
    assert {"coordinator", "worker1", "worker2"} <= set(cluster["depends_on"])
    script = " ".join(cluster["command"])
    assert "citus_add_node('worker1'" in script and "citus_add_node('worker2'" in script
    setup = services["setup"]
    assert setup["depends_on"]["cluster"]["condition"] == "service_completed_successfully"
    command = " ".join(setup["command"])
    assert command.index("cortex-pg db upgrade") < command.index("python -m cortex_pg.db.distribution")
    assert setup["restart"] == "no" and cluster["restart"] == "no"
