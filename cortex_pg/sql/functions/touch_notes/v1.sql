-- cortex.touch_notes(p_user_id, p_ids, p_memory_source): count notes of one tenant as accessed
-- (access_count + 1, last_accessed_at = now()) in LTM, STM or both ('ltm', 'stm', 'all').
-- Returns the number of rows updated (a note in both tiers counts twice).
--
-- Every touching read (a search, get with touch, calute's shelf reads and long-term search,
-- a smart-collection search) goes through this function, so all of them lock rows in one
-- order: the LTM rows first, then the STM rows, each in id order. Two touches of overlapping
-- notes then wait for each other instead of deadlocking; before, an UPDATE ... FROM locked
-- its rows in the order of its join, and a search's two data-modifying CTEs ran STM first
-- while get ran LTM first.
CREATE OR REPLACE FUNCTION cortex.touch_notes(p_user_id text, p_ids uuid[], p_memory_source text DEFAULT 'all')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ltm_rows integer := 0;
    stm_rows integer := 0;
BEGIN
    IF p_memory_source IS NULL OR p_memory_source NOT IN ('ltm', 'stm', 'all') THEN
        RAISE EXCEPTION 'p_memory_source must be ltm, stm or all, got %', coalesce(p_memory_source, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_user_id IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    IF p_memory_source IN ('ltm', 'all') THEN
        UPDATE cortex.notes n SET access_count = n.access_count + 1, last_accessed_at = now()
        FROM (SELECT l.id FROM cortex.notes l
              WHERE l.user_id = p_user_id AND l.id = ANY (p_ids)
              ORDER BY l.id FOR NO KEY UPDATE) locked
        WHERE n.user_id = p_user_id AND n.id = locked.id;
        GET DIAGNOSTICS ltm_rows = ROW_COUNT;
    END IF;
    IF p_memory_source IN ('stm', 'all') THEN
        UPDATE cortex.stm_notes s SET access_count = s.access_count + 1, last_accessed_at = now()
        FROM (SELECT l.id FROM cortex.stm_notes l
              WHERE l.user_id = p_user_id AND l.id = ANY (p_ids)
              ORDER BY l.id FOR NO KEY UPDATE) locked
        WHERE s.user_id = p_user_id AND s.id = locked.id;
        GET DIAGNOSTICS stm_rows = ROW_COUNT;
    END IF;
    RETURN ltm_rows + stm_rows;
END $$;
