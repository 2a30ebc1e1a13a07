-- BM25 statistics kept incrementally, so a search reads a handful of rows instead of the
-- tenant's whole corpus (Okapi BM25: Robertson & Zaragoza 2009, "The Probabilistic Relevance
-- Framework: BM25 and Beyond").
--
--   cortex.bm25_corpus   (user_id)                   doc_count N, total_length (sum of dl)
--   cortex.bm25_terms    (user_id, lexeme)           df: current notes containing the lexeme
--   cortex.bm25_postings (user_id, note_id, lexeme)  tf, dl, impact: an inverted index
--
-- The corpus of a tenant is its current long-term notes (cortex.notes rows with
-- merged_into IS NULL). dl = number of distinct lexemes of the note's tsvector (length(tsv));
-- tf = number of positions of the lexeme (1 when the tsvector has none).
-- impact = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), k1 = 1.2, b = 0.75, with the
-- tenant's avgdl when the posting is written: it orders a term's postings for candidate
-- generation only (best first); scores are always computed from tf, dl and the current
-- statistics.
--
-- Triggers on cortex.notes keep the three tables exact in the writing transaction, whatever
-- writes the notes (the store, the evolution worker, plain SQL):
--   AFTER INSERT (per statement, transition table): postings, df and N/total of new rows;
--   AFTER DELETE (per statement): postings deleted, df and N/total decremented;
--   AFTER UPDATE (per row, only when tsv or merged_into changed): old contribution out, new in;
--   AFTER TRUNCATE: statistics emptied.
-- Counter rows are written in (user_id, lexeme) order, so concurrent writers of one tenant
-- queue on the rows they share instead of deadlocking.

CREATE OR REPLACE FUNCTION cortex.bm25_impact(p_tf int, p_dl int, p_avgdl float8) RETURNS real
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (p_tf * 2.2 / (p_tf + 1.2 * (0.25 + 0.75 * p_dl / greatest(p_avgdl, 1))))::real
$$;

-- Add (p_sign = 1) or remove (p_sign = -1) the statistics of the notes given as parallel
-- arrays (user ids, note ids, tsvectors); postings are written on add and deleted on remove.
CREATE OR REPLACE FUNCTION cortex.bm25_apply(p_users text[], p_ids uuid[], p_tsvs tsvector[], p_sign int)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO cortex.bm25_corpus AS c (user_id, doc_count, total_length)
    SELECT r.user_id, p_sign * count(*), p_sign * coalesce(sum(length(r.tsv)), 0)
    FROM unnest(p_users, p_ids, p_tsvs) AS r(user_id, id, tsv)
    GROUP BY r.user_id ORDER BY r.user_id
    ON CONFLICT (user_id) DO UPDATE
        SET doc_count = c.doc_count + EXCLUDED.doc_count,
            total_length = c.total_length + EXCLUDED.total_length;

    INSERT INTO cortex.bm25_terms AS bt (user_id, lexeme, df)
    SELECT r.user_id, t.lexeme, p_sign * count(*)
    FROM unnest(p_users, p_ids, p_tsvs) AS r(user_id, id, tsv), LATERAL unnest(r.tsv) AS t
    GROUP BY r.user_id, t.lexeme ORDER BY r.user_id, t.lexeme
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = bt.df + EXCLUDED.df;

    IF p_sign > 0 THEN
        INSERT INTO cortex.bm25_postings (user_id, note_id, lexeme, tf, dl, impact)
        SELECT r.user_id, r.id, t.lexeme, coalesce(cardinality(t.positions), 1), length(r.tsv),
               cortex.bm25_impact(coalesce(cardinality(t.positions), 1), length(r.tsv),
                                  c.total_length::float8 / greatest(c.doc_count, 1))
        FROM unnest(p_users, p_ids, p_tsvs) AS r(user_id, id, tsv)
        JOIN cortex.bm25_corpus c ON c.user_id = r.user_id,
             LATERAL unnest(r.tsv) AS t
        ON CONFLICT (user_id, note_id, lexeme) DO UPDATE
            SET tf = EXCLUDED.tf, dl = EXCLUDED.dl, impact = EXCLUDED.impact;
    ELSE
        DELETE FROM cortex.bm25_postings p
        USING unnest(p_users, p_ids) AS r(user_id, id)
        WHERE p.user_id = r.user_id AND p.note_id = r.id;
        DELETE FROM cortex.bm25_terms bt
        USING (SELECT DISTINCT r.user_id, t.lexeme
               FROM unnest(p_users, p_tsvs) AS r(user_id, tsv), LATERAL unnest(r.tsv) AS t) d
        WHERE bt.user_id = d.user_id AND bt.lexeme = d.lexeme AND bt.df <= 0;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION cortex.bm25_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.bm25_apply(array_agg(a.user_id), array_agg(a.id), array_agg(a.tsv), 1)
    FROM added a WHERE a.merged_into IS NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.bm25_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.bm25_apply(array_agg(r.user_id), array_agg(r.id), array_agg(r.tsv), -1)
    FROM removed r WHERE r.merged_into IS NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.bm25_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.merged_into IS NULL THEN
        PERFORM cortex.bm25_apply(ARRAY[OLD.user_id], ARRAY[OLD.id], ARRAY[OLD.tsv], -1);
    END IF;
    IF NEW.merged_into IS NULL THEN
        PERFORM cortex.bm25_apply(ARRAY[NEW.user_id], ARRAY[NEW.id], ARRAY[NEW.tsv], 1);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.bm25_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE cortex.bm25_terms, cortex.bm25_corpus;
    RETURN NULL;
END $$;

CREATE TRIGGER bm25_insert AFTER INSERT ON cortex.notes
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION cortex.bm25_on_insert();
CREATE TRIGGER bm25_delete AFTER DELETE ON cortex.notes
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION cortex.bm25_on_delete();
CREATE TRIGGER bm25_update AFTER UPDATE ON cortex.notes
    FOR EACH ROW WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv
                       OR (OLD.merged_into IS NULL) <> (NEW.merged_into IS NULL)
                       OR OLD.user_id IS DISTINCT FROM NEW.user_id OR OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION cortex.bm25_on_update();
CREATE TRIGGER bm25_truncate AFTER TRUNCATE ON cortex.notes
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.bm25_on_truncate();
