-- cortex.search_notes (v3): hybrid search over a user's notes, in one SQL statement.
--
--   SELECT * FROM cortex.search_notes('alice', '[...]'::vector, 'where did I park?', 10);
--   SELECT * FROM cortex.search_notes('alice', NULL, 'parking', 5,
--                                     p_filter => '{"tags": {"$contains": "car"}}');
--
-- v2 added p_filter (a where_filter, see cortex.compile_filter) and p_context_embedding
-- (context re-ranking), and put p_filter before p_now. v3 adds the entity signal
-- (p_query_entities, p_entity_weight, p_expand_entities), weights the full-text ranker by
-- query coverage, and caps the query at 64 distinct terms.
--
-- Candidates (each ranker returns up to pool = max(5 * p_limit, 250) rows; a pool that does
-- not shrink with p_limit keeps the top of the fused ranking the same for any limit <= 50):
--   vector : cosine distance, LTM from the model's partial HNSW index on cortex.embeddings
--            (pgvector iterative index scan, so tenant/date filters still fill the pool),
--            STM by exact scan of the (small) UNLOGGED cortex.stm_notes;
--   text   : Okapi BM25 over the tsvector column (GIN), query terms OR-ed,
--            k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (Robertson/Lucene),
--            N, df and average length over the user's searchable notes (no date window),
--            document length = number of distinct lexemes.
-- Entity:  with p_query_entities (names, matched by cortex.normalize_entity_name) and
--            p_entity_weight > 0, notes mentioning them are a third candidate list, ranked by
--            entity coverage = sum(idf_e of the query entities the note mentions) /
--            sum(idf_e of all query entities), idf_e = ln(1 + N / frequency) (an entity not in
--            the store counts with frequency 0.5), ties broken by cosine distance to the query
--            (so the list is the vector ranking restricted to notes about the query's
--            entities). p_expand_entities also takes notes that mention entities one
--            relationship away (valid now), at half coverage.
-- Fusion: coverage-weighted reciprocal rank fusion (Cormack et al. 2009), k = 60:
--            relevance = (1/(60+rank_vec) + cov_text/(60+rank_text) + w*cov_ent/(60+rank_ent))
--                        / ((vector_on + text_on + w) / 61), in [0, 1], where the entity
--            list's weight w = p_entity_weight * specificity, specificity = mean idf_e of the
--            query entities / ln(1 + N / 0.5) in (0, 1] (an entity in half the notes, such as
--            a speaker's name, weighs little; a rare one nearly fully),
--            cov_text = sum(idf of query terms the note contains) / sum(idf of all query
--            terms) (unmatched terms use df = 0), so a note matching only a common word (a
--            speaker's name, say) gets little from the text ranker.
-- Recency: exp(-age_days / 7) with age measured from p_now (Prem Cortex temporal weighting),
--            future notes count as age 0.
-- Score:  (1 - p_temporal_weight) * relevance + p_temporal_weight * recency.
-- Window: p_date_from <= created_at < p_date_to (either bound may be NULL).
-- Filter: p_filter (jsonb where_filter) restricts candidates of both tiers alike; it does
--            not change the BM25 corpus statistics.
-- Context: with p_context_embedding, score = 0.3 * score + 0.7 * context_score where
--            context_score = cosine(context, note) (Prem Cortex context re-ranking), both
--            tiers on one scale.
-- Tiers:  p_memory_source 'all' | 'ltm' | 'stm'; with 'all' a note present in both tiers is
--            returned once, as its STM copy (memory_tier = 'stm').
-- Errors: SQLSTATE 22023 for a bad argument (limit <= 0, weight outside [0, 1], unknown
--            source, unknown model, no query at all).
-- Results are ordered best first (score desc, then id).

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
    p_expand_entities boolean DEFAULT false
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
    v_vec_ltm text;
    v_vec_stm text;
    v_filter_n text := cortex.compile_filter(p_filter, 'n');
    v_filter_s text := cortex.compile_filter(p_filter, 's');
    v_ent_weight float8 := 0;
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

    v_pool := greatest(p_limit * 5, 250);

    SELECT coalesce(array_agg(x.lexeme), '{}') INTO v_terms
    FROM (SELECT t.lexeme
          FROM unnest(to_tsvector('english', left(coalesce(p_query_text, ''), 100000))) AS t
          WHERE t.lexeme !~ '[\\'']'
          ORDER BY t.positions[1]
          LIMIT 64) x;
    IF cardinality(v_terms) > 0 THEN
        SELECT string_agg(quote_literal(t), ' | ')::tsquery INTO v_tsq FROM unnest(v_terms) AS t;
        v_rankers := v_rankers + 1;
    END IF;

    IF p_query_embedding IS NOT NULL OR p_context_embedding IS NOT NULL THEN
        IF p_model IS NULL THEN
            SELECT m.model, m.dim INTO v_model, v_dim FROM cortex.embedding_models m WHERE m.active;
        ELSE
            SELECT m.model, m.dim INTO v_model, v_dim FROM cortex.embedding_models m WHERE m.model = p_model;
        END IF;
        IF v_model IS NULL THEN
            RAISE EXCEPTION 'embedding model % is not registered', coalesce(p_model, '(active)')
                USING ERRCODE = '22023';
        END IF;
        IF vector_dims(coalesce(p_query_embedding, p_context_embedding)) <> v_dim
           OR vector_dims(coalesce(p_context_embedding, p_query_embedding)) <> v_dim THEN
            RAISE EXCEPTION 'query/context embedding dimensions differ from model % (%)', v_model, v_dim
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF p_entity_weight IS NULL OR p_entity_weight < 0 OR p_entity_weight > 10 THEN
        RAISE EXCEPTION 'p_entity_weight must be in [0, 10], got %', p_entity_weight USING ERRCODE = '22023';
    END IF;
    IF p_entity_weight > 0 AND cardinality(p_query_entities) > 0 THEN
        v_ent_weight := p_entity_weight;
    END IF;
    IF p_query_embedding IS NOT NULL THEN
        v_rankers := v_rankers + 1;
        -- per transaction (SET LOCAL semantics), so the setting reaches every shard
        PERFORM set_config('hnsw.ef_search', least(greatest(v_pool, 40), 1000)::text, true);
        IF current_setting('hnsw.iterative_scan', true) IS NOT NULL THEN
            PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        END IF;
        v_vec_ltm := format($q$
            SELECT e.note_id AS id, (e.embedding::vector(%1$s) <=> $2::vector(%1$s)) AS dist
            FROM cortex.embeddings e
            JOIN cortex.notes n ON n.user_id = e.user_id AND n.id = e.note_id
            WHERE e.model = %2$L AND e.user_id = $1 AND ($9::text IS NULL OR e.session_id = $9)
              AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL
              AND ($6::timestamptz IS NULL OR n.created_at >= $6)
              AND ($7::timestamptz IS NULL OR n.created_at < $7)
              AND %3$s
            ORDER BY e.embedding::vector(%1$s) <=> $2::vector(%1$s)
            LIMIT $11$q$, v_dim, v_model, v_filter_n);
        v_vec_stm := format($q$
            SELECT s.id, (s.embedding <=> $2) AS dist
            FROM cortex.stm_notes s
            WHERE s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9) AND $10 IN ('all', 'stm')
              AND s.model = %1$L
              AND ($6::timestamptz IS NULL OR s.created_at >= $6)
              AND ($7::timestamptz IS NULL OR s.created_at < $7)
              AND %2$s
            ORDER BY 2
            LIMIT $11$q$, v_model, v_filter_s);
    ELSE
        v_vec_ltm := 'SELECT NULL::uuid AS id, NULL::float8 AS dist WHERE false';
        v_vec_stm := v_vec_ltm;
    END IF;

    RETURN QUERY EXECUTE format($q$
        WITH
        vec AS (
            SELECT v.id, min(v.dist) AS dist
            FROM ((%1$s) UNION ALL (%2$s)) v
            GROUP BY v.id
        ),
        vec_ranked AS (
            SELECT v.id, row_number() OVER (ORDER BY v.dist, v.id)::int AS r FROM vec v
        ),
        corpus AS (
            SELECT count(*) AS n, coalesce(sum(length(n.tsv)), 0) AS total_len
            FROM cortex.notes n
            WHERE n.user_id = $1 AND ($9::text IS NULL OR n.session_id = $9)
              AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL AND $3::tsquery IS NOT NULL
            UNION ALL
            SELECT count(*), coalesce(sum(length(s.tsv)), 0)
            FROM cortex.stm_notes s
            WHERE s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9)
              AND $10 IN ('all', 'stm') AND $3::tsquery IS NOT NULL
              AND ($10 = 'stm' OR NOT EXISTS (
                  SELECT 1 FROM cortex.notes n2
                  WHERE n2.user_id = s.user_id AND n2.id = s.id AND n2.merged_into IS NULL))
        ),
        stats AS (
            SELECT sum(c.n)::float8 AS n, sum(c.total_len)::float8 / greatest(sum(c.n), 1) AS avgdl
            FROM corpus c
        ),
        matched AS (
            SELECT DISTINCT ON (m.id) m.id, m.tsv, m.in_window
            FROM (
                SELECT n.id, n.tsv,
                       ($6::timestamptz IS NULL OR n.created_at >= $6)
                       AND ($7::timestamptz IS NULL OR n.created_at < $7) AND %4$s AS in_window
                FROM cortex.notes n
                WHERE n.user_id = $1 AND ($9::text IS NULL OR n.session_id = $9)
                  AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL AND n.tsv @@ $3
                UNION ALL
                SELECT s.id, s.tsv,
                       ($6::timestamptz IS NULL OR s.created_at >= $6)
                       AND ($7::timestamptz IS NULL OR s.created_at < $7) AND %5$s
                FROM cortex.stm_notes s
                WHERE s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9)
                  AND $10 IN ('all', 'stm') AND s.tsv @@ $3
            ) m
            ORDER BY m.id
        ),
        term_hits AS (
            SELECT m.id, m.in_window, length(m.tsv)::float8 AS dl, t.lexeme,
                   coalesce(cardinality(t.positions), 1)::float8 AS tf
            FROM matched m, LATERAL unnest(m.tsv) AS t
            WHERE t.lexeme = ANY ($12)
        ),
        df AS (
            SELECT h.lexeme, count(*)::float8 AS df FROM term_hits h GROUP BY h.lexeme
        ),
        term_idf AS (
            SELECT q.lexeme, ln(1 + (st.n - coalesce(d.df, 0) + 0.5) / (coalesce(d.df, 0) + 0.5)) AS idf
            FROM unnest($12::text[]) AS q(lexeme) CROSS JOIN stats st LEFT JOIN df d ON d.lexeme = q.lexeme
        ),
        coverage AS (
            SELECT h.id, sum(ti.idf) / nullif((SELECT sum(idf) FROM term_idf), 0) AS cov
            FROM (SELECT DISTINCT th.id, th.lexeme FROM term_hits th WHERE th.in_window) h
            JOIN term_idf ti ON ti.lexeme = h.lexeme
            GROUP BY h.id
        ),
        bm25 AS (
            SELECT h.id,
                   sum(ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5))
                       * h.tf * (1.2 + 1) / (h.tf + 1.2 * (1 - 0.75 + 0.75 * h.dl / greatest(st.avgdl, 1))))
                       AS s
            FROM term_hits h JOIN df d ON d.lexeme = h.lexeme CROSS JOIN stats st
            WHERE h.in_window
            GROUP BY h.id
        ),
        txt_ranked AS (
            SELECT b.id, b.s, c.cov, row_number() OVER (ORDER BY b.s DESC, b.id)::int AS r
            FROM bm25 b JOIN coverage c ON c.id = b.id ORDER BY b.s DESC, b.id LIMIT $11
        ),
        q_ents AS (
            SELECT DISTINCT cortex.normalize_entity_name(x) AS norm
            FROM unnest(coalesce($15::text[], '{}')) AS x
            WHERE $16 > 0 AND btrim(x) <> ''
        ),
        ent_n AS (
            SELECT greatest(count(*), 1)::float8 AS n FROM cortex.notes n
            WHERE $16 > 0 AND n.user_id = $1 AND n.merged_into IS NULL
        ),
        q_ent_idf AS (
            SELECT q.norm, e.id AS entity_id, ln(1 + en.n / greatest(coalesce(e.frequency, 0), 0.5)) AS idf
            FROM q_ents q CROSS JOIN ent_n en
            LEFT JOIN cortex.entities e ON e.user_id = $1 AND e.normalized_name = q.norm
        ),
        hop_ents AS (
            SELECT DISTINCT CASE WHEN r.source_id = q.entity_id THEN r.target_id ELSE r.source_id END AS entity_id,
                   q.idf * 0.5 AS idf
            FROM q_ent_idf q
            JOIN cortex.relationships r
              ON r.user_id = $1 AND (r.source_id = q.entity_id OR r.target_id = q.entity_id)
             AND r.valid_to IS NULL
            WHERE $17 AND q.entity_id IS NOT NULL
        ),
        ent_weights AS (
            SELECT entity_id, max(idf) AS idf FROM (
                SELECT entity_id, idf FROM q_ent_idf WHERE entity_id IS NOT NULL
                UNION ALL SELECT entity_id, idf FROM hop_ents) w
            GROUP BY entity_id
        ),
        ent_hits AS (
            SELECT m.note_id AS id, sum(w.idf) / nullif((SELECT sum(idf) FROM q_ent_idf), 0) AS cov
            FROM ent_weights w
            JOIN cortex.entity_mentions m ON m.user_id = $1 AND m.entity_id = w.entity_id
            JOIN cortex.notes n ON n.user_id = $1 AND n.id = m.note_id
            WHERE n.merged_into IS NULL AND ($9::text IS NULL OR n.session_id = $9)
              AND ($6::timestamptz IS NULL OR n.created_at >= $6)
              AND ($7::timestamptz IS NULL OR n.created_at < $7)
              AND %4$s
              AND (($10 IN ('all', 'ltm'))
                   OR EXISTS (SELECT 1 FROM cortex.stm_notes s WHERE s.user_id = $1 AND s.id = n.id))
            GROUP BY m.note_id
        ),
        ent_ranked AS (
            SELECT h.id, least(h.cov, 1) AS cov,
                   row_number() OVER (ORDER BY h.cov DESC, h.dist NULLS LAST, h.id)::int AS r
            FROM (SELECT eh.id, eh.cov,
                         (SELECT e.embedding <=> $2 FROM cortex.embeddings e
                          WHERE e.user_id = $1 AND e.note_id = eh.id AND e.model = %3$L) AS dist
                  FROM ent_hits eh) h
            ORDER BY h.cov DESC, h.dist NULLS LAST, h.id
            LIMIT $11
        ),
        ent_weight AS (
            -- w_e scaled by the query entities' specificity: mean idf_e / ln(1 + N / 0.5), in (0, 1]
            SELECT coalesce($16 * (SELECT avg(q.idf) FROM q_ent_idf q) / ln(1 + en.n / 0.5), 0)::float8 AS w
            FROM ent_n en
        ),
        fused AS (
            SELECT coalesce(v.id, t.id, en.id) AS id, v.r AS vr, t.r AS tr, t.s AS ts, en.cov AS ecov, en.r AS er,
                   (coalesce(1.0 / (60 + v.r), 0) + coalesce(t.cov / (60 + t.r), 0)
                    + ew.w * coalesce(en.cov / (60 + en.r), 0))::float8
                       * 61.0 / greatest($13 + ew.w, 1) AS relevance
            FROM vec_ranked v
            FULL JOIN txt_ranked t ON t.id = v.id
            FULL JOIN ent_ranked en ON en.id = coalesce(v.id, t.id)
            CROSS JOIN ent_weight ew
        ),
        resolved AS (
            SELECT f.id, f.vr, f.tr, f.ts, f.ecov, f.er, f.relevance,
                   CASE WHEN s.id IS NOT NULL THEN 'stm' ELSE 'ltm' END AS tier,
                   coalesce(s.user_id, n.user_id) AS user_id,
                   coalesce(s.session_id, n.session_id) AS session_id,
                   coalesce(s.content, n.content) AS content,
                   coalesce(s.keywords, n.keywords) AS keywords,
                   coalesce(s.tags, n.tags) AS tags,
                   CASE WHEN s.id IS NOT NULL THEN s.context ELSE n.context END AS context,
                   CASE WHEN s.id IS NOT NULL THEN s.category ELSE n.category END AS category,
                   coalesce(s.memory_type, n.memory_type) AS memory_type,
                   coalesce(s.metadata, n.metadata) AS metadata,
                   coalesce(s.importance, n.importance) AS importance,
                   coalesce(s.created_at, n.created_at) AS created_at,
                   coalesce(s.updated_at, n.updated_at) AS updated_at,
                   coalesce(s.last_accessed_at, n.last_accessed_at) AS last_accessed_at,
                   coalesce(s.access_count, n.access_count) AS access_count,
                   CASE WHEN $2::vector IS NULL THEN NULL
                        WHEN s.id IS NOT NULL AND s.model = %3$L THEN s.embedding <=> $2
                        ELSE e.embedding <=> $2 END AS dist,
                   CASE WHEN $14::vector IS NULL THEN NULL
                        WHEN s.id IS NOT NULL AND s.model = %3$L THEN 1 - (s.embedding <=> $14)
                        ELSE 1 - (e.embedding <=> $14) END AS ctx
            FROM fused f
            LEFT JOIN cortex.stm_notes s
                   ON s.user_id = $1 AND s.id = f.id AND $10 IN ('all', 'stm')
            LEFT JOIN cortex.notes n
                   ON n.user_id = $1 AND n.id = f.id AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL
            LEFT JOIN cortex.embeddings e
                   ON e.user_id = $1 AND e.note_id = f.id AND e.model = %3$L
            WHERE s.id IS NOT NULL OR n.id IS NOT NULL
        ),
        scored AS (
            SELECT r.*, (1 - $5) * r.relevance + $5 * r.recency AS blended
            FROM (SELECT r0.*,
                         exp(-greatest(extract(epoch FROM ($8 - r0.created_at)), 0) / 86400.0 / 7.0)::float8
                             AS recency
                  FROM resolved r0) r
        )
        SELECT sc.id, sc.user_id, sc.session_id, sc.tier, sc.content, sc.keywords, sc.tags, sc.context,
               sc.category, sc.memory_type, sc.metadata, sc.importance, sc.created_at, sc.updated_at,
               sc.last_accessed_at, sc.access_count,
               CASE WHEN sc.ctx IS NULL THEN sc.blended
                    ELSE 0.3 * sc.blended + 0.7 * sc.ctx END::float8 AS score,
               sc.relevance, 1 - sc.dist, sc.dist, coalesce(sc.ts, 0)::float8, sc.recency, sc.vr, sc.tr,
               sc.ctx::float8, sc.ecov::float8, sc.er
        FROM scored sc
        ORDER BY 17 DESC, sc.id
        LIMIT $4
    $q$, v_vec_ltm, v_vec_stm, v_model, v_filter_n, v_filter_s)
    USING p_user_id, p_query_embedding, v_tsq, p_limit, p_temporal_weight::float8, p_date_from, p_date_to,
          p_now, p_session_id, p_memory_source, v_pool, v_terms, v_rankers, p_context_embedding,
          p_query_entities, v_ent_weight, p_expand_entities;
END
$fn$;
