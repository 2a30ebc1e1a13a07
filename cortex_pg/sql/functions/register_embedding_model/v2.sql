-- cortex.register_embedding_model (v2): record an embedding model and build its partial HNSW
-- index. v2 adds models above 2,000 dimensions: pgvector's HNSW indexes `vector` up to 2,000
-- dimensions and `halfvec` (16-bit floats) up to 4,000, so the index of a model above 2,000
-- dimensions is built on `embedding::halfvec(dim)` (the stored column stays full precision;
-- only the index's graph and the candidate ordering use half precision).
--
--   cortex.embedding_index_type(dim)        'vector' (dim <= 2000) or 'halfvec' (<= 4000)
--   cortex.embedding_index_ddl(model, dim, concurrently)
--       CREATE INDEX [CONCURRENTLY] IF NOT EXISTS <name> ON cortex.embeddings USING hnsw
--           ((embedding::<type>(dim)) <type>_cosine_ops) WITH (m = 16, ef_construction = 64)
--           WHERE model = '<model>'
--   cortex.register_embedding_model(model, dim, activate) -> index name (idempotent; raises
--       22023 when the model is registered with another dimension or dim is outside 1..4000).
--
-- The index covers every embedding row of the model (a note may have several: its text, its
-- text in context, the windows of a long text; see cortex.embeddings.kind / window_no).

CREATE OR REPLACE FUNCTION cortex.embedding_index_type(p_dim int) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_dim <= 2000 THEN 'vector' ELSE 'halfvec' END
$$;

CREATE OR REPLACE FUNCTION cortex.embedding_index_ddl(p_model text, p_dim int, p_concurrently boolean)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format(
        'CREATE INDEX %s IF NOT EXISTS %I ON cortex.embeddings USING hnsw '
        '((embedding::%s(%s)) %s_cosine_ops) WITH (m = 16, ef_construction = 64) WHERE model = %L',
        CASE WHEN p_concurrently THEN 'CONCURRENTLY' ELSE '' END,
        cortex.embedding_index_name(p_model), cortex.embedding_index_type(p_dim), p_dim,
        cortex.embedding_index_type(p_dim), p_model)
$$;

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
    IF to_regclass(format('cortex.%I', v_index)) IS NULL THEN
        EXECUTE cortex.embedding_index_ddl(p_model, p_dim, false);
    END IF;
    IF p_activate THEN
        UPDATE cortex.embedding_models SET active = false WHERE active AND model <> p_model;
        UPDATE cortex.embedding_models SET active = true WHERE model = p_model AND NOT active;
    END IF;
    RETURN v_index;
END $$;
