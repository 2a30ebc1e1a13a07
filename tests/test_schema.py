"""Migrations (up, down, up), drift between models and migrations, the schema check on open."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from cortex_pg import EmbeddingDimensionError, EmbeddingModelError, SchemaError
from cortex_pg.config import SCHEMA
from cortex_pg.db import migrate
from cortex_pg.db.engine import create_engine_for
from cortex_pg.db.migrate import include_object
from cortex_pg.db.models import Base
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore


def _diff(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "include_object": include_object,
                "version_table_schema": SCHEMA,
                "compare_type": True,
            },
        )
        return compare_metadata(ctx, Base.metadata)


def test_upgrade_downgrade_upgrade_and_no_drift(empty_db_url):
    engine = create_engine_for(empty_db_url)
    try:
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        assert _diff(engine) == []
        migrate.downgrade(engine, "base")
        assert migrate.current_revision(engine) is None
        tables = set(inspect(engine).get_table_names(schema=SCHEMA)) - {"alembic_version"}
        assert tables == set()
        with engine.connect() as conn:
            funcs = conn.execute(
                text(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = 'cortex'"
                )
            ).scalar_one()
        assert funcs == 0
        migrate.upgrade(engine)
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_every_revision_upgrades_from_the_previous(empty_db_url):
    from alembic.script import ScriptDirectory

    revisions = [r.revision for r in ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()]
    engine = create_engine_for(empty_db_url)
    try:
        for rev in reversed(revisions):  # oldest first
            migrate.upgrade(engine, rev)
            assert migrate.current_revision(engine) == rev
        for rev in revisions[1:]:
            migrate.downgrade(engine, rev)
            assert migrate.current_revision(engine) == rev
        migrate.downgrade(engine, "base")
    finally:
        engine.dispose()


def test_stm_table_is_unlogged_and_timestamps_are_timestamptz(db_url):
    engine = create_engine_for(db_url)
    try:
        with engine.connect() as conn:
            persistence = conn.execute(
                text("SELECT relpersistence FROM pg_class WHERE oid = 'cortex.stm_notes'::regclass")
            ).scalar_one()
            naive = conn.execute(
                text(
                    "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'cortex' "
                    "AND data_type = 'timestamp without time zone'"
                )
            ).scalar_one()
        assert persistence == "u"
        assert naive == 0
    finally:
        engine.dispose()


# a foreign key's columns and whether an index that is not partial begins with them (in any
# order); a cascade or a check of the key looks rows up by those columns alone
UNINDEXED_FOREIGN_KEYS = """
SELECT con.conrelid::regclass::text AS tbl, con.conname
FROM pg_constraint con
WHERE con.contype = 'f' AND con.connamespace = 'cortex'::regnamespace
  AND NOT EXISTS (
      SELECT 1 FROM pg_index i
      WHERE i.indrelid = con.conrelid AND i.indpred IS NULL
        AND (i.indkey::int2[])[0:cardinality(con.conkey) - 1] @> con.conkey
        AND (i.indkey::int2[])[0:cardinality(con.conkey) - 1] <@ con.conkey)
