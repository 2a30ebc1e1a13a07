-- cortex.register_embedding_model (v3): record an embedding model and build its partial HNSW
-- index on cortex.embeddings, which is hash-partitioned by user_id since Alembic 0013 (the
-- partitions live in the schema cortex_partitions). An index on the partitioned table is one
-- index per partition; v3 adds the steps that build it without blocking writers.
--
--   cortex.embedding_index_type(dim)        'vector' (dim <= 2000) or 'halfvec' (<= 4000)
--   cortex.embedding_index_ddl(model, dim, concurrently)
--       CREATE INDEX [ON ONLY] IF NOT EXISTS <name> ON cortex.embeddings USING hnsw
--           ((embedding::<type>(dim)) <type>_cosine_ops) WITH (m = 16, ef_construction = 64)
--           WHERE model = '<model>' AND kind = 'text'
--       (concurrently => the partitioned index alone, ON ONLY: invalid until every partition's
--       index is attached, see embedding_index_steps)
--   cortex.embedding_index_steps(model, dim) -> setof text
--       the statements still needed to build the model's index without blocking writers, in
--       order: the partitioned index ON ONLY the parent; per partition, DROP of an invalid
--       index left by an interrupted build, CREATE INDEX CONCURRENTLY, ALTER INDEX ... ATTACH
--       PARTITION. Each runs in its own transaction (autocommit); once every partition's index
--       is attached the parent index is valid. Run again after an interruption, it returns
--       only what is missing; it returns nothing when the index is complete.
--   cortex.build_embedding_index(model, dim) -> int: the same steps in one transaction, blocking
--       writes meanwhile (registration of a new model, migrations, bulk loads)
--   cortex.register_embedding_model(model, dim, activate) -> index name (idempotent; raises
--       22023 when the model is registered with another dimension or dim is outside 1..4000).
--
-- pgvector's HNSW indexes `vector` up to 2,000 dimensions and `halfvec` (16-bit floats) up to
-- 4,000, so the index of a model above 2,000 dimensions is built on `embedding::halfvec(dim)`
-- (the stored column stays full precision; only the index's graph and the candidate ordering
-- use half precision). v3 indexes the rows of kind 'text' only (a note's text, every window
-- of a long text): search finds candidates by their text and scores them with the context
-- embedding too (search_notes v6), so the context rows need no index entry (on LoCoMo dev,
-- candidates from both kinds and from text only give the same recall@k within 0.3 points),
-- and each note costs one HNSW insertion instead of two.

