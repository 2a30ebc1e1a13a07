-- The speakers of a tenant's notes (version 1), kept in the note's transaction.
--
--   cortex.speaker_counts (user_id, words)  note_count: current long-term notes whose speaker
--                                           reads as words
--
-- A note's speaker is its metadata's "speaker" when that is a JSON string of at most 200
-- characters (what the conversation ingest writes for each turn); cortex.speaker_words reads
-- it as search_notes v13 does: lower case, runs of characters that are not letters or digits
-- (as the database's LC_CTYPE classifies them) as one space, trimmed ("Mary-Ann" -> "mary ann").
-- A speaker with no letter or digit has no words and is not counted.
--
-- search_notes v14 reads the table to find the speakers a query names among all of the
-- tenant's, before it picks the query's full-text terms (a handful of rows, not a scan of
-- the notes). Triggers on cortex.notes keep it exact whatever writes the notes (the store,
-- the evolution worker, plain SQL), as collections/v1.sql keeps category_counts: the notes
-- counted are the current long-term ones (merged_into IS NULL); the counter rows of one
-- statement are written in (user_id, words) order, so concurrent statements of one tenant
-- queue instead of deadlocking (two transactions that each change speakers over several
-- statements, in crossed order, can still deadlock, SQLSTATE 40P01, which the store retries);
-- a row that drops to 0 is deleted.

CREATE OR REPLACE FUNCTION cortex.speaker_words(p_metadata jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- (one expression, so that a query calling it inlines it)
    SELECT CASE WHEN jsonb_typeof(p_metadata->'speaker') = 'string' AND length(p_metadata->>'speaker') <= 200
                THEN nullif(btrim(regexp_replace(lower(p_metadata->>'speaker'), '[^[:alnum:]]+', ' ', 'g')), '')
           END
$$;

-- Add p_deltas[i] (1 or -1) notes of speaker words p_words[i] to user p_users[i]'s counts
-- (parallel arrays; NULL words are skipped), in one statement whose rows are written in
-- (user_id, words) order, so that two writers lock the rows they share in the same order.
CREATE OR REPLACE FUNCTION cortex.speaker_count_apply(p_users text[], p_words text[], p_deltas int[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    touched_users text[];
    touched_words text[];
BEGIN
    WITH d AS (
        SELECT r.user_id, r.words, sum(r.delta)::int AS delta
        FROM unnest(p_users, p_words, p_deltas) AS r(user_id, words, delta)
        WHERE r.words IS NOT NULL
        GROUP BY r.user_id, r.words
        HAVING sum(r.delta) <> 0
    ), up AS (
        INSERT INTO cortex.speaker_counts AS c (user_id, words, note_count)
        SELECT d.user_id, d.words, d.delta FROM d ORDER BY d.user_id, d.words
        ON CONFLICT (user_id, words) DO UPDATE
            SET note_count = c.note_count + EXCLUDED.note_count, updated_at = now()
        RETURNING c.user_id, c.words
    )
    SELECT array_agg(user_id), array_agg(words) INTO touched_users, touched_words FROM up;
    IF touched_users IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM cortex.speaker_counts c
    USING unnest(touched_users, touched_words) AS t(user_id, words)
    WHERE c.user_id = t.user_id AND c.words = t.words AND c.note_count <= 0;
END $$;

CREATE OR REPLACE FUNCTION cortex.speaker_counts_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.speaker_count_apply(array_agg(a.user_id), array_agg(cortex.speaker_words(a.metadata)),
                                       array_agg(1))
    FROM added a WHERE a.merged_into IS NULL AND a.metadata ? 'speaker';
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.speaker_counts_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.speaker_count_apply(array_agg(r.user_id), array_agg(cortex.speaker_words(r.metadata)),
                                       array_agg(-1))
    FROM removed r WHERE r.merged_into IS NULL AND r.metadata ? 'speaker';
    RETURN NULL;
END $$;

-- (a row's old speaker leaves and its new one comes in one call: two updates that swap two
-- speakers at once lock their rows in the same order)
CREATE OR REPLACE FUNCTION cortex.speaker_counts_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.speaker_count_apply(
        ARRAY[OLD.user_id, NEW.user_id],
        ARRAY[CASE WHEN OLD.merged_into IS NULL THEN cortex.speaker_words(OLD.metadata) END,
              CASE WHEN NEW.merged_into IS NULL THEN cortex.speaker_words(NEW.metadata) END],
        ARRAY[-1, 1]);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.speaker_counts_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cortex.speaker_counts;
    RETURN NULL;
END $$;

CREATE TRIGGER speaker_counts_insert AFTER INSERT ON cortex.notes
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION cortex.speaker_counts_on_insert();
CREATE TRIGGER speaker_counts_delete AFTER DELETE ON cortex.notes
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION cortex.speaker_counts_on_delete();
CREATE TRIGGER speaker_counts_update AFTER UPDATE ON cortex.notes
    FOR EACH ROW WHEN (OLD.metadata->'speaker' IS DISTINCT FROM NEW.metadata->'speaker'
                       OR (OLD.merged_into IS NULL) <> (NEW.merged_into IS NULL)
                       OR OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION cortex.speaker_counts_on_update();
CREATE TRIGGER speaker_counts_truncate AFTER TRUNCATE ON cortex.notes
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.speaker_counts_on_truncate();
