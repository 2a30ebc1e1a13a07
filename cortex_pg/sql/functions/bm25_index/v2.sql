-- cortex.bm25_apply v2: the postings of added notes are inserted, no longer upserted.
--
-- A note's postings exist exactly while the note is in the corpus: they are written when it
-- enters (insert, or an update that restores it or changes its text, after the old ones were
-- deleted) and deleted when it leaves (delete, merge, update), all by the triggers of
-- bm25_index v1, in the writing transaction. An added note therefore never has postings yet,
-- and v1's ON CONFLICT ... DO UPDATE only paid for a check that cannot fire: PostgreSQL's
-- speculative insertion (an arbiter-index probe and a token per row) doubled the statement's
-- time (18 against 30-46 ms for the 2,654 postings of 256 notes). A posting that did exist
-- would now raise a unique violation (pk_bm25_postings) instead of being overwritten in
-- silence.
--
-- cortex.bm25_on_truncate v2 empties the postings too: v1 emptied only the counters, so after
-- TRUNCATE cortex.notes the truncated notes' postings stayed (orphans, wrong for a search that
-- reads them, and a unique violation for a note added again with its id). The migration that
-- applies this file deletes the postings an earlier TRUNCATE left. (As with bm25_terms and
-- bm25_corpus under v1, a TRUNCATE of cortex.notes that also names bm25_postings is refused:
-- the trigger cannot truncate a table the statement holds open. Truncate cortex.notes alone.)
-- Everything else is v1's.

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
             LATERAL unnest(r.tsv) AS t;
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

CREATE OR REPLACE FUNCTION cortex.bm25_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE cortex.bm25_terms, cortex.bm25_corpus, cortex.bm25_postings;
    RETURN NULL;
END $$;
