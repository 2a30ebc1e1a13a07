-- The plain-SQL interface of cortex-pg (besides cortex.search_notes, cortex.linked_notes and
-- cortex.related_entities): short-term memory by recency, and two views.
--
--   SELECT * FROM cortex.stm_recent('alice', 'chat-1', 5);
--   SELECT id, content FROM cortex.notes_current WHERE user_id = 'alice' ORDER BY created_at DESC;
--   SELECT * FROM cortex.entity_facts WHERE user_id = 'alice' AND source = 'Alice';

-- The n most recently used STM notes of a user's session (all sessions when p_session_id is
-- NULL), most recent first (last access, then insertion order). Does not count as an access.
CREATE OR REPLACE FUNCTION cortex.stm_recent(p_user_id text, p_session_id text DEFAULT NULL, p_n int DEFAULT 5)
RETURNS TABLE (
    id uuid, user_id text, session_id text, content text, keywords text[], tags text[], context text,
    category text, memory_type text, metadata jsonb, importance real, created_at timestamptz,
    last_accessed_at timestamptz, access_count int
)
LANGUAGE sql STABLE AS $$
    SELECT s.id, s.user_id, s.session_id, s.content, s.keywords, s.tags, s.context, s.category,
           s.memory_type, s.metadata, s.importance, s.created_at, s.last_accessed_at, s.access_count
    FROM cortex.stm_notes s
    WHERE s.user_id = p_user_id AND (p_session_id IS NULL OR s.session_id = p_session_id)
    ORDER BY s.last_accessed_at DESC, s.seq DESC
    LIMIT greatest(p_n, 0)
$$;

-- The views run with the caller's rights (security_invoker), so Row-Level Security applies
-- through them exactly as on the tables.

-- Long-term notes that are current: not merged into another note (deleted notes are gone
-- from cortex.notes; their last state is in cortex.note_history).
CREATE OR REPLACE VIEW cortex.notes_current WITH (security_invoker = true) AS
SELECT n.id, n.user_id, n.session_id, n.content, n.keywords, n.tags, n.context, n.category,
       n.memory_type, n.metadata, n.importance, n.created_at, n.updated_at, n.last_accessed_at,
       n.access_count, n.evolution_history
FROM cortex.notes n
WHERE n.merged_into IS NULL;

-- Relationships valid now, with entity names: source --relation--> target.
CREATE OR REPLACE VIEW cortex.entity_facts WITH (security_invoker = true) AS
SELECT r.user_id, s.name AS source, r.relation, t.name AS target, r.weight, r.valid_from,
       r.source_note_id, r.note_ids, r.id AS relationship_id
FROM cortex.relationships r
JOIN cortex.entities s ON s.user_id = r.user_id AND s.id = r.source_id
JOIN cortex.entities t ON t.user_id = r.user_id AND t.id = r.target_id
WHERE r.valid_to IS NULL AND r.valid_from <= now();

-- cortex.linked_notes without the tenant argument: the note's own user_id is used (the
-- tenant-first form routes to one shard on a distributed Postgres; this one reads the note
-- first). Same result as cortex.linked_notes(<owner>, p_note_id, p_depth, p_min_strength).
CREATE OR REPLACE FUNCTION cortex.linked_notes(p_note_id uuid, p_depth int DEFAULT 2, p_min_strength real DEFAULT 0)
RETURNS TABLE (id uuid, hops int, path_strength double precision, via_id uuid, link_type text,
               link_strength real, link_reason text, path uuid[])
LANGUAGE sql STABLE AS $$
    SELECT l.* FROM cortex.notes n, cortex.linked_notes(n.user_id, n.id, p_depth, p_min_strength) l
    WHERE n.id = p_note_id
$$;
