-- cortex.related_entities: the entities within p_max_depth hops of an entity, in one
-- recursive CTE.
--
--   SELECT * FROM cortex.related_entities('alice', 'Acme Corp', 2);
--   SELECT * FROM cortex.related_entities('alice', 'Acme Corp', 2, '2024-01-01');  -- as of
--
-- The start entity is looked up by cortex.normalize_entity_name(p_name). Edges are the
-- relationships valid at p_as_of (default: now), valid_from <= as_of < valid_to, followed in
-- either direction (source -> target and target -> source; parallel edges count once).
-- Cycle detection: the SQL-standard CYCLE clause keeps the path of each walk and stops a
-- walk when it reaches an entity already on its path; the start entity is never returned.
-- depth is the length of the shortest walk found (1 = a direct neighbour). p_max_depth <= 0
-- (or an unknown name) returns no rows. The cost grows with the number of simple paths of
-- length <= p_max_depth, so keep p_max_depth small (the Python API allows at most 10).
-- Results are ordered by depth, then name.

CREATE OR REPLACE FUNCTION cortex.related_entities(
    p_user_id text,
    p_name text,
    p_max_depth int,
    p_as_of timestamptz DEFAULT NULL
) RETURNS TABLE (id bigint, name text, kind text, depth int)
LANGUAGE sql STABLE AS $$
WITH RECURSIVE
start AS (
    SELECT e.id
    FROM cortex.entities e
    WHERE e.user_id = p_user_id AND e.normalized_name = cortex.normalize_entity_name(p_name)
),
valid AS (
    SELECT r.source_id, r.target_id
    FROM cortex.relationships r
    WHERE r.user_id = p_user_id
      AND r.valid_from <= coalesce(p_as_of, now())
      AND (r.valid_to IS NULL OR r.valid_to > coalesce(p_as_of, now()))
),
edge AS (
    SELECT source_id AS a, target_id AS b FROM valid
    UNION
    SELECT target_id, source_id FROM valid
),
walk (node, depth) AS (
    SELECT s.id, 0 FROM start s
    UNION ALL
    SELECT e.b, w.depth + 1
    FROM walk w
    JOIN edge e ON e.a = w.node
    WHERE w.depth < p_max_depth
) CYCLE node SET is_cycle USING path
SELECT ent.id, ent.name, ent.kind, min(w.depth)::int AS depth
FROM walk w
JOIN cortex.entities ent ON ent.user_id = p_user_id AND ent.id = w.node
WHERE NOT w.is_cycle AND w.node NOT IN (SELECT s.id FROM start s)
GROUP BY ent.id, ent.name, ent.kind
ORDER BY depth, ent.name
$$;
