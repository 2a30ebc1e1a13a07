-- cortex.linked_notes: the notes reachable from one note along cortex.note_links, in one
-- recursive CTE.
--
--   SELECT * FROM cortex.linked_notes('alice', '6f1c...'::uuid, 2, 0.5);
--
-- Walk:   outgoing links only (every link has its reciprocal, so this reaches the same
--         neighbourhood as an undirected walk), up to p_depth hops (>= 1).
-- Cycles: a path never revisits a note (the visited ids travel in the path array), so a
--         cycle a -> b -> c -> a stops at c; the start note itself is never returned.
-- Score:  path_strength = product of the link strengths along the path, in [0, 1]; paths
--         whose product falls below p_min_strength are cut (the product never grows, so
--         cutting early loses nothing).
-- Result: one row per reachable current note (merged notes are skipped, not walked through):
--         its shortest path (fewest hops), the strongest among equally short ones, with the
--         last link on that path (via_id -> id: type, strength, reason) and the path itself
--         (start .. id). Ordered by hops, then path_strength descending, then id.
-- Errors: SQLSTATE 22023 when p_depth < 1 or p_min_strength outside [0, 1].

CREATE OR REPLACE FUNCTION cortex.linked_notes(
    p_user_id text,
    p_note_id uuid,
    p_depth int DEFAULT 2,
    p_min_strength real DEFAULT 0
) RETURNS TABLE (
    id uuid,
    hops int,
    path_strength double precision,
    via_id uuid,
    link_type text,
    link_strength real,
    link_reason text,
    path uuid[]
)
LANGUAGE plpgsql STABLE AS $fn$
#variable_conflict use_column
BEGIN
    IF p_depth IS NULL OR p_depth < 1 THEN
        RAISE EXCEPTION 'p_depth must be >= 1, got %', p_depth USING ERRCODE = '22023';
    END IF;
    IF p_min_strength IS NULL OR p_min_strength < 0 OR p_min_strength > 1 THEN
        RAISE EXCEPTION 'p_min_strength must be in [0, 1], got %', p_min_strength USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH RECURSIVE walk (id, hops, path_strength, via_id, link_type, link_strength, link_reason, path) AS (
        SELECT l.target_id, 1, l.strength::float8, l.source_id, l.type, l.strength, l.reason,
               ARRAY[p_note_id, l.target_id]
        FROM cortex.note_links l
        JOIN cortex.notes n ON n.user_id = l.user_id AND n.id = l.target_id AND n.merged_into IS NULL
        WHERE l.user_id = p_user_id AND l.source_id = p_note_id AND l.strength >= p_min_strength
      UNION ALL
        SELECT l.target_id, w.hops + 1, w.path_strength * l.strength, l.source_id, l.type, l.strength,
               l.reason, w.path || l.target_id
        FROM walk w
        JOIN cortex.note_links l ON l.user_id = p_user_id AND l.source_id = w.id
        JOIN cortex.notes n ON n.user_id = l.user_id AND n.id = l.target_id AND n.merged_into IS NULL
        WHERE w.hops < p_depth
          AND l.target_id <> ALL (w.path)
          AND w.path_strength * l.strength >= p_min_strength
    )
    SELECT b.id, b.hops, b.path_strength, b.via_id, b.link_type, b.link_strength, b.link_reason, b.path
    FROM (
        SELECT DISTINCT ON (w.id) w.*
        FROM walk w
        ORDER BY w.id, w.hops, w.path_strength DESC
    ) b
    ORDER BY b.hops, b.path_strength DESC, b.id;
END $fn$;
