-- cortex.register_embedding_model(p_model, p_dim, p_activate): record an embedding model and
-- build its partial HNSW index
--     CREATE INDEX <name> ON cortex.embeddings USING hnsw ((embedding::vector(p_dim)) vector_cosine_ops)
--         WITH (m = 16, ef_construction = 64) WHERE model = p_model
-- Idempotent. Raises 22023 when the model is already registered with another dimension.
-- The index name is 'ix_embeddings_hnsw_' + a slug of the name + 8 hex chars of its md5,
-- so any model name gives a valid, stable identifier of at most 63 bytes.
-- Returns the index name. On a large existing table prefer building the index yourself
-- with CREATE INDEX CONCURRENTLY under that name before registering (this function then
-- finds it and does not rebuild).

CREATE OR REPLACE FUNCTION cortex.embedding_index_name(p_model text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'ix_embeddings_hnsw_'
        || left(trim(both '_' from regexp_replace(lower(p_model), '[^a-z0-9]+', '_', 'g')), 32)
        || '_' || left(md5(p_model), 8)
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
    IF p_dim IS NULL OR p_dim < 1 OR p_dim > 2000 THEN
        RAISE EXCEPTION 'dimension % out of range 1..2000 (HNSW limit)', p_dim USING ERRCODE = '22023';
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
        EXECUTE format(
            'CREATE INDEX %I ON cortex.embeddings USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
            'WITH (m = 16, ef_construction = 64) WHERE model = %L',
            v_index, p_dim, p_model);
    END IF;
    IF p_activate THEN
        UPDATE cortex.embedding_models SET active = false WHERE active AND model <> p_model;
        UPDATE cortex.embedding_models SET active = true WHERE model = p_model AND NOT active;
    END IF;
    RETURN v_index;
END $$;
