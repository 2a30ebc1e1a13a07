-- cortex.related_entities (v2): the entities within p_max_depth hops of an entity, walked one
-- hop at a time, so its cost grows with the number of relationships within reach, never
-- with the number of paths.
--
--   SELECT * FROM cortex.related_entities('alice', 'Acme Corp', 2);
--   SELECT * FROM cortex.related_entities('alice', 'Acme Corp', 2, '2024-01-01');  -- as of
--
-- The start entity is looked up by cortex.normalize_entity_name(p_name). Edges are the
-- relationships valid at p_as_of (default: now), valid_from <= as_of < valid_to, followed in
-- either direction (source -> target and target -> source; parallel edges count once).
-- depth is the length of the shortest walk (1 = a direct neighbour); the start entity is
-- never returned. p_max_depth <= 0 (or an unknown name) returns no rows. Results are ordered
-- by depth, then name; the same rows as v1.
--
-- How: the recursive CTE keeps (entity, depth) pairs with UNION, which drops a pair already
-- produced, so hop d holds each entity reachable by a walk of d edges once (at most the
-- entities within reach), and an entity's depth is the least d. v1 followed every simple path
-- (a CYCLE clause): 40 s for 11 entities all related to each other at depth 8.

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
    UNION
    SELECT e.b, w.depth + 1
    FROM walk w
    JOIN edge e ON e.a = w.node
    WHERE w.depth < p_max_depth
)
SELECT ent.id, ent.name, ent.kind, min(w.depth)::int AS depth
FROM walk w
JOIN cortex.entities ent ON ent.user_id = p_user_id AND ent.id = w.node
WHERE w.node NOT IN (SELECT s.id FROM start s)
GROUP BY ent.id, ent.name, ent.kind
ORDER BY depth, ent.name
$$;
