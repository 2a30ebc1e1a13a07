-- cortex.context_push / context_pop / context_peek: the calute context stack, one per
-- (user_id, scope), as rows of cortex.context_frames.
--
--   SELECT * FROM cortex.context_push('alice', 'default', 'task', '{"name": "report"}');
--   SELECT * FROM cortex.context_peek('alice', 'default');   -- top frame, or no row
--   SELECT * FROM cortex.context_pop('alice', 'default');    -- removes and returns the top frame
--
-- Push and pop take a transaction-level advisory lock on the stack
-- (hashtextextended('cortex.context_frames' || user_id || chr(31) || scope, 0)), so
-- concurrent pushes get consecutive depths and concurrent pops each remove a different frame
-- (pop is DELETE ... RETURNING of the deepest row, under the lock). Peek takes no lock.

CREATE OR REPLACE FUNCTION cortex.context_lock(p_user_id text, p_scope text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('cortex.context_frames' || p_user_id || chr(31) || p_scope, 0))
$$;

CREATE OR REPLACE FUNCTION cortex.context_push(p_user_id text, p_scope text, p_type text, p_data jsonb)
RETURNS SETOF cortex.context_frames
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.context_lock(p_user_id, p_scope);
    RETURN QUERY
    WITH pushed AS (
        INSERT INTO cortex.context_frames (user_id, scope, depth, type, data)
        SELECT p_user_id, p_scope, coalesce(max(f.depth), 0) + 1, p_type, coalesce(p_data, '{}'::jsonb)
        FROM cortex.context_frames f
        WHERE f.user_id = p_user_id AND f.scope = p_scope
        RETURNING *
    )
    SELECT * FROM pushed;
END $$;

CREATE OR REPLACE FUNCTION cortex.context_pop(p_user_id text, p_scope text)
RETURNS SETOF cortex.context_frames
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.context_lock(p_user_id, p_scope);
    RETURN QUERY
    WITH popped AS (
        DELETE FROM cortex.context_frames f
        WHERE f.user_id = p_user_id AND f.scope = p_scope
          AND f.depth = (SELECT max(g.depth) FROM cortex.context_frames g
                         WHERE g.user_id = p_user_id AND g.scope = p_scope)
        RETURNING f.*
    )
    SELECT * FROM popped;
END $$;

CREATE OR REPLACE FUNCTION cortex.context_peek(p_user_id text, p_scope text)
RETURNS SETOF cortex.context_frames
LANGUAGE sql STABLE AS $$
    SELECT * FROM cortex.context_frames f
    WHERE f.user_id = p_user_id AND f.scope = p_scope
    ORDER BY f.depth DESC LIMIT 1
$$;
