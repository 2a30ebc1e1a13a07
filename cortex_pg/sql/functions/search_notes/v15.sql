-- cortex.search_statement (v15): v9's candidate statement (search_notes/v9.sql explains it), in
-- which the short-term notes matched by the query's terms are bounded by the pool.
--
-- v15 (Alembic 0037): short-term notes are not in the inverted index (cortex.bm25_postings),
-- so v9-v14 took every short-term note of the tenant that one query term matched as a
-- full-text candidate: a common word, or a speaker's name before v14, brought hundreds on a
-- store that keeps many sessions in short-term memory (LoCoMo's conversations keep about 350
-- each), and each candidate is scored, looked up and smoothed (15-25 ms more per search).
-- Now they are ranked by BM25 (the tenant's idf, q_terms, with each note's own term
-- frequencies and length, as cortex.search_signals scores a short-term note) and the best
-- `pool` (max(2 x limit, 20)) join, as the long-term full-text candidates do; ties by id.
-- Only cortex.search_statement is replaced: cortex.search_notes stays v14's, the other helpers v9's.

CREATE OR REPLACE FUNCTION cortex.search_statement(
    p_model text, p_dim int, p_filter_n text DEFAULT 'true', p_filter_s text DEFAULT 'true',
    p_entities boolean DEFAULT false, p_vector boolean DEFAULT true, p_text boolean DEFAULT true,
    p_tiers text DEFAULT 'all', p_neighbours boolean DEFAULT true, p_scan text DEFAULT 'planned'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    v_cast text := format('%s(%s)', cortex.embedding_index_type(p_dim), p_dim);
    v_window_n text := '($6::timestamptz IS NULL OR n.created_at >= $6) AND ($7::timestamptz IS NULL OR n.created_at < $7)';
    v_vec_ltm text;
    v_vec_stm text;
    v_txt_ltm text;
    -- (v15) the pool notes of best BM25 (q_terms' idf, each note's own tf and length)
    v_stm_txt text := format($q$
            SELECT s.id FROM cortex.stm_notes s
            WHERE s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9) AND $10 IN ('all', 'stm')
              AND s.tsv @@ $3
              AND ($6::timestamptz IS NULL OR s.created_at >= $6)
              AND ($7::timestamptz IS NULL OR s.created_at < $7)
              AND %1$s
            ORDER BY (SELECT sum(q.idf * t.tf * (1.2 + 1) / (t.tf + 1.2 * (1 - 0.75 + 0.75 * length(s.tsv) / $19)))
                      FROM (SELECT u.lexeme, coalesce(cardinality(u.positions), 1)::float8 AS tf
                            FROM unnest(s.tsv) AS u WHERE u.lexeme = ANY ($12::text[])) t
                      JOIN q_terms q ON q.lexeme = t.lexeme) DESC NULLS LAST, s.id
            LIMIT $11$q$, p_filter_s);
    v_neighbours text;
    -- a vector candidate's note: joined, or (prepared) looked up one by one, so that a generic
    -- plan, made without knowing the tenant, does not read the tenant's notes whole to join them
    v_note text := CASE WHEN p_scan IN ('index', 'exact')
        THEN 'CROSS JOIN LATERAL (SELECT n.* FROM cortex.notes n WHERE n.user_id = e.user_id AND n.id = e.note_id LIMIT 1) n'
        ELSE 'JOIN cortex.notes n ON n.user_id = e.user_id AND n.id = e.note_id' END;
    -- the window-0 scan's order: the index's expression, or (exact) the stored vectors' own
    -- distance, which no index gives
    v_order text := CASE WHEN p_scan = 'exact' THEN '(e.embedding <=> $2)'
                         ELSE format('e.embedding::%1$s <=> $2::%1$s', v_cast) END;
    v_entities text := $q$
        ent_ranked AS (SELECT NULL::uuid AS id, NULL::float8 AS cov, NULL::int AS r WHERE false),
        ent_weight AS (SELECT 0::float8 AS w),