CREATE OR REPLACE FUNCTION cortex.embedding_index_type(p_dim int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_dim <= 2000 THEN 'vector' ELSE 'halfvec' END
$$;

-- the index definition after "ON <table>" (shared by the parent's and the partitions' indexes)
CREATE OR REPLACE FUNCTION cortex.embedding_index_body(p_model text, p_dim int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format(
        'USING hnsw ((embedding::%s(%s)) %s_cosine_ops) WITH (m = 16, ef_construction = 64) '
        'WHERE model = %L AND kind = ''text''',
        cortex.embedding_index_type(p_dim), p_dim, cortex.embedding_index_type(p_dim), p_model)
$$;

CREATE OR REPLACE FUNCTION cortex.embedding_index_ddl(p_model text, p_dim int, p_concurrently boolean)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format('CREATE INDEX IF NOT EXISTS %I ON %s cortex.embeddings %s',
                  cortex.embedding_index_name(p_model),
                  CASE WHEN p_concurrently THEN 'ONLY' ELSE '' END,
                  cortex.embedding_index_body(p_model, p_dim))
$$;

CREATE OR REPLACE FUNCTION cortex.embedding_index_steps(p_model text, p_dim int) RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_index text := cortex.embedding_index_name(p_model);
    v_parent oid;
    p record;
    v_child text;
    v_child_oid oid;
    v_valid boolean;
    v_attached boolean;
BEGIN
    v_parent := to_regclass(format('cortex.%I', v_index));
    IF v_parent IS NULL THEN
        RETURN NEXT cortex.embedding_index_ddl(p_model, p_dim, true);
    END IF;
    FOR p IN
        SELECT c.oid, n.nspname, c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE i.inhparent = 'cortex.embeddings'::regclass
        ORDER BY c.relname
    LOOP
        -- the partition's index: attached to the parent index, else one of the name we build
        v_child_oid := NULL;
        IF v_parent IS NOT NULL THEN
            SELECT ix.indexrelid INTO v_child_oid
            FROM pg_index ix JOIN pg_inherits ih ON ih.inhrelid = ix.indexrelid AND ih.inhparent = v_parent
            WHERE ix.indrelid = p.oid;
        END IF;
        v_attached := v_child_oid IS NOT NULL;
        v_child := left(v_index, 54) || '_' || right(p.relname, 3);
        IF NOT v_attached THEN
            v_child_oid := to_regclass(format('%I.%I', p.nspname, v_child));
        END IF;
        SELECT ix.indisvalid INTO v_valid FROM pg_index ix WHERE ix.indexrelid = v_child_oid;
        IF v_child_oid IS NOT NULL AND NOT v_valid THEN  -- left by an interrupted concurrent build
            RETURN NEXT format('DROP INDEX CONCURRENTLY IF EXISTS %I.%I', p.nspname, v_child);
            v_child_oid := NULL;
            v_attached := false;
        END IF;
        IF v_child_oid IS NULL THEN
            RETURN NEXT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I.%I %s',
                               v_child, p.nspname, p.relname, cortex.embedding_index_body(p_model, p_dim));
        END IF;
        IF NOT v_attached THEN
            RETURN NEXT format('ALTER INDEX cortex.%I ATTACH PARTITION %I.%I', v_index, p.nspname, v_child);
        END IF;
    END LOOP;
END $$;

-- the steps in one transaction, without CONCURRENTLY (for an empty or new table: blocks writes
-- to cortex.embeddings while it runs); returns the number of statements run
CREATE OR REPLACE FUNCTION cortex.build_embedding_index(p_model text, p_dim int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_step text;
    v_n int := 0;
BEGIN
    FOR v_step IN SELECT cortex.embedding_index_steps(p_model, p_dim) LOOP
        EXECUTE replace(replace(v_step, 'CREATE INDEX CONCURRENTLY', 'CREATE INDEX'),
                        'DROP INDEX CONCURRENTLY', 'DROP INDEX');
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END $$;

CREATE OR REPLACE FUNCTION cortex.register_embedding_model(
    p_model text, p_dim int, p_activate boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_dim int;
    v_index text := cortex.embedding_index_name(p_model);
BEGIN
    IF p_model IS NULL OR btrim(p_model) = '' THEN
        RAISE EXCEPTION 'model name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF p_dim IS NULL OR p_dim < 1 OR p_dim > 4000 THEN
        RAISE EXCEPTION 'dimension % out of range 1..4000 (HNSW limit of halfvec)', p_dim USING ERRCODE = '22023';
    END IF;
    SELECT dim INTO v_dim FROM cortex.embedding_models WHERE model = p_model;
    IF v_dim IS NOT NULL AND v_dim <> p_dim THEN
        RAISE EXCEPTION 'model % is registered with dimension %, not %', p_model, v_dim, p_dim
            USING ERRCODE = '22023';
    END IF;
    IF v_dim IS NULL THEN
        INSERT INTO cortex.embedding_models (model, dim, active, index_name)
        VALUES (p_model, p_dim, false, v_index);
    END IF;
    -- an existing index is left alone, even an unfinished concurrent build (its steps finish it)
    IF to_regclass(format('cortex.%I', v_index)) IS NULL THEN
        PERFORM cortex.build_embedding_index(p_model, p_dim);
    END IF;
    IF p_activate THEN
        UPDATE cortex.embedding_models SET active = false WHERE active AND model <> p_model;
        UPDATE cortex.embedding_models SET active = true WHERE model = p_model AND NOT active;
    END IF;
    RETURN v_index;
END $$;
