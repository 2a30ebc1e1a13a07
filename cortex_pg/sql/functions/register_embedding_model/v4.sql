-- cortex.embedding_index_steps (v4 of register_embedding_model's helpers): the steps that build
-- a model's partial HNSW index on the partitioned cortex.embeddings take p_concurrently
-- (default true). With true they are those of v3: each runs in its own transaction and never
-- blocks writers. With false they are the same steps without CONCURRENTLY, to run in one
-- transaction; cortex.build_embedding_index runs them so (v3 rewrote the statements' text).
-- cortex.embedding_index_type/body/ddl and cortex.register_embedding_model are those of v3.

DROP FUNCTION IF EXISTS cortex.embedding_index_steps(text, int);

CREATE OR REPLACE FUNCTION cortex.embedding_index_steps(
    p_model text, p_dim int, p_concurrently boolean DEFAULT true
) RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_index text := cortex.embedding_index_name(p_model);
    v_how text := CASE WHEN p_concurrently THEN 'CONCURRENTLY ' ELSE '' END;
    v_parent oid;
    p record;
    v_child text;
    v_child_oid oid;
    v_valid boolean;
    v_attached boolean;
BEGIN
    v_parent := to_regclass(format('cortex.%I', v_index));
    IF v_parent IS NULL THEN
        RETURN NEXT cortex.embedding_index_ddl(p_model, p_dim, true);  -- ON ONLY either way
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
            RETURN NEXT format('DROP INDEX %sIF EXISTS %I.%I', v_how, p.nspname, v_child);
            v_child_oid := NULL;
            v_attached := false;
        END IF;
        IF v_child_oid IS NULL THEN
            RETURN NEXT format('CREATE INDEX %sIF NOT EXISTS %I ON %I.%I %s',
                               v_how, v_child, p.nspname, p.relname, cortex.embedding_index_body(p_model, p_dim));
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
    FOR v_step IN SELECT cortex.embedding_index_steps(p_model, p_dim, false) LOOP
        EXECUTE v_step;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END $$;