$q$;
BEGIN
    IF p_scan IS NULL OR p_scan NOT IN ('planned', 'index', 'exact') THEN
        RAISE EXCEPTION 'p_scan must be planned, index or exact, got %', p_scan USING ERRCODE = '22023';
    END IF;
    IF p_entities THEN  -- the entity list (only planned when the search asks for it)
        v_entities := format($q$
        q_ents AS (
            SELECT DISTINCT cortex.normalize_entity_name(x) AS norm
            FROM unnest(coalesce($15::text[], '{}')) AS x
            WHERE $16 > 0 AND btrim(x) <> ''
        ),
        ent_n AS (
            SELECT greatest(coalesce((SELECT c.doc_count FROM cortex.bm25_corpus c WHERE c.user_id = $1), 0), 1)::float8 AS n
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
              AND %1$s AND %2$s
              AND (($10 IN ('all', 'ltm'))
                   OR EXISTS (SELECT 1 FROM cortex.stm_notes s WHERE s.user_id = $1 AND s.id = n.id))
            GROUP BY m.note_id
        ),
        ent_ranked AS (
            SELECT h.id, least(h.cov, 1) AS cov,
                   row_number() OVER (ORDER BY h.cov DESC, h.dist NULLS LAST, h.id)::int AS r
            FROM (SELECT eh.id, eh.cov,
                         (SELECT min(e.embedding <=> $2) FROM cortex.embeddings e
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
$q$, v_window_n, p_filter_n, p_model);
    END IF;
    -- a note's window 0 (every note has one) and, when the tenant has long notes, the later
    -- windows, each scan up to pool rows: the first alone gives pool distinct notes however
    -- many windows a long note has near the query; the second finds long notes by any window
    v_vec_ltm := format($q$
            SELECT e.note_id AS id, (%6$s)::float8 AS dist
            FROM cortex.embeddings e
            %5$s
            WHERE $2::vector IS NOT NULL
              AND e.model = %2$L AND e.kind = 'text' AND e.window_no = 0
              AND e.user_id = $1 AND ($9::text IS NULL OR e.session_id = $9)
              AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL
              AND %3$s AND %4$s
            ORDER BY %6$s
            LIMIT $11
            ) UNION ALL (
            SELECT e.note_id AS id, (e.embedding <=> $2)::float8 AS dist  -- not the index's expression
            FROM cortex.embeddings e
            %5$s
            WHERE $2::vector IS NOT NULL
              AND EXISTS (SELECT 1 FROM cortex.embeddings w   -- ix_embeddings_windows
                          WHERE w.user_id = $1 AND w.model = %2$L AND w.window_no > 0)
              AND e.model = %2$L AND e.kind = 'text' AND e.window_no > 0
              AND e.user_id = $1 AND ($9::text IS NULL OR e.session_id = $9)
              AND $10 IN ('all', 'ltm') AND n.merged_into IS NULL
              AND %3$s AND %4$s
            ORDER BY 2
            LIMIT $11$q$, v_cast, p_model, v_window_n, p_filter_n, v_note, v_order);
    v_vec_stm := format($q$
            SELECT s.id, (s.embedding <=> $2) AS dist
            FROM cortex.stm_notes s
            WHERE $2::vector IS NOT NULL
              AND s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9) AND $10 IN ('all', 'stm')
              AND s.model = %1$L
              AND ($6::timestamptz IS NULL OR s.created_at >= $6)
              AND ($7::timestamptz IS NULL OR s.created_at < $7)
              AND %2$s
            ORDER BY 2
            LIMIT $11$q$, p_model, p_filter_s);
    -- a term's best postings by impact; with a session, window or filter, only notes that pass
    -- (the two forms are alternatives: one-time filters on the parameters pick one)
    v_txt_ltm := format($q$
            SELECT p.note_id, p.impact FROM cortex.bm25_postings p
            WHERE $9::text IS NULL AND $6::timestamptz IS NULL AND $7::timestamptz IS NULL AND %1$L = 'true'
              AND p.user_id = $1 AND p.lexeme = q.lexeme
            ORDER BY p.impact DESC, p.note_id
            LIMIT $11
            ) UNION ALL (
            SELECT p.note_id, p.impact FROM cortex.bm25_postings p
            JOIN cortex.notes n ON n.user_id = p.user_id AND n.id = p.note_id
            WHERE NOT ($9::text IS NULL AND $6::timestamptz IS NULL AND $7::timestamptz IS NULL AND %1$L = 'true')
              AND p.user_id = $1 AND p.lexeme = q.lexeme AND ($9::text IS NULL OR n.session_id = $9)
              AND %2$s AND %1$s
            ORDER BY p.impact DESC, p.note_id
            LIMIT $11$q$, p_filter_n, v_window_n);
    -- each long-term candidate's session neighbours: the previous and next current note by
    -- (created_at, seq), and whether each passes the search's conditions (tier, session,
    -- window, filter), so the scoring may add it to the candidates (expansion); left out when
    -- smoothing and expansion are off
    v_neighbours := CASE WHEN p_neighbours THEN format($q$
        neighbours AS MATERIALIZED (
            SELECT c.id, pv.id AS prev_id, coalesce(pv.ok, false) AS prev_ok,
                   nx.id AS next_id, coalesce(nx.ok, false) AS next_ok
            FROM pool p
            JOIN cortex.notes c ON c.user_id = $1 AND c.id = p.id AND c.merged_into IS NULL
            LEFT JOIN LATERAL (
                SELECT n.id, ($10 IN ('all', 'ltm') AND ($9::text IS NULL OR n.session_id = $9) AND %1$s AND %2$s) AS ok
                FROM cortex.notes n
                WHERE $20 AND n.user_id = $1 AND n.session_id = c.session_id AND n.merged_into IS NULL
                  AND (n.created_at, n.seq) < (c.created_at, c.seq)
                ORDER BY n.created_at DESC, n.seq DESC LIMIT 1) pv ON true
            LEFT JOIN LATERAL (
                SELECT n.id, ($10 IN ('all', 'ltm') AND ($9::text IS NULL OR n.session_id = $9) AND %1$s AND %2$s) AS ok
                FROM cortex.notes n
                WHERE $20 AND n.user_id = $1 AND n.session_id = c.session_id AND n.merged_into IS NULL
                  AND (n.created_at, n.seq) > (c.created_at, c.seq)
                ORDER BY n.created_at, n.seq LIMIT 1) nx ON true
        )$q$, v_window_n, p_filter_n) ELSE $q$
        neighbours AS (SELECT NULL::uuid AS id, NULL::uuid AS prev_id, false AS prev_ok,
                              NULL::uuid AS next_id, false AS next_ok WHERE false)$q$ END;
    -- the parts a search cannot use are left out (shorter planning): the vector scans without
    -- a query embedding, the full-text ones without a query term, a tier not searched
    IF NOT p_vector OR p_tiers = 'stm' THEN
        v_vec_ltm := 'SELECT NULL::uuid AS id, NULL::float8 AS dist WHERE false';
    END IF;
    IF NOT p_vector OR p_tiers = 'ltm' THEN
        v_vec_stm := 'SELECT NULL::uuid AS id, NULL::float8 AS dist WHERE false';
    END IF;
    IF NOT p_text OR p_tiers = 'stm' THEN
        v_txt_ltm := 'SELECT NULL::uuid AS note_id, NULL::real AS impact WHERE false';
    END IF;
    IF NOT p_text OR p_tiers = 'ltm' THEN
        v_stm_txt := 'SELECT NULL::uuid AS id WHERE false';
    END IF;
    RETURN format($q$
        WITH
        q_terms AS MATERIALIZED (
            SELECT q.lexeme, ln(1 + ($18 - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) AS idf
            FROM unnest($12::text[]) AS q(lexeme)
            LEFT JOIN cortex.bm25_terms t ON t.user_id = $1 AND t.lexeme = q.lexeme
        ),
        vec AS MATERIALIZED (
            SELECT v.id FROM ((%1$s) UNION ALL (%2$s)) v
            GROUP BY v.id ORDER BY min(v.dist), v.id LIMIT $11
        ),
        -- the pool notes of best approximate BM25 (sum of idf * impact over the terms whose
        -- best postings hold them; v8: v4-v7 kept every note found, up to pool per term)
        txt_cand AS MATERIALIZED (
            SELECT c.note_id AS id
            FROM q_terms q CROSS JOIN LATERAL ((%6$s)) c
            WHERE $10 IN ('all', 'ltm')
            GROUP BY c.note_id
            ORDER BY sum(q.idf * c.impact) DESC, c.note_id
            LIMIT $11
        ),
        stm_hits AS MATERIALIZED (
            %9$s
        ),
%8$s
        pool AS MATERIALIZED (
            SELECT id FROM vec UNION SELECT id FROM txt_cand
            UNION SELECT id FROM stm_hits UNION SELECT id FROM ent_ranked
        ),
        -- each candidate's session neighbours (see v_neighbours)
%10$s
        SELECT array_agg(p.id ORDER BY p.id), array_agg(en.cov ORDER BY p.id), array_agg(en.r ORDER BY p.id),
               array_agg(nb.id IS NOT NULL ORDER BY p.id),
               array_agg(nb.prev_id ORDER BY p.id), array_agg(coalesce(nb.prev_ok, false) ORDER BY p.id),
               array_agg(nb.next_id ORDER BY p.id), array_agg(coalesce(nb.next_ok, false) ORDER BY p.id),
               (SELECT w FROM ent_weight)
        FROM pool p
        LEFT JOIN ent_ranked en ON en.id = p.id
        LEFT JOIN neighbours nb ON nb.id = p.id
    $q$, v_vec_ltm, v_vec_stm, v_window_n, p_filter_n, p_filter_s, v_txt_ltm, p_model, v_entities,
       v_stm_txt, v_neighbours);
END
$fn$;
