-- cortex.note_tsvector(content): the full-text vector of a note (the generated column tsv of
-- cortex.notes and cortex.stm_notes).
--
-- PostgreSQL refuses a tsvector over 1 MB (1,048,575 bytes; SQLSTATE 54000). English prose
-- of the largest allowed note (500,000 characters) stays far below that, but text in other
-- scripts takes 2-4 bytes per character and can exceed it. The rule, deterministic (the
-- function is IMMUTABLE, as a generated column requires):
--   * content of at most 200,000 bytes: to_tsvector('english', content) of the whole text
--     (a tsvector takes at most about 5 bytes per byte of text, so it always fits);
--   * longer content: the whole text when its tsvector fits; otherwise the longest of the
--     prefixes of 3/4, (3/4)^2, ... of its characters whose tsvector fits. A prefix is cut by
--     characters (left(content, n)), so it never splits a character; a word cut in two at the
--     end is indexed as its first half.
-- The note itself is stored whole; only full-text matching (and BM25) is limited to the
-- indexed prefix. Embeddings have their own window (the embedder's).
CREATE OR REPLACE FUNCTION cortex.note_tsvector(p_content text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    n int := char_length(p_content);
BEGIN
    IF octet_length(p_content) <= 200000 THEN
        RETURN to_tsvector('english'::regconfig, p_content);
    END IF;
    LOOP
        BEGIN
            RETURN to_tsvector('english'::regconfig, left(p_content, n));
        EXCEPTION WHEN program_limit_exceeded THEN
            n := (n * 3) / 4;
        END;
    END LOOP;
END $$;