ORDER BY 1, 2
"""


def test_every_foreign_key_is_led_by_an_index(db_url):
    """Deleting a note deletes its jobs, links and embeddings (ON DELETE CASCADE), once per
    deleted row: a key without an index of its own (a partial one answers only its part) is a
    scan of every tenant's rows per deleted note (Alembic 0033 added the two that were missing)."""
    engine = create_engine_for(db_url)
    try:
        with engine.connect() as conn:
            missing = conn.execute(text(UNINDEXED_FOREIGN_KEYS)).all()
            keys = conn.execute(
                text(
                    "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = 'cortex'::regnamespace"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert keys >= 8 and [tuple(r) for r in missing] == []


def test_open_refuses_an_unmigrated_database(empty_db_url):
    with pytest.raises(SchemaError, match="cortex-pg db upgrade"):
        MemoryStore.open(empty_db_url, embedder=HashingEmbedder(), auto_migrate=False)
    store = MemoryStore.open(empty_db_url, embedder=HashingEmbedder(), auto_migrate=True)
    try:
        assert store.count() == 0
    finally:
        store.close()


def test_open_refuses_an_unknown_newer_revision(db_url):
    engine = create_engine_for(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE cortex.alembic_version SET version_num = 'ffff_future'"))
    engine.dispose()
    with pytest.raises(SchemaError, match="does not know"):
        MemoryStore.open(db_url, embedder=HashingEmbedder(), auto_migrate=True)


def test_dimension_mismatch_is_an_error_naming_both_dims(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    s.add("something stored with 384 dimensions")
    s.close()
    with pytest.raises(EmbeddingDimensionError) as err:
        MemoryStore.open(db_url, embedder=HashingEmbedder(128), auto_migrate=False)
    assert err.value.stored_dim == 384 and err.value.embedder_dim == 128
    assert "384" in str(err.value) and "128" in str(err.value)
    # same name, other dimension
    with pytest.raises(EmbeddingDimensionError):
        MemoryStore.open(db_url, embedder=HashingEmbedder(128, name="hashing-384"), auto_migrate=False)
    # same dimension, other model: vectors are not comparable
    with pytest.raises(EmbeddingModelError, match="not comparable"):
        MemoryStore.open(db_url, embedder=HashingEmbedder(384, name="other-384"), auto_migrate=False)
    # the stored note is untouched
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    assert s.count() == 1
    s.close()


def test_an_empty_store_may_switch_models(db_url):
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(384), auto_migrate=False)
    s.close()
    s = MemoryStore.open(db_url, embedder=HashingEmbedder(64), auto_migrate=False)
    try:
        nid = s.add("now with 64 dimensions")
        assert s.search("dimensions")[0].id == nid
        assert s.stats()["active_model"] == "hashing-64"
    finally:
        s.close()


def test_hnsw_index_per_model_is_partial_and_used(store):
    with store.engine.connect() as conn:
        defs = (
            conn.execute(
                text(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = 'cortex' "
                    "AND indexname LIKE 'ix_embeddings_hnsw_%'"
                )
            )
            .scalars()
            .all()
        )
    assert len(defs) == 1
    assert "hnsw" in defs[0] and "vector(384)" in defs[0] and "vector_cosine_ops" in defs[0]
    assert "WHERE ((model = 'hashing-384'::text) AND (kind = 'text'::text))" in defs[0]
    store.add_many([{"content": f"row {i}", "user_id": f"u{i % 3}"} for i in range(300)], to_stm=False)
    vec = "[" + ",".join(["0.05"] * 384) + "]"
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            conn.execute(
                text(
                    "EXPLAIN SELECT note_id FROM cortex.embeddings WHERE model = 'hashing-384' "
                    "AND kind = 'text' ORDER BY embedding::vector(384) <=> CAST(:v AS vector(384)) LIMIT 5"
                ),
                {"v": vec},
            ).scalars()
        )
    assert "ix_embeddings_hnsw_" in plan


def test_upgrade_to_0023_deletes_postings_a_truncate_left(empty_db_url):
    engine = create_engine_for(empty_db_url)
    same_id = "00000000-0000-4000-8000-0000000000aa"
    try:
        migrate.upgrade(engine, "0022")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO cortex.notes (user_id, content) VALUES ('a', 'herons nest')"))
            conn.execute(
                text(
                    "INSERT INTO cortex.notes (user_id, id, content) VALUES ('b', :i, 'swans glide on lakes')"
                ),
                {"i": same_id},
            )
            conn.execute(text("TRUNCATE cortex.notes CASCADE"))  # under 0022 the postings stay
            conn.execute(text("INSERT INTO cortex.notes (user_id, content) VALUES ('a', 'otters fish')"))
            conn.execute(  # the same id again, other words: 0022 kept the postings of the old ones
                text("INSERT INTO cortex.notes (user_id, id, content) VALUES ('b', :i, 'swans dive')"),
                {"i": same_id},
            )
        postings = text("SELECT user_id, lexeme, dl FROM cortex.bm25_postings ORDER BY 1, 2")
        with engine.connect() as conn:
            # left behind: heron, nest, glide, lake (swan rewritten); the notes: otter, fish, swan, dive
            assert len(conn.execute(postings).all()) == 8
        migrate.upgrade(engine, "0023")
        with engine.connect() as conn:
            kept = [tuple(r) for r in conn.execute(postings)]
        assert kept == [("a", "fish", 2), ("a", "otter", 2), ("b", "dive", 2), ("b", "swan", 2)]
    finally:
        engine.dispose()
