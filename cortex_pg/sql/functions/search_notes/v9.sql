-- cortex.search_notes (v9): hybrid search over a user's notes, in one function call whose
-- cost does not grow with the tenant's size.
--
--   SELECT * FROM cortex.search_notes('alice', '[...]'::vector, 'where did I park?', 10);
--   SELECT * FROM cortex.search_notes('alice', NULL, 'parking', 5,
--                                     p_filter => '{"tags": {"$contains": "car"}}');
--   SELECT * FROM cortex.search_notes('alice', '[...]'::vector, 'parking', 10,
--                                     p_ranking => '{"fusion": "rrf", "smoothing_prev": 0}');
--
-- v9 (Alembic 0022) stops planning the usual search. A search without a session, date window
-- or where_filter prepares its candidate statement once per session (PREPARE, named after the
-- statement's text and the scan chosen, cortex_search_<i|e>_<md5>) and runs it on a generic plan,
-- with its arguments as literals (EXECUTE of a prepared statement takes no parameters); v8
-- planned it on every call (about 1 ms). A filtered search's best plan depends on the filter's
-- selectivity, so it is still planned for its values, as in v8. In the prepared statement a
-- vector candidate's note is looked up by id (a generic plan, made without knowing the tenant,
-- read the tenant's notes whole to join them) and no parallel worker is planned (a plan made
-- for no tenant in particular may count on a large one; starting workers took 10 ms).
-- Which scan finds the vector candidates: PostgreSQL's cost model prices pgvector's HNSW scan
-- far above what it takes, so for a tenant of about a thousand notes it chose an exact scan,
-- 1.3 to 1.6 ms against 0.3 ms through the index (a 10,000-note store, pool 20); the exact
-- scan grows with the tenant (1.2 to 2.7 us a note) while the index scan stays near 0.3 ms
-- when the tenant fills most of its partition, so they cross near 250 notes. An HNSW scan of a
-- tenant that shares its hash partition with larger ones walks past their entries: at 9 % of
-- its partition (938 notes among 21,000 rows) it took 1.7 to 2.3 ms and agreed with exact
-- search on 93 % of the top 10. So a tenant of at least 256 current notes
-- (cortex.bm25_corpus.doc_count) that holds at least a fifth of its partition's rows
-- (cortex.tenant_partition_share) has its vector candidates found through the index (the
-- statement is planned with enable_sort off, which leaves the index as the only ordered path,
-- and the setting restored after it); a smaller tenant is read exactly (prepared, generic,
-- ordered by the stored vectors' own distance, which no index gives, its rows found by its
-- user_id with enable_seqscan off: a generic plan ordered by the index's expression chose the
-- HNSW scan for a 5-note tenant sharing its partition with a 5,000-note one, 15 to 180 ms and
-- notes missed); a tenant of 256 notes or more that holds less of its partition, or whose
-- partition was never analyzed, is planned for its values (v8's choice). Later windows of long notes are ordered by the distance of the stored vectors
-- (embedding <=> q, not the index's expression), so a tenant with few windows is never walked
-- through its HNSW graph to find them. The expansion notes' signals come from an inlined call
-- (v8 passed their ids through a sub-select, which kept cortex.search_signals from being
-- inlined and had it planned on every search: 0.7 ms for 9 notes, 0.13 ms inlined). The HNSW
-- scan's hnsw.ef_search is at least pgvector's default of 40 (v8: the pool, 20 for limit 10):
-- on the 100,000-note store the scan found 59 % of a 17,511-note tenant's exact 20 nearest
-- notes at 20 and 69 % at 40 (72 % at 64, 81 % at 100), for 0.0-0.3 ms more. Results
-- are v8's, but for the index scan's approximation where v8 read a tenant exactly (v8 and v9
-- alternately on a 100,000-note store, 100 searches per tenant: identical top 10 for tenants
-- of 17,511, 9,298 and 938 notes; vector-only p50 0.58x, 0.65x and 1.00x of v8's time, hybrid
-- 0.77x, 0.77x, 0.98x; LoCoMo dev R@5 / R@10 / R@25 / R@50 unchanged at 67.3 / 77.3 / 84.7 /
-- 89.9).
--
-- v8 (Alembic 0021) takes the ranking's constants as an argument, p_ranking (a JSON object,
-- every key optional; cortex_pg.store.ranking.Ranking): fusion ("score" | "rrf"),
-- vector_weight (0.5; BM25 weighs 1 - it), context_weight (0.5: the context embedding's share
-- of the semantic score), length_prior (d0 = 24 lexemes; 0 = off), smoothing_prev and
-- smoothing_next (0.3 each: the shares of the previous and of the next note's relevance),
-- expansion (5: neighbours of that many best candidates join) and rrf_k (60). With none given
-- it ranks exactly as v7. An unknown key or a value out of range is SQLSTATE 22023. The
-- neighbour lookups are skipped when smoothing and expansion are all 0. Reciprocal rank fusion
-- ranks the candidates by v and by s (s > 0); an expansion note takes the rank it would have
-- among them.
-- A candidate without an embedding of the model (a note written from SQL and not embedded
-- yet) has no semantic score and takes no share of that signal (v7 gave it a NULL score).
-- Values of p_ranking are compared exactly (numeric) and length_prior is 0 or in [1, 10000].
-- v8 also runs in two steps. Step 1 (cortex.search_statement, dynamic SQL planned for each
-- call's values) finds the candidates and each one's session neighbours, with whether each
-- neighbour passes the search's conditions; it is the only part whose text depends on the
-- model's index and the where_filter, and the only part whose best plan depends on the tenant
-- (HNSW for a large tenant, an exact scan of a small one). Step 2 scores them: static SQL,
-- whose plan PostgreSQL makes once per session and reuses (generic; every lookup is by id,
-- written so that a plan for an unknown number of candidates still looks notes up one by one),
-- with the signals of cortex.search_signals. v7 planned the whole statement on every call,
-- about half of a search's time on a 2,000-note tenant; same results, measured on LoCoMo dev
-- and on 80 searches per tenant of a 10,000-note store (see README, Performance).
--
-- v7 (Alembic 0020) weighs the cosine of a note's own text by how much text it has: for a note
-- of dl distinct lexemes (its BM25 document length), cos(q, text) is multiplied by
-- w = least(1, sqrt(dl / 24)), so a heading, a title or a two-word reply no longer wins a query
-- by the accident of being short (a short text's embedding sits near many queries). The
-- context embedding (the note read after its predecessor) holds more text and is not weighed;
-- where it is missing (a session's first note), the text's own cosine stands in for it, as in
-- v6 (weighing the stand-in too gave the same recall, but ranked a first note below its
-- successor whenever the successor's context repeats it). On LoCoMo dev (short chat
-- turns) R@5 / R@10 were 65.4 / 75.7 without the prior, and with it for d0 = 8, 12, 16, 24,
-- 32: 65.6 / 76.0, 65.7 / 76.9, 66.3 / 77.2, 67.1 / 77.2, 67.6 / 77.1 (flat from 16 to 32);
-- at 24 every category is at or above its v6 figure at R@5 and R@10. Weighing the whole
-- mean instead (text and context alike) gained less: 67.2 / 76.2 at d0 = 16.
-- The BM25 signal is scaled by its maximum over the candidates instead of min-max (BM25 has a
-- natural zero, no term matched): with few candidates, a small BM25 difference no longer
-- weighs as much as the whole vector signal. LoCoMo dev: R@5 / R@10 / R@25 / R@50 67.1 / 77.2
-- / 84.7 / 89.8 with min-max, 67.4 / 77.2 / 84.7 / 90.0 with s / max(s).
-- A note whose text embedding is split into windows (a long note: window_no 0..n-1, all of
-- kind 'text') takes one place in the vector pool however many of its windows are near the
-- query: the vector ranker scans window 0 of every note (pool rows) and, when the tenant has
-- long notes, their later windows (pool rows more), then keeps each note's best.
--
-- v6 (Alembic 0013) looks up each candidate's session neighbours once (previous and next note)
-- and takes both the expansion and the smoothing from that one lookup (v5 looked them up twice
-- and joined every candidate with every other to find them); cortex.embeddings is
-- hash-partitioned by user_id from the same revision, so the vector candidates of a tenant come
-- from its partition's part of the HNSW index. Results are those of v5, except that with a
-- date window or where_filter a neighbour that fails it is not replaced by the next one that
-- passes (the expansion takes adjacent notes only).
--
-- v5 (Alembic 0011) is conversation-aware: it scores a note by the mean of the query's cosine
-- with its text and with its context embedding (the note read after its predecessor in the
-- session, cortex.embeddings.kind = 'context'), fuses normalised scores instead of ranks, adds
-- the session neighbours of the best notes and smooths each note's relevance with its
-- neighbours'; and it reads models above 2,000 dimensions through their halfvec index (see
-- register_embedding_model/v2.sql). v4 changed how candidates are found:
--   * BM25 statistics (N, average length, df) are read from cortex.bm25_corpus and
--     cortex.bm25_terms (kept exact by triggers, see bm25_index/v1.sql), never recounted;
--   * full-text candidates come from cortex.bm25_postings: for each query term, its best
--     `pool` postings by impact (all of them when df <= pool), so a common word costs at most
--     `pool` index entries; since v8 the notes found are cut to the `pool` best by
--     sum(idf * impact), so a query of many terms scores pool notes, not pool per term (a
--     10-term query on a 2,000-note tenant: 101 candidates -> 36; LoCoMo dev R@5 / R@10
--     67.4 / 77.2 -> 67.3 / 77.3); every candidate (full-text or vector) is then scored exactly;
--   * the pool scales with the limit: pool = max(2 * limit, 20) per ranker since v6 (v4, v5:
--     max(2 * limit, 40); on LoCoMo dev R@5/10/25/50 moved by at most 0.1 and the candidates
--     to score halved), so any limit <= 10 ranks the same top; hnsw.ef_search = pool (v9:
--     at least 40);
--   * the candidate statement is written once (cortex.search_statement, also callable on its
--     own to read or EXPLAIN it) from the model, its dimension, the compiled where_filter and
--     whether the entity list is asked for; the parts a search does not use are left out, so
--     planning stays short. (v4-v7 planned the whole search on every call: a generic plan of
--     it was several times slower, chiefly its vector scan; v8 plans only the candidates per
--     call, see above.)
--
-- Candidates (each ranker returns up to pool rows):
--   vector : cosine distance, LTM from the model's partial HNSW index on cortex.embeddings
--            (pgvector iterative index scan over pool rows of kind 'text' (v6; v5 read 2 * pool
--            rows of both kinds), so tenant/session/date/filter conditions still fill the pool;
--            the pool best notes by their best text window; the context embedding scores the
--            candidates but finds none: recall@k on LoCoMo dev is the same either way),
--            STM by exact scan of the (small) UNLOGGED cortex.stm_notes;
--   text   : Okapi BM25 over the query's lexemes (to_tsvector('english'), at most 64),
--            k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (Robertson/Lucene),
--            N, df and average document length over the tenant's current long-term notes,
--            document length = number of distinct lexemes; STM notes are scored with the
--            same statistics.
-- Entity:  as v3 (p_query_entities, p_entity_weight, p_expand_entities).
-- Signals of every candidate (full-text, vector, STM or entity): v = (1 - c) * w * cos(q, text)
--            + c * cos(q, context), c = context_weight (0.5), cos(q, text) standing in for a
--            missing context, with w = least(1, sqrt(dl / d0)), d0 = length_prior (24) since v7
--            (dl: the note's distinct lexemes; 1 before) (semantic_score); s = BM25, 0 without a
--            query term (text_score).
-- Fusion: rel = (w_v * minmax(v) + w_t * s / max(s) + w_e * entity coverage) / (weights of
--            the signals present), w_v = vector_weight (0.5), w_t = 1 - w_v (a search with one
--            signal weighs it alone when its weight is 0); with fusion "rrf", minmax(v) and
--            s / max(s) are replaced by (k + 1) / (k + rank), k = rrf_k (60), rank among the
--            candidates (BM25: among those with s > 0); min and max over the candidates; when all candidates have
--            the same v, minmax is 1; s / max(s) is 0 when no candidate matched a term (v7: BM25
--            has a natural zero, no term matched, so it is scaled by its maximum; v6's min-max
--            made the better of two candidates 1 and the other 0 however close they were);
--            w_e = p_entity_weight * the query entities' specificity (as v3).
-- Expansion: the session neighbours (previous and next current note by (created_at, seq)) of
--            the `expansion` (5) best candidates by rel join, scored with the candidates' min
--            and max.
-- Smoothing: r = minmax(rel) over the expanded candidates (rel itself when they all have the
--            same rel, e.g. a single candidate); relevance = (r + max(a * r_prev, b * r_next))
--            / (1 + max(a, b)) in [0, 1], a = smoothing_prev, b = smoothing_next (0.3 each; v7:
--            0.3 * max(r_prev, r_next) / 1.3), a neighbour counting only when it is a candidate.
--            (Normalised-score fusion, context embeddings and neighbour smoothing were chosen
--            on LoCoMo dev conversations; the constants sit on flat parts of their curves:
--            fusion weight 0.4-0.6, smoothing share 0.2-0.4, expansion of the top 2-20.)
-- Recency: exp(-age_days / 7) with age measured from p_now (Prem Cortex temporal weighting),
--            future notes count as age 0.
-- Score:  (1 - p_temporal_weight) * relevance + p_temporal_weight * recency; with
--            p_context_embedding, 0.3 * score + 0.7 * cosine(context, note) (both tiers).
-- Window: p_date_from <= created_at < p_date_to (either bound may be NULL).
-- Filter: p_filter (jsonb where_filter, cortex.compile_filter) restricts candidates of both
--            tiers alike; it does not change the BM25 statistics.
-- Tiers:  p_memory_source 'all' | 'ltm' | 'stm'; with 'all' a note present in both tiers is
--            returned once, as its STM copy (memory_tier = 'stm').
-- Errors: SQLSTATE 22023 for a bad argument (limit <= 0, weight outside [0, 1], unknown
--            source, unknown model, no query at all).
-- Results are ordered best first (score desc, then id).

-- cortex.search_statement(p_model, p_dim, p_filter_n, p_filter_s, p_entities) -> text: the
-- candidate statement (step 1), for a model (its name and dimension fill the HNSW index
-- expression), a compiled where_filter over notes (alias n) and STM (alias s) ('true' for
-- none), and with or without the entity list (p_entities). It returns one row of arrays in
-- candidate order: ids, entity coverage, entity rank, whether each is a current long-term
-- note, its previous note, whether that passes the search's conditions, its next note, the
-- same, and the entity list's weight w_e. The parts a search cannot use are left out, for a
-- shorter planning: the vector scans when p_vector is false (no query embedding), the
-- full-text ones when p_text is false (no query term), the tier p_tiers ('all' | 'ltm' |
-- 'stm') does not search, the neighbour lookups when p_neighbours is false. Its
-- parameters, in order: $1 user_id, $2 query embedding, $3 tsquery of the query terms,
-- $4 limit, $5 temporal weight, $6 date_from, $7 date_to, $8 now, $9 session_id,
-- $10 memory_source, $11 pool, $12 query lexemes, $13 number of rankers, $14 context
-- embedding, $15 query entities, $16 entity weight, $17 expand entities, $18 N, $19 avgdl
-- (the same as v7's, some unused here so that they keep their numbers), $20 whether to look
-- the neighbours up (smoothing or expansion asked for). p_scan (v9) says how the vector
-- candidates are found: 'planned' (the default: notes joined, ordered by the index's
-- expression, the planner chooses the scan for the call's values), 'index' or 'exact' (for a
-- prepared statement run on a generic plan, made without knowing the tenant: a candidate's
-- note is looked up by id, one by one; 'index' orders by the index's expression, 'exact' by
-- the stored vectors' own distance, which no index can give, so the tenant is read exactly).
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
    v_stm_txt text := format($q$
            SELECT s.id FROM cortex.stm_notes s
            WHERE s.user_id = $1 AND ($9::text IS NULL OR s.session_id = $9) AND $10 IN ('all', 'stm')
              AND s.tsv @@ $3
              AND ($6::timestamptz IS NULL OR s.created_at >= $6)
              AND ($7::timestamptz IS NULL OR s.created_at < $7)
              AND %1$s$q$, p_filter_s);
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

-- cortex.search_signals(...) -> (id, v, s): the two signals of a set of notes (search_notes'
-- candidates): v = (1 - c) * w * cos(q, text) + c * cos(q, context), c = p_context_weight, with
-- the text's best window, the text's cosine standing in for a missing context embedding (an
-- STM-only note: its STM copy's embedding for both), w = least(1, sqrt(dl / p_length_prior))
-- (1 when p_length_prior = 0 or without a query embedding), dl = the note's distinct lexemes
-- (from its postings, else its STM copy's tsvector, 0 for none); v is NULL without a query
-- embedding. s = Okapi BM25 of the note over p_terms (k1 = 1.2, b = 0.75, Lucene idf from
-- p_n and cortex.bm25_terms, average length p_avgdl; an STM-only note scored from its
-- tsvector with the same statistics), 0 without a matching term.
CREATE OR REPLACE FUNCTION cortex.search_signals(
    p_user_id text, p_ids uuid[], p_model text, p_query vector, p_terms text[], p_n float8,
    p_avgdl float8, p_memory_source text, p_context_weight float8, p_length_prior float8
) RETURNS TABLE (id uuid, v float8, s float8)
LANGUAGE sql STABLE AS $fn$
    WITH q_terms AS MATERIALIZED (
        SELECT q.lexeme, ln(1 + (p_n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) AS idf
        FROM unnest(p_terms) AS q(lexeme)
        LEFT JOIN cortex.bm25_terms t ON t.user_id = p_user_id AND t.lexeme = q.lexeme
    )
    SELECT x.id,
           CASE WHEN p_query IS NULL THEN NULL ELSE coalesce(
               (SELECT (1 - p_context_weight) * lp.w * (1 - min(e.embedding <=> p_query) FILTER (WHERE e.kind = 'text'))
                       + p_context_weight * (1 - coalesce(min(e.embedding <=> p_query) FILTER (WHERE e.kind = 'context'),
                                                          min(e.embedding <=> p_query) FILTER (WHERE e.kind = 'text')))
                FROM cortex.embeddings e
                WHERE e.user_id = p_user_id AND e.note_id = x.id AND e.model = p_model
                  AND p_memory_source IN ('all', 'ltm')),
               (SELECT ((1 - p_context_weight) * lp.w + p_context_weight) * (1 - (s.embedding <=> p_query))
                FROM cortex.stm_notes s
                WHERE s.user_id = p_user_id AND s.id = x.id AND s.model = p_model)) END::float8,
           coalesce((SELECT sum(q.idf * h.tf * (1.2 + 1) / (h.tf + 1.2 * (1 - 0.75 + 0.75 * h.dl / p_avgdl)))
                     FROM (SELECT p.lexeme, p.tf::float8 AS tf, p.dl::float8 AS dl
                           FROM cortex.bm25_postings p
                           WHERE p.user_id = p_user_id AND p.note_id = x.id AND p.lexeme = ANY (p_terms)
                             AND p_memory_source IN ('all', 'ltm')
                           UNION ALL
                           SELECT t.lexeme, coalesce(cardinality(t.positions), 1)::float8, length(s.tsv)::float8
                           FROM cortex.stm_notes s, unnest(s.tsv) AS t
                           WHERE s.user_id = p_user_id AND s.id = x.id AND p_memory_source IN ('all', 'stm')
                             AND t.lexeme = ANY (p_terms)
                             AND NOT EXISTS (SELECT 1 FROM cortex.bm25_postings p2
                                             WHERE p2.user_id = p_user_id AND p2.note_id = x.id
                                               AND p_memory_source IN ('all', 'ltm'))) h
                     JOIN q_terms q ON q.lexeme = h.lexeme), 0)::float8
    FROM unnest(p_ids) AS x(id)
    CROSS JOIN LATERAL (
        SELECT CASE WHEN p_query IS NULL OR p_length_prior <= 0 THEN 1 ELSE least(1, sqrt(coalesce(
            (SELECT p.dl FROM cortex.bm25_postings p
             WHERE p.user_id = p_user_id AND p.note_id = x.id AND p_memory_source IN ('all', 'ltm') LIMIT 1),
            (SELECT length(s.tsv) FROM cortex.stm_notes s WHERE s.user_id = p_user_id AND s.id = x.id),
            0)::float8 / p_length_prior)) END AS w) lp
$fn$;

-- cortex.tenant_partition_share(p_user_id) -> float8: the tenant's share of the rows of its
-- partition of cortex.embeddings, estimated as 2 * its current long-term notes (a text and a
-- context embedding each, cortex.bm25_corpus) / the partition's rows at its last ANALYZE
-- (pg_class.reltuples; autovacuum refreshes it once a tenth of the rows changed); above 1
-- when the tenant grew since. The partition
-- is found the way PostgreSQL routes a row (satisfies_hash_partition over the 32 remainders of
-- Alembic 0013, partitions cortex_partitions.embeddings_p00 .. p31), without reading the table
-- (a lookup through the partitioned table took 2.7 ms, this one 13 us; read from the catalog
-- by name, which needs no privilege on the partitions' schema, so the RLS role may call it;
-- under RLS it sees its own tenant's count only).
-- NULL for a tenant without notes, a partition not analyzed since it held rows (relpages 0),
-- or another layout (e.g. a distributed table). search_notes v9 uses it to tell
-- a tenant whose partition it mostly fills (HNSW scan) from one that shares it with larger ones.
CREATE OR REPLACE FUNCTION cortex.tenant_partition_share(p_user_id text) RETURNS float8
LANGUAGE sql STABLE AS $fn$
    SELECT CASE WHEN r.relpages > 0 AND r.reltuples > 0 THEN 2.0 * c.doc_count / r.reltuples END
    FROM cortex.bm25_corpus c
    CROSS JOIN LATERAL (SELECT g FROM generate_series(0, 31) g
                        WHERE satisfies_hash_partition('cortex.embeddings'::regclass, 32, g, p_user_id)
                        LIMIT 1) p
    JOIN pg_namespace s ON s.nspname = 'cortex_partitions'
    JOIN pg_class r ON r.relnamespace = s.oid AND r.relname = format('embeddings_p%s', lpad(p.g::text, 2, '0'))
    WHERE c.user_id = p_user_id
$fn$;

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
            IF v_key NOT IN ('vector_weight', 'context_weight', 'length_prior', 'smoothing_prev',
                             'smoothing_next', 'expansion', 'rrf_k') THEN
                RAISE EXCEPTION 'p_ranking has an unknown key %', v_key USING ERRCODE = '22023';
            END IF;
            -- compared as numeric (exact, any size), then read through numeric rounded to 12
            -- places, so no value that passes overflows or underflows a float8
            IF jsonb_typeof(p_ranking->v_key) <> 'number'
               OR (v_key IN ('vector_weight', 'context_weight', 'smoothing_prev', 'smoothing_next')
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
    END IF;

    v_pool := least(greatest(p_limit::bigint * 2, 20), 1000);

    SELECT coalesce(array_agg(x.lexeme), '{}') INTO v_terms
    FROM (SELECT t.lexeme
          FROM unnest(to_tsvector('english', left(coalesce(p_query_text, ''), 100000))) AS t
          WHERE t.lexeme !~ '[\\'']'
          ORDER BY t.positions[1]
          LIMIT 64) x;
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

    IF p_query_embedding IS NOT NULL THEN
        v_rankers := v_rankers + 1;
        -- per transaction (SET LOCAL semantics), so the setting reaches every shard
        -- at least pgvector's default of 40 (v9; v6-v8: the pool, 20 for limit 10, with which the
        -- scan found 59 % of the exact 20 nearest notes of a 17,511-note tenant, 69 % at 40)
        PERFORM set_config('hnsw.ef_search', greatest(v_pool, 40)::text, true);
        IF current_setting('hnsw.iterative_scan', true) IS NOT NULL THEN
            PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        END IF;
    END IF;

    -- a search without a session, window or filter (the usual one): its candidate statement is
    -- prepared once per session and run on a generic plan (v9, see the header); a large
    -- tenant's vector candidates then come from its HNSW index, which enable_sort off leaves
    -- as the only ordered path
    v_filter_n := cortex.compile_filter(p_filter, 'n');
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
    v_neighbours := v_smoothing_prev > 0 OR v_smoothing_next > 0 OR v_expansion > 0;
    v_statement := cortex.search_statement(
        coalesce(v_model, ''), coalesce(v_dim, 1), v_filter_n, cortex.compile_filter(p_filter, 's'),
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
    -- the long-term candidates with their session neighbours (found in step 1)
    ordered AS MATERIALIZED (
        SELECT pr.id, pr.rel, p.prev_id, p.prev_ok, p.next_id, p.next_ok
        FROM pool_rel pr JOIN pool p ON p.id = pr.id
        WHERE p.in_ltm
    ),
    -- expansion: the session neighbours of the `expansion` best notes join the candidates (the
    -- evidence is often the turn next to the best match) when they pass the search's
    -- conditions, scored with the candidates' bounds
    expansion AS MATERIALIZED (
        SELECT DISTINCT nb.id
        FROM (SELECT o.* FROM ordered o ORDER BY o.rel DESC, o.id LIMIT v_expansion) t
        CROSS JOIN LATERAL (VALUES (t.prev_id, t.prev_ok), (t.next_id, t.next_ok)) nb(id, ok)
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
    fused AS (
        SELECT sm.id, sm.relevance, sm.s AS ts, sm.v, sm.ecov, sm.er,
               CASE WHEN sm.v IS NULL THEN NULL
                    ELSE row_number() OVER (ORDER BY sm.v DESC NULLS LAST, sm.id) END::int AS vr,
               CASE WHEN sm.s > 0 THEN row_number() OVER (ORDER BY sm.s DESC, sm.id) END::int AS tr
        FROM smoothed sm
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
                                AND e.kind = 'text') END AS ctx
        FROM fused f
        LEFT JOIN LATERAL (
            SELECT s.id, s.created_at, s.model, s.embedding FROM cortex.stm_notes s
            WHERE s.user_id = p_user_id AND s.id = f.id AND p_memory_source IN ('all', 'stm') LIMIT 1) s ON true
        LEFT JOIN LATERAL (
            SELECT n.id, n.created_at FROM cortex.notes n
            WHERE n.user_id = p_user_id AND n.id = f.id AND p_memory_source IN ('all', 'ltm')
              AND n.merged_into IS NULL LIMIT 1) n ON true
        WHERE s.id IS NOT NULL OR n.id IS NOT NULL
    ),
    scored AS (
        SELECT p.*, (1 - p_temporal_weight) * p.relevance + p_temporal_weight * p.recency AS blended
        FROM (SELECT p0.*,
                     exp(-greatest(extract(epoch FROM (p_now - p0.created_at)), 0) / 86400.0 / 7.0)::float8
                         AS recency
              FROM placed p0) p
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
           t.final, t.relevance, t.v, 1 - t.v, coalesce(t.ts, 0)::float8, t.recency, t.vr, t.tr,
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
