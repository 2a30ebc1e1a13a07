-- cortex.linked_notes (v2): the notes reachable from one note along cortex.note_links, walked
-- one hop at a time, so its cost grows with the number of links within p_depth hops, never
-- with the number of paths.
--
--   SELECT * FROM cortex.linked_notes('alice', '6f1c...'::uuid, 2, 0.5);
--
-- Walk:   outgoing links only (every link has its reciprocal, so this reaches the same
--         neighbourhood as an undirected walk), up to p_depth hops (>= 1).
-- Score:  path_strength = product of the link strengths along the path, in [0, 1]; paths
--         whose product falls below p_min_strength are cut (to within 1e-6: strengths are
--         stored as real, so 0.7 x 0.7 comes to 0.48999998 and still passes a floor of 0.49).
-- Result: one row per reachable current note (merged notes are skipped, not walked through;
--         the start note is never returned): its shortest path (fewest hops) among the paths
--         that stay at or above p_min_strength, the strongest among equally short ones (ties:
--         the smaller via_id), with the last link on that path (via_id -> id: type, strength,
--         reason) and the path itself (start .. id). Ordered by hops, then path_strength
--         descending, then id. The same rows as v1 (ties aside).
-- Errors: SQLSTATE 22023 when p_depth < 1 or p_min_strength outside [0, 1].
--
-- How: hop h keeps, for each note, the strongest walk of h links to it (one row per note,
-- extended from the walks of hop h - 1). A note first reached at hop h gets that walk: a
-- shortest walk never repeats a note (a repeat would leave a shorter one, at least as
-- strong, since strengths are at most 1), so it is the shortest path, and the strongest of
-- them. Walks worth extending at the next hop: those to notes first reached at this hop,
-- and, when p_min_strength > 0, those stronger than every earlier walk to their note (a
-- longer but stronger walk can reach past the floor where the short one was cut; a weaker
-- one reaches nothing the earlier walk did not reach sooner). v1 enumerated every simple path
-- up to p_depth hops in a recursive CTE: 8 s for 10 notes all linked to each other at depth
-- 10, and 66 s for 200 notes with 4 links each at depth 8 (not finished at 9).

CREATE TYPE cortex.link_walk AS (
    id uuid,
    hops int,
    path_strength double precision,
    via_id uuid,
    link_type text,
    link_strength real,
    link_reason text,
    path uuid[]
);

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
DECLARE
    v_front cortex.link_walk[];           -- the walks extended at this hop
    v_level cortex.link_walk[];           -- the strongest walk of this many hops to each note
    v_found cortex.link_walk[] := '{}';   -- the first (shortest) walk to each note
    v_best jsonb := '{}';                 -- note id -> its strongest walk so far, any length
    h int;
BEGIN
    IF p_depth IS NULL OR p_depth < 1 THEN
        RAISE EXCEPTION 'p_depth must be >= 1, got %', p_depth USING ERRCODE = '22023';
    END IF;
    IF p_min_strength IS NULL OR p_min_strength < 0 OR p_min_strength > 1 THEN
        RAISE EXCEPTION 'p_min_strength must be in [0, 1], got %', p_min_strength USING ERRCODE = '22023';
    END IF;
    v_front := ARRAY[ROW(p_note_id, 0, 1.0, NULL, NULL, NULL, NULL, ARRAY[p_note_id])::cortex.link_walk];
    FOR h IN 1 .. p_depth LOOP
        SELECT coalesce(array_agg(q.w), '{}') INTO v_level
        FROM (SELECT DISTINCT ON (l.target_id)
                     ROW(l.target_id, h, f.path_strength * l.strength, l.source_id, l.type, l.strength, l.reason,
                         f.path || l.target_id)::cortex.link_walk AS w
              FROM unnest(v_front) f
              JOIN cortex.note_links l ON l.user_id = p_user_id AND l.source_id = f.id
              JOIN cortex.notes n ON n.user_id = l.user_id AND n.id = l.target_id AND n.merged_into IS NULL
              WHERE l.target_id <> p_note_id AND f.path_strength * l.strength >= p_min_strength - 1e-6
              ORDER BY l.target_id, f.path_strength * l.strength DESC, l.source_id) q;
        EXIT WHEN cardinality(v_level) = 0;
        SELECT v_found || coalesce(array_agg(x) FILTER (WHERE b.value IS NULL), '{}'),
               coalesce(array_agg(x) FILTER (WHERE b.value IS NULL
                                                 OR (p_min_strength > 0 AND x.path_strength > b.value::float8)), '{}'),
               v_best || coalesce(jsonb_object_agg(x.id, greatest(x.path_strength, coalesce(b.value::float8, 0))), '{}')
        INTO v_found, v_front, v_best
        FROM unnest(v_level) x
        LEFT JOIN jsonb_each_text(v_best) b ON b.key = x.id::text;
        EXIT WHEN cardinality(v_front) = 0;
    END LOOP;
    RETURN QUERY
    SELECT f.id, f.hops, f.path_strength, f.via_id, f.link_type, f.link_strength, f.link_reason, f.path
    FROM unnest(v_found) f
    ORDER BY f.hops, f.path_strength DESC, f.id;
END $fn$;
