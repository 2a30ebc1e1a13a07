-- cortex.search_notes (v17): v16's search, which compiles and checks its where_filter once;
-- v16: v14's search (its helpers: cortex.search_statement, v15.sql's;
-- cortex.search_signals and cortex.tenant_partition_share, v9.sql's), which returns a note kept
-- in both tiers as the copy that passes the search's conditions, and refuses a window that holds
-- no time and a query vector without a direction.
--
-- v17 (Alembic 0043): the where_filter is compiled and checked once, by cortex.compile_filter
-- for the long-term alias n; the short-term alias s takes the same clauses from
-- cortex.compile_filter_clauses over the filter's stored form (cortex.filter_stored_form), which
-- is what cortex.compile_filter returns for s after checks the n call has already passed. v16
-- ran compile_filter's checks twice, about 0.5 ms of each filtered search.
--
-- v16 (Alembic 0038):
-- - A note kept in both tiers has two rows, and their access counts and times can differ
--   (cortex.touch_notes touches the tiers it is given; calute's long-term memory touches its
--   long-term rows only). Each tier's candidates are found by the where_filter, window and
--   session read on that tier's row, but v9-v15 returned every candidate with a short-term
--   copy as that copy, checked or not: {"access_count": {"$gte": 1}} could return a short-term
--   copy whose access_count is 0, chosen for its long-term row's 1. When the search has a
--   where_filter, a window or a session, the candidates' short-term copies are now read with
--   them (one statement by primary key over the candidates and their session neighbours,
--   which the expansion may add, only for such a search), and a
--   copy that fails them is not returned: the note comes back as its long-term row, which
--   passed. The scoring is unchanged (the tiers' text and embeddings are the same).
-- - p_date_from >= p_date_to, p_date_from 'infinity' and p_date_to '-infinity' are errors
--   (22023), as MemoryStore.search refuses them (v1-v15 returned no rows).
-- - A query or context embedding of norm 0 is an error (22023): its cosine distance to any note
--   is NaN (v1-v15 returned semantic scores of NaN).
--
-- v14 (Alembic 0036): the words of a speaker the query names leave its full-text terms, and
-- the pool is max(2 x limit, 20), at most 1000 or limit when larger, see v14.sql.
-- v13 (Alembic 0035): a note said by a person the query names gains relevance, see v13.sql.
-- v12 (Alembic 0034): the answer to a question inherits the question's relevance, see v12.sql.
-- v11 (Alembic 0032): a ranker weighed 0 is not run, see v11.sql.
-- v10: the recency exp(-age_days / 7) in float8 (0 beyond 700 time constants), see v10.sql.
-- v9's header (search_notes/v9.sql) explains the rest.

CREATE OR REPLACE FUNCTION cortex.search_notes(
    p_user_id text,
    p_query_embedding vector,
    p_query_text text,
    p_limit int DEFAULT 10,
    p_temporal_weight real DEFAULT 0,
    p_date_from timestamptz DEFAULT NULL,
    p_date_to timestamptz DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_now timestamptz DEFAULT now(),
    p_session_id text DEFAULT NULL,
    p_memory_source text DEFAULT 'all',
    p_model text DEFAULT NULL,
    p_context_embedding vector DEFAULT NULL,
    p_query_entities text[] DEFAULT NULL,
    p_entity_weight real DEFAULT 0.5,
    p_expand_entities boolean DEFAULT false,
    p_ranking jsonb DEFAULT NULL
) RETURNS TABLE (
    id uuid,
    user_id text,
    session_id text,
    memory_tier text,
    content text,
    keywords text[],
    tags text[],
    context text,
    category text,
    memory_type text,
    metadata jsonb,
    importance real,
    created_at timestamptz,
    updated_at timestamptz,
    last_accessed_at timestamptz,
    access_count int,
    score double precision,
    relevance_score double precision,
    semantic_score double precision,
    distance double precision,
    text_score double precision,
    recency_score double precision,
    vector_rank int,
    text_rank int,
    context_score double precision,
    entity_score double precision,
    entity_rank int
)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    v_model text;
    v_dim int;
    v_pool int;
    v_terms text[];
    v_tsq tsquery;
    v_rankers int := 0;
    v_n float8 := 0;
    v_avgdl float8 := 1;
    v_ent_weight float8 := 0;
    v_key text;
    v_fusion text := 'score';
    v_vector_weight float8 := 0.5;
    v_context_weight float8 := 0.5;
    v_length_prior float8 := 24;
    v_smoothing_prev float8 := 0.3;
    v_smoothing_next float8 := 0.3;
    v_expansion int := 5;
    v_answer_weight float8 := 0.9;
    v_speaker_weight float8 := 0.08;
    v_query_words text;
    v_content_terms text[];
    v_rrf_k float8 := 60;
    v_ids uuid[];
    v_ecov float8[];
    v_er int[];
    v_in_ltm boolean[];
    v_prev uuid[];
    v_prev_ok boolean[];
    v_next uuid[];
    v_next_ok boolean[];
    v_ent_w float8;
    v_plan_mode text;
    v_sort_mode text;
    v_by_index boolean := false;
    v_filter_n text;
    v_filter_s text;
    v_stm_ok uuid[];
    v_plain boolean;
    v_neighbours boolean;
    v_statement text;
    v_name text;
    v_workers text;
    v_share float8;
    v_docs bigint;
    v_docs_avgdl float8;
    v_seqscan_mode text;
BEGIN
    IF p_user_id IS NULL THEN
        RAISE EXCEPTION 'p_user_id must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RAISE EXCEPTION 'p_limit must be a positive integer, got %', p_limit USING ERRCODE = '22023';
    END IF;
    IF p_temporal_weight IS NULL OR p_temporal_weight < 0 OR p_temporal_weight > 1 THEN
        RAISE EXCEPTION 'p_temporal_weight must be in [0, 1], got %', p_temporal_weight USING ERRCODE = '22023';
    END IF;
    IF p_memory_source IS NULL OR p_memory_source NOT IN ('all', 'ltm', 'stm') THEN
        RAISE EXCEPTION 'p_memory_source must be all, ltm or stm, got %', p_memory_source USING ERRCODE = '22023';
    END IF;
    IF p_query_embedding IS NULL AND coalesce(btrim(p_query_text), '') = '' THEN
        RAISE EXCEPTION 'give a query embedding, a query text, or both' USING ERRCODE = '22023';
    END IF;
    -- (v16) a window that holds no time, a vector without a direction
    IF p_date_from >= p_date_to OR p_date_from = 'infinity' OR p_date_to = '-infinity' THEN
        RAISE EXCEPTION 'the window [p_date_from, p_date_to) holds no time: % to %', p_date_from, p_date_to
            USING ERRCODE = '22023';
    END IF;
    IF vector_norm(p_query_embedding) = 0 THEN
        RAISE EXCEPTION 'p_query_embedding is all zeros: its cosine distance to a note is undefined'
            USING ERRCODE = '22023';
    END IF;
    IF vector_norm(p_context_embedding) = 0 THEN
        RAISE EXCEPTION 'p_context_embedding is all zeros: its cosine distance to a note is undefined'
            USING ERRCODE = '22023';
    END IF;
    IF p_entity_weight IS NULL OR p_entity_weight < 0 OR p_entity_weight > 10 THEN
        RAISE EXCEPTION 'p_entity_weight must be in [0, 10], got %', p_entity_weight USING ERRCODE = '22023';
    END IF;
    IF p_entity_weight > 0 AND cardinality(p_query_entities) > 0 THEN
        v_ent_weight := p_entity_weight;
    END IF;

    -- p_ranking: the ranking's constants, each optional (cortex_pg.store.ranking.Ranking)
    IF p_ranking IS NOT NULL THEN
        IF jsonb_typeof(p_ranking) <> 'object' THEN
            RAISE EXCEPTION 'p_ranking must be a JSON object, got %', jsonb_typeof(p_ranking) USING ERRCODE = '22023';
        END IF;
        FOR v_key IN SELECT jsonb_object_keys(p_ranking) LOOP
            IF v_key = 'fusion' THEN
                v_fusion := p_ranking->>'fusion';
                IF jsonb_typeof(p_ranking->'fusion') <> 'string' OR v_fusion NOT IN ('score', 'rrf') THEN
                    RAISE EXCEPTION 'p_ranking.fusion must be "score" or "rrf", got %', p_ranking->'fusion'
                        USING ERRCODE = '22023';
                END IF;
                CONTINUE;
            END IF;
            IF v_key = 'date_weight' THEN
                RAISE EXCEPTION 'p_ranking.date_weight is applied by the library''s search statement '
                                'around cortex.search_notes, not by it: search within the named window '
                                '(p_date_from, p_date_to) and without it instead'
                    USING ERRCODE = '22023';
            END IF;
            IF v_key NOT IN ('vector_weight', 'context_weight', 'length_prior', 'smoothing_prev',
                             'smoothing_next', 'expansion', 'rrf_k', 'answer_weight',
                             'speaker_weight') THEN
                RAISE EXCEPTION 'p_ranking has an unknown key %', v_key USING ERRCODE = '22023';
            END IF;
            -- compared as numeric (exact, any size), then read through numeric rounded to 12
            -- places, so no value that passes overflows or underflows a float8
            IF jsonb_typeof(p_ranking->v_key) <> 'number'
               OR (v_key IN ('vector_weight', 'context_weight', 'smoothing_prev', 'smoothing_next', 'answer_weight',
                                'speaker_weight')
                   AND (p_ranking->>v_key)::numeric NOT BETWEEN 0 AND 1)
               OR (v_key = 'length_prior' AND (p_ranking->>v_key)::numeric <> 0
                   AND (p_ranking->>v_key)::numeric NOT BETWEEN 1 AND 10000)
               OR (v_key = 'expansion' AND ((p_ranking->>v_key)::numeric NOT BETWEEN 0 AND 50
                                            OR (p_ranking->>v_key)::numeric <> trunc((p_ranking->>v_key)::numeric)))
               OR (v_key = 'rrf_k' AND (p_ranking->>v_key)::numeric NOT BETWEEN 1 AND 10000) THEN
                RAISE EXCEPTION 'p_ranking.% is out of range: %', v_key, p_ranking->v_key USING ERRCODE = '22023';
            END IF;
        END LOOP;
        v_vector_weight := coalesce(round((p_ranking->>'vector_weight')::numeric, 12)::float8, v_vector_weight);
        v_context_weight := coalesce(round((p_ranking->>'context_weight')::numeric, 12)::float8, v_context_weight);
        v_length_prior := coalesce(round((p_ranking->>'length_prior')::numeric, 12)::float8, v_length_prior);
        v_smoothing_prev := coalesce(round((p_ranking->>'smoothing_prev')::numeric, 12)::float8, v_smoothing_prev);
        v_smoothing_next := coalesce(round((p_ranking->>'smoothing_next')::numeric, 12)::float8, v_smoothing_next);
        v_expansion := coalesce((p_ranking->>'expansion')::numeric::int, v_expansion);
        v_rrf_k := coalesce(round((p_ranking->>'rrf_k')::numeric, 12)::float8, v_rrf_k);
        v_answer_weight := coalesce(round((p_ranking->>'answer_weight')::numeric, 12)::float8, v_answer_weight);
        v_speaker_weight := coalesce(round((p_ranking->>'speaker_weight')::numeric, 12)::float8, v_speaker_weight);
    END IF;

    -- (v14) at most 1000 notes per candidate list, or limit when it is larger (v9-v13: 1000,
    -- so a search for more than 1000 notes returned at most about 1000 from one ranker)
    v_pool := greatest(least(greatest(p_limit::bigint * 2, 20), 1000), p_limit);
    -- the query's words as the speaker rule (v13) compares them: ' w1 w2 ... '
    v_query_words := ' ' || btrim(regexp_replace(lower(left(coalesce(p_query_text, ''), 100000)), '[^[:alnum:]]+', ' ', 'g')) || ' ';

    SELECT coalesce(array_agg(x.lexeme), '{}') INTO v_terms
    FROM (SELECT t.lexeme
          FROM unnest(to_tsvector('english', left(coalesce(p_query_text, ''), 100000))) AS t
          WHERE t.lexeme !~ '[\\'']'
          ORDER BY t.positions[1]
          LIMIT 64) x;
    -- a ranker weighed 0 is not run (v11): vector_weight 1 with an embedding, no full-text ranker
    IF v_vector_weight = 1 AND p_query_embedding IS NOT NULL THEN
        v_terms := '{}';
    END IF;
    -- (v14) the terms of the tenant's speakers the query names leave the terms, unless none
    -- would be left: the lexemes of the speaker's words ("mari", "ann" for "Mary Ann"), and a
    -- lexeme whose own words lie among them (the parser keeps "Mary-Ann" whole as well)
    IF v_speaker_weight > 0 AND cardinality(v_terms) > 1 THEN
        WITH named AS MATERIALIZED (
            SELECT c.words FROM cortex.speaker_counts c
            WHERE c.user_id = p_user_id AND position(' ' || c.words || ' ' IN v_query_words) > 0
        )
        SELECT coalesce(array_agg(t.lexeme ORDER BY t.ord), '{}') INTO v_content_terms
        FROM unnest(v_terms) WITH ORDINALITY AS t(lexeme, ord)
        WHERE t.lexeme NOT IN (SELECT l.lexeme
                               FROM named c CROSS JOIN LATERAL unnest(to_tsvector('english', c.words)) AS l)
          AND NOT EXISTS (
              SELECT 1 FROM named c
              WHERE position(' ' || btrim(regexp_replace(t.lexeme, '[^[:alnum:]]+', ' ', 'g')) || ' '
                             IN ' ' || c.words || ' ') > 0);
        IF cardinality(v_content_terms) > 0 THEN
            v_terms := v_content_terms;
        END IF;
    END IF;
    -- the tenant's BM25 statistics, read once: N and average length for the full-text ranker,
    -- N also for the choice of scan below
    SELECT c.doc_count, c.total_length::float8 / greatest(c.doc_count, 1) INTO v_docs, v_docs_avgdl
    FROM cortex.bm25_corpus c WHERE c.user_id = p_user_id;
    v_docs := coalesce(v_docs, 0);
    IF cardinality(v_terms) > 0 THEN
        SELECT string_agg(quote_literal(t), ' | ')::tsquery INTO v_tsq FROM unnest(v_terms) AS t;
        v_rankers := v_rankers + 1;
        v_n := v_docs;
        v_avgdl := greatest(coalesce(v_docs_avgdl, 1), 1);
    END IF;

    IF p_model IS NULL THEN
        SELECT m.model, m.dim INTO v_model, v_dim FROM cortex.embedding_models m WHERE m.active;
    ELSE
        SELECT m.model, m.dim INTO v_model, v_dim FROM cortex.embedding_models m WHERE m.model = p_model;
    END IF;
    IF v_model IS NULL AND (p_query_embedding IS NOT NULL OR p_context_embedding IS NOT NULL OR p_model IS NOT NULL) THEN
        RAISE EXCEPTION 'embedding model % is not registered', coalesce(p_model, '(active)')
            USING ERRCODE = '22023';
    END IF;
    IF (p_query_embedding IS NOT NULL OR p_context_embedding IS NOT NULL)
       AND (vector_dims(coalesce(p_query_embedding, p_context_embedding)) <> v_dim
            OR vector_dims(coalesce(p_context_embedding, p_query_embedding)) <> v_dim) THEN
        RAISE EXCEPTION 'query/context embedding dimensions differ from model % (%)', v_model, v_dim
            USING ERRCODE = '22023';
    END IF;

    -- vector_weight 0 with query terms: no vector ranker (v11; the dimensions are checked above)
    IF v_vector_weight = 0 AND cardinality(v_terms) > 0 THEN
        p_query_embedding := NULL;
    END IF;

    IF p_query_embedding IS NOT NULL THEN
        v_rankers := v_rankers + 1;
        -- per transaction (SET LOCAL semantics), so the setting reaches every shard
        -- at least pgvector's default of 40 (v9; v6-v8: the pool, 20 for limit 10, with which the
        -- scan found 59 % of the exact 20 nearest notes of a 17,511-note tenant, 69 % at 40)
        -- (pgvector's range is 1..1000; the iterative scan goes on past ef_search for a larger pool)
        PERFORM set_config('hnsw.ef_search', least(greatest(v_pool, 40), 1000)::text, true);
        IF current_setting('hnsw.iterative_scan', true) IS NOT NULL THEN
            PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        END IF;
    END IF;

    -- a search without a session, window or filter (the usual one): its candidate statement is
    -- prepared once per session and run on a generic plan (v9, see the header); a large
    -- tenant's vector candidates then come from its HNSW index, which enable_sort off leaves
    -- as the only ordered path
    v_filter_n := cortex.compile_filter(p_filter, 'n');
    -- the same filter for the short-term alias: compile_filter's checks have passed above
    v_filter_s := cortex.compile_filter_clauses(cortex.filter_stored_form(p_filter), 's', 'where_filter');
    v_plain := p_session_id IS NULL AND p_date_from IS NULL AND p_date_to IS NULL AND v_filter_n = 'true';
    IF v_plain AND p_query_embedding IS NOT NULL AND p_memory_source <> 'stm'
       AND v_docs >= 256 THEN
        -- the tenant's share of the rows of its partition of cortex.embeddings (two a note: text
        -- and context); a tenant that shares its partition with much larger ones is a filter
        -- the HNSW scan walks past most entries for (slower than an exact scan, and less exact):
        -- its statement is planned for its values instead
        -- (unknown, NULL, before the partition's first ANALYZE or in another layout: planned too)
        v_share := cortex.tenant_partition_share(p_user_id);
        v_by_index := coalesce(v_share >= 0.2, false);
        v_plain := v_by_index;
    END IF;
    v_neighbours := v_smoothing_prev > 0 OR v_smoothing_next > 0 OR v_expansion > 0 OR v_answer_weight > 0;
    v_statement := cortex.search_statement(
        coalesce(v_model, ''), coalesce(v_dim, 1), v_filter_n, v_filter_s,
        v_ent_weight > 0, p_query_embedding IS NOT NULL, cardinality(v_terms) > 0, p_memory_source,
        v_neighbours, CASE WHEN v_by_index THEN 'index' WHEN v_plain THEN 'exact' ELSE 'planned' END);

    -- step 1, the candidates
    IF v_plain THEN
        -- named by its text (model, tiers and rankers used) and by the scan chosen
        v_name := 'cortex_search_' || CASE WHEN v_by_index THEN 'i_' ELSE 'e_' END || left(md5(v_statement), 20);
        IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements ps WHERE ps.name = v_name) THEN
            EXECUTE format('PREPARE %I (text, vector, tsquery, int, float8, timestamptz, timestamptz, '
                           'timestamptz, text, text, int, text[], int, vector, text[], float8, boolean, '
                           'float8, float8, boolean) AS %s', v_name, v_statement);
        END IF;
        v_plan_mode := current_setting('plan_cache_mode');
        v_sort_mode := current_setting('enable_sort');
        v_seqscan_mode := current_setting('enable_seqscan');
        v_workers := current_setting('max_parallel_workers_per_gather');
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
        -- a large tenant: the index is the only ordered path; a small one: its rows come by its
        -- user_id, never by a scan of the partition it may share with a large tenant
        PERFORM set_config('enable_sort', CASE WHEN v_by_index THEN 'off' ELSE 'on' END, true);
        PERFORM set_config('enable_seqscan', CASE WHEN v_by_index THEN v_seqscan_mode ELSE 'off' END, true);
        -- (a plan made for no tenant in particular may count on a large one and start parallel
        -- workers, which take longer to start than a tenant's candidates take to find)
        PERFORM set_config('max_parallel_workers_per_gather', '0', true);
        -- (a prepared statement takes its arguments as literals: EXECUTE has no parameters)
        EXECUTE format('EXECUTE %I (%L, %L, %L, %L, %L, NULL, NULL, %L, NULL, %L, %L, %L, %L, %L, %L, %L, '
                       '%L, %L, %L, %L)',
                       v_name, p_user_id, p_query_embedding, v_tsq, p_limit, p_temporal_weight::float8,
                       p_now, p_memory_source, v_pool, v_terms, v_rankers, p_context_embedding,
                       p_query_entities, v_ent_weight, p_expand_entities, v_n, v_avgdl, v_neighbours)
        INTO v_ids, v_ecov, v_er, v_in_ltm, v_prev, v_prev_ok, v_next, v_next_ok, v_ent_w;
        PERFORM set_config('enable_sort', v_sort_mode, true);
        PERFORM set_config('enable_seqscan', v_seqscan_mode, true);
        PERFORM set_config('max_parallel_workers_per_gather', v_workers, true);
        PERFORM set_config('plan_cache_mode', v_plan_mode, true);
    ELSE
        -- dynamic, planned for the call's values: the filter is part of the text, and a
        -- session, window or filter's selectivity decides between the HNSW index and an exact
        -- scan of the notes that pass
        EXECUTE v_statement
        INTO v_ids, v_ecov, v_er, v_in_ltm, v_prev, v_prev_ok, v_next, v_next_ok, v_ent_w
        USING p_user_id, p_query_embedding, v_tsq, p_limit, p_temporal_weight::float8, p_date_from, p_date_to,
              p_now, p_session_id, p_memory_source, v_pool, v_terms, v_rankers, p_context_embedding,
              p_query_entities, v_ent_weight, p_expand_entities, v_n, v_avgdl, v_neighbours;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    v_ent_w := coalesce(v_ent_w, 0);
    -- (v16) the candidates, and their session neighbours (which the expansion and the answer
    -- rule may add), whose short-term copy passes the search's conditions, when it has any
    -- (NULL: every copy passes); a note whose copy fails comes back as its long-term row
    IF p_memory_source <> 'ltm'
       AND (v_filter_s <> 'true' OR p_session_id IS NOT NULL OR p_date_from IS NOT NULL OR p_date_to IS NOT NULL) THEN
        EXECUTE format($q$
            SELECT coalesce(array_agg(s.id), '{}') FROM cortex.stm_notes s
            WHERE s.user_id = $1 AND s.id = ANY ($2) AND ($3::text IS NULL OR s.session_id = $3)
              AND ($4::timestamptz IS NULL OR s.created_at >= $4) AND ($5::timestamptz IS NULL OR s.created_at < $5)
              AND %s$q$, v_filter_s)
        INTO v_stm_ok USING p_user_id, v_ids || v_prev || v_next, p_session_id, p_date_from, p_date_to;
    END IF;

    -- step 2, the scoring of the candidates: static SQL, so its plan is made once per session
    -- and kept (generic: it only looks notes up by id)
    v_plan_mode := current_setting('plan_cache_mode');
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    RETURN QUERY
    WITH
    pool AS MATERIALIZED (
        SELECT c.id, c.ecov, c.er, c.in_ltm, c.prev_id, c.prev_ok, c.next_id, c.next_ok
        FROM unnest(v_ids, v_ecov, v_er, v_in_ltm, v_prev, v_prev_ok, v_next, v_next_ok)
             AS c(id, ecov, er, in_ltm, prev_id, prev_ok, next_id, next_ok)
    ),
    pool_signals AS MATERIALIZED (
        SELECT * FROM cortex.search_signals(p_user_id, v_ids, v_model, p_query_embedding, v_terms, v_n,
                                            v_avgdl, p_memory_source, v_context_weight, v_length_prior)
    ),
    bounds AS (
        SELECT min(ps.v) AS v_lo, max(ps.v) AS v_hi, max(ps.s) AS s_hi FROM pool_signals ps
    ),
    -- the signals' weights: w_v = vector_weight, w_t = 1 - w_v, w_e the entity list's (a search
    -- with a single signal weighs it alone when its weight is 0)
    fusion AS (
        SELECT x.wv, x.wt, v_ent_w AS w, (x.wv + x.wt + v_ent_w)::float8 AS total
        FROM (SELECT
            CASE WHEN p_query_embedding IS NULL THEN 0
                 WHEN cardinality(v_terms) = 0 AND v_vector_weight = 0 THEN 1 ELSE v_vector_weight END::float8 AS wv,
            CASE WHEN cardinality(v_terms) = 0 THEN 0
                 WHEN p_query_embedding IS NULL AND v_vector_weight = 1 THEN 1 ELSE 1 - v_vector_weight END::float8 AS wt) x
    ),
    -- each candidate's rank by v and by s (s > 0), for reciprocal rank fusion
    pool_ranked AS MATERIALIZED (
        SELECT ps.*, row_number() OVER (ORDER BY ps.v DESC NULLS LAST, ps.id)::float8 AS vrk,
               row_number() OVER (ORDER BY ps.s DESC, ps.id)::float8 AS trk
        FROM pool_signals ps
    ),
    -- fusion: w_v * minmax(v) + w_t * s / max(s) (score) or w_v * (k + 1) / (k + rank by v)
    -- + w_t * (k + 1) / (k + rank by s) (rrf), + w_e * the entity list's coverage, divided by
    -- the weights of the signals present
    pool_rel AS MATERIALIZED (
        SELECT ps.id, ps.v, ps.s,
               (CASE WHEN p_query_embedding IS NULL OR ps.v IS NULL THEN 0
                     WHEN v_fusion = 'rrf' THEN fu.wv * (v_rrf_k + 1) / (v_rrf_k + ps.vrk)
                     ELSE fu.wv * CASE WHEN b.v_hi > b.v_lo THEN (ps.v - b.v_lo) / (b.v_hi - b.v_lo) ELSE 1 END END
                + CASE WHEN cardinality(v_terms) = 0 OR ps.s <= 0 THEN 0
                       WHEN v_fusion = 'rrf' THEN fu.wt * (v_rrf_k + 1) / (v_rrf_k + ps.trk)
                       ELSE fu.wt * ps.s / b.s_hi END
                + fu.w * coalesce(p.ecov, 0)) / greatest(fu.total, 1e-9) AS rel,
               p.ecov, p.er
        FROM pool_ranked ps JOIN pool p ON p.id = ps.id CROSS JOIN bounds b CROSS JOIN fusion fu
    ),
    -- the long-term candidates with their session neighbours (found in step 1), and whether
    -- each asks (v12): its text holds a question mark that ends a sentence (followed by a space,
    -- a closing quote or bracket, '!' or the end; not a URL's), and its next long-term note is the
    -- next note of its session (no note kept in short-term memory alone was made strictly between
    -- them, the answer that would be; the tiers' insertion orders are not comparable, so a note
    -- of the same instant as either does not count)
    ordered AS MATERIALIZED (
        SELECT pr.id, pr.rel, p.prev_id, p.prev_ok, p.next_id, p.next_ok, coalesce(q.asks, false) AS asks
        FROM pool_rel pr JOIN pool p ON p.id = pr.id
        LEFT JOIN LATERAL (
            SELECT CASE WHEN p.next_id IS NULL OR n.content !~ '\?([[:space:]"'')\]!]|$)' THEN false
                        ELSE NOT EXISTS (
                            SELECT 1 FROM cortex.stm_notes s
                            JOIN cortex.notes a ON a.user_id = p_user_id AND a.id = p.next_id
                            WHERE s.user_id = p_user_id AND s.session_id = n.session_id
                              AND s.created_at > n.created_at AND s.created_at < a.created_at
                              AND NOT EXISTS (SELECT 1 FROM cortex.notes l
                                              WHERE l.user_id = p_user_id AND l.id = s.id))
                   END AS asks
            FROM cortex.notes n
            WHERE v_answer_weight > 0 AND n.user_id = p_user_id AND n.id = pr.id LIMIT 1) q ON true
        WHERE p.in_ltm
    ),
    -- expansion: the session neighbours of the `expansion` best notes join the candidates (the
    -- evidence is often the turn next to the best match) when they pass the search's
    -- conditions, scored with the candidates' bounds
    -- (v12: and the answers, the next notes, of the candidates that ask)
    expansion AS MATERIALIZED (
        SELECT DISTINCT nb.id
        FROM ((SELECT nb.id, nb.ok
               FROM (SELECT o.* FROM ordered o ORDER BY o.rel DESC, o.id LIMIT v_expansion) t
               CROSS JOIN LATERAL (VALUES (t.prev_id, t.prev_ok), (t.next_id, t.next_ok)) nb(id, ok))
              UNION ALL
              SELECT o.next_id, o.next_ok FROM ordered o WHERE o.asks) nb
        WHERE nb.ok AND nb.id NOT IN (SELECT pr.id FROM pool_rel pr)
    ),
    -- (one note per call, joined laterally: an argument holding a sub-select would keep the SQL
    -- function from being inlined, and a call that is not inlined is planned on every search)
    expansion_signals AS MATERIALIZED (
        SELECT es.* FROM expansion x
        CROSS JOIN LATERAL cortex.search_signals(p_user_id, ARRAY[x.id], v_model, p_query_embedding, v_terms,
                                                 v_n, v_avgdl, p_memory_source, v_context_weight,
                                                 v_length_prior) es
    ),
    expanded AS MATERIALIZED (
        SELECT pr.id, pr.v, pr.s, pr.rel, pr.ecov, pr.er FROM pool_rel pr
        UNION ALL
        SELECT es.id, es.v, es.s,
               (CASE WHEN p_query_embedding IS NULL OR es.v IS NULL THEN 0
                     WHEN v_fusion = 'rrf'
                          THEN fu.wv * (v_rrf_k + 1) / (v_rrf_k + 1 + (SELECT count(*) FROM pool_signals ps WHERE ps.v > es.v))
                     ELSE fu.wv * CASE WHEN b.v_hi > b.v_lo THEN greatest(least((es.v - b.v_lo) / (b.v_hi - b.v_lo), 1), 0)
                                       ELSE 1 END END
                + CASE WHEN cardinality(v_terms) = 0 OR es.s <= 0 OR b.s_hi <= 0 THEN 0
                       WHEN v_fusion = 'rrf'
                            THEN fu.wt * (v_rrf_k + 1) / (v_rrf_k + 1 + (SELECT count(*) FROM pool_signals ps WHERE ps.s > es.s))
                       ELSE fu.wt * least(es.s / b.s_hi, 1) END)
                / greatest(fu.total, 1e-9),
               NULL::float8, NULL::int
        FROM expansion_signals es CROSS JOIN bounds b CROSS JOIN fusion fu
    ),
    normed AS MATERIALIZED (
        SELECT x.id, x.v, x.s, x.ecov, x.er,
               CASE WHEN max(x.rel) OVER () > min(x.rel) OVER ()
                    THEN (x.rel - min(x.rel) OVER ()) / (max(x.rel) OVER () - min(x.rel) OVER ())
                    ELSE x.rel END AS r
        FROM expanded x
    ),
    -- adjacency among the candidates, both ways: an expansion note is the neighbour of the
    -- candidate it was found from, and of any other candidate whose neighbour it is
    adjacent AS MATERIALIZED (
        SELECT a.id, a.nb, a.is_prev FROM (
            SELECT o.id, o.prev_id AS nb, true AS is_prev FROM ordered o
            UNION SELECT o.id, o.next_id, false FROM ordered o
            UNION SELECT o.prev_id, o.id, false FROM ordered o
            UNION SELECT o.next_id, o.id, true FROM ordered o) a
        WHERE a.id IS NOT NULL AND a.nb IS NOT NULL
    ),
    -- neighbour smoothing: r + max(smoothing_prev * r of the previous, smoothing_next * r of the
    -- next note of the session), a neighbour counting only when it is itself a candidate
    smoothed AS (
        SELECT nm.*, (nm.r + greatest(v_smoothing_prev * coalesce(nbr.r_prev, 0),
                                      v_smoothing_next * coalesce(nbr.r_next, 0)))
                     / (1 + greatest(v_smoothing_prev, v_smoothing_next)) AS relevance
        FROM normed nm
        LEFT JOIN (SELECT a.id, max(x.r) FILTER (WHERE a.is_prev) AS r_prev,
                          max(x.r) FILTER (WHERE NOT a.is_prev) AS r_next
                   FROM adjacent a JOIN normed x ON x.id = a.nb
                   GROUP BY a.id) nbr ON nbr.id = nm.id
    ),
    -- the answer to a question: at least answer_weight times the question's relevance (v12)
    answered AS (
        SELECT sm.*, greatest(sm.relevance, v_answer_weight * coalesce(
                   (SELECT max(qs.relevance) FROM ordered o JOIN smoothed qs ON qs.id = o.id
                    WHERE o.asks AND o.next_ok AND o.next_id = sm.id), 0)) AS answered_relevance
        FROM smoothed sm
    ),
    fused AS (
        SELECT sm.id, sm.answered_relevance AS relevance, sm.s AS ts, sm.v, sm.ecov, sm.er,
               CASE WHEN sm.v IS NULL THEN NULL
                    ELSE row_number() OVER (ORDER BY sm.v DESC NULLS LAST, sm.id) END::int AS vr,
               CASE WHEN sm.s > 0 THEN row_number() OVER (ORDER BY sm.s DESC, sm.id) END::int AS tr
        FROM answered sm
    ),
    -- (lookups by id written as LATERAL ... LIMIT 1: the plan is generic, and a join would be
    -- planned for candidates of unknown number, reading the tenant's notes whole)
    placed AS (
        SELECT f.*, s.id IS NOT NULL AS in_stm,
               coalesce(s.created_at, n.created_at) AS created_at,
               CASE WHEN p_context_embedding IS NULL THEN NULL
                    WHEN s.id IS NOT NULL AND s.model = v_model THEN 1 - (s.embedding <=> p_context_embedding)
                    ELSE 1 - (SELECT min(e.embedding <=> p_context_embedding) FROM cortex.embeddings e
                              WHERE e.user_id = p_user_id AND e.note_id = f.id AND e.model = v_model
                                AND e.kind = 'text') END AS ctx,
               -- (v13) the note's speaker is named by the query
               sp.words <> '' AND position(' ' || sp.words || ' ' IN v_query_words) > 0 AS named
        FROM fused f
        LEFT JOIN LATERAL (
            SELECT s.id, s.created_at, s.model, s.embedding, cortex.speaker_words(s.metadata) AS speaker
            FROM cortex.stm_notes s
            WHERE s.user_id = p_user_id AND s.id = f.id AND p_memory_source IN ('all', 'stm')
              AND (v_stm_ok IS NULL OR s.id = ANY (v_stm_ok)) LIMIT 1) s ON true
        LEFT JOIN LATERAL (
            SELECT n.id, n.created_at, cortex.speaker_words(n.metadata) AS speaker
            FROM cortex.notes n
            WHERE n.user_id = p_user_id AND n.id = f.id AND p_memory_source IN ('all', 'ltm')
              AND n.merged_into IS NULL LIMIT 1) n ON true
        -- (the speaker's words, cortex.speaker_words: '' for none, an over-long one, or
        -- speaker_weight 0)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN v_speaker_weight > 0 THEN coalesce(s.speaker, n.speaker, '') ELSE '' END AS words) sp
        WHERE s.id IS NOT NULL OR n.id IS NOT NULL
    ),
    -- (v13) a note said by a person the query names: (relevance + speaker_weight) / (1 +
    -- speaker_weight), the others relevance / (1 + speaker_weight), when the query names the
    -- speaker of at least one candidate
    spoken AS (
        SELECT p1.*, CASE WHEN bool_or(p1.named) OVER ()
                          THEN (p1.relevance + v_speaker_weight * p1.named::int) / (1 + v_speaker_weight)
                          ELSE p1.relevance END AS spoken_relevance
        FROM placed p1
    ),
    scored AS (
        SELECT p.*, (1 - p_temporal_weight) * p.spoken_relevance + p_temporal_weight * p.recency AS blended
        FROM (SELECT p0.*,
                     -- (in float8; 0 beyond 700 time constants, below float8's range)
                     CASE WHEN p0.age_tc > 700 THEN 0 ELSE exp(-p0.age_tc) END::float8 AS recency
              FROM (SELECT p1.*, greatest(extract(epoch FROM (p_now - p1.created_at))::float8, 0) / 86400.0 / 7.0
                                 AS age_tc
                    FROM spoken p1) p0) p
    ),
    top AS (
        SELECT sc.*, CASE WHEN sc.ctx IS NULL THEN sc.blended
                          ELSE 0.3 * sc.blended + 0.7 * sc.ctx END::float8 AS final
        FROM scored sc
        ORDER BY final DESC, sc.id
        LIMIT p_limit
    )
    SELECT t.id, coalesce(s.user_id, n.user_id), coalesce(s.session_id, n.session_id),
           CASE WHEN t.in_stm THEN 'stm' ELSE 'ltm' END,
           coalesce(s.content, n.content), coalesce(s.keywords, n.keywords), coalesce(s.tags, n.tags),
           CASE WHEN t.in_stm THEN s.context ELSE n.context END,
           CASE WHEN t.in_stm THEN s.category ELSE n.category END,
           coalesce(s.memory_type, n.memory_type), coalesce(s.metadata, n.metadata),
           coalesce(s.importance, n.importance), t.created_at,
           coalesce(s.updated_at, n.updated_at), coalesce(s.last_accessed_at, n.last_accessed_at),
           coalesce(s.access_count, n.access_count),
           t.final, t.spoken_relevance, t.v, 1 - t.v, coalesce(t.ts, 0)::float8, t.recency, t.vr, t.tr,
           t.ctx::float8, t.ecov::float8, t.er
    FROM top t
    LEFT JOIN LATERAL (SELECT s.* FROM cortex.stm_notes s
                       WHERE t.in_stm AND s.user_id = p_user_id AND s.id = t.id LIMIT 1) s ON true
    LEFT JOIN LATERAL (SELECT n.* FROM cortex.notes n
                       WHERE NOT t.in_stm AND n.user_id = p_user_id AND n.id = t.id LIMIT 1) n ON true
    ORDER BY t.final DESC, t.id;
    PERFORM set_config('plan_cache_mode', v_plan_mode, true);
END
$fn$;
