-- Short-term memory lost to crash recovery: detected and reported, never silent.
--
--   SELECT * FROM cortex.stm_losses('alice');          -- alice's sessions whose STM a crash emptied
--   SELECT * FROM cortex.stm_check();                  -- first look since a reset: pin and count
--
-- cortex.stm_notes is UNLOGGED: PostgreSQL empties it at the end of crash recovery (and a
-- standby promoted, or a restored base backup, starts with it empty), while a clean restart
-- keeps it. Every (user_id, session_id) that ever had STM has two rows:
--
--   cortex.stm_scopes  LOGGED:   began_at (when its current STM began), lost_at (when STM
--                                written before was last found emptied; NULL: never)
--   cortex.stm_marks   UNLOGGED: present while STM written since began_at can still be there
--
-- Crash recovery empties stm_marks together with stm_notes, so a scope with a stm_scopes row
-- and no stm_marks row lost its STM to a reset, exactly (no clock, no guess), and per shard
-- when the tables are distributed by user_id (Citus: a worker's crash empties its shards of
-- both). The times: a reset happens when a server starts, so lost_at is the start time of
-- the server run that found the STM empty (pg_postmaster_start_time(); the start after the
-- crash, unless the server was restarted cleanly again before anything looked).
--
-- cortex.stm_mark_scope() (AFTER INSERT on stm_notes, per row) marks the scope of every new
-- STM row: nothing to do when the mark is there (one index probe); otherwise it inserts the
-- mark and the scope row, or, when the scope row exists, records the loss (lost_at) and
-- starts a new STM life (began_at = now()). Writers of the store already serialise on the
-- scope (advisory lock); without it, two first writers race on the mark's primary key and
-- only the one that inserted it touches the scope row.
--
-- cortex.stm_check() is run by MemoryStore.open(): cortex.stm_server (UNLOGGED, one row) is
-- there unless the server was reset since the last check, so the usual call reads one row.
-- After a reset, the first call (under an advisory lock) writes the row again and pins
-- lost_at on every scope whose STM is gone and not yet accounted, and returns one row
-- (lost_at, sessions, users) when there were any; other calls return no row. With Citus,
-- cortex.stm_server stays on the coordinator: the open-time check sees the coordinator's
-- resets, cortex.stm_losses every shard's.

CREATE OR REPLACE FUNCTION cortex.stm_mark_scope() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cortex.stm_marks m
               WHERE m.user_id = NEW.user_id AND m.session_id = NEW.session_id) THEN
        RETURN NULL;
    END IF;
    INSERT INTO cortex.stm_marks (user_id, session_id) VALUES (NEW.user_id, NEW.session_id)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;  -- a concurrent writer marked the scope first
    END IF;
    INSERT INTO cortex.stm_scopes AS s (user_id, session_id) VALUES (NEW.user_id, NEW.session_id)
    ON CONFLICT (user_id, session_id) DO UPDATE
        SET lost_at = CASE WHEN s.lost_at > s.began_at THEN s.lost_at  -- pinned by stm_check()
                           ELSE pg_postmaster_start_time() END,
            began_at = now();
    RETURN NULL;
END $$;

CREATE TRIGGER stm_mark_scope AFTER INSERT ON cortex.stm_notes
    FOR EACH ROW EXECUTE FUNCTION cortex.stm_mark_scope();

-- A scope whose STM is emptied on purpose (delete, delete_where, clear_stm, the LRU trim of
-- its last note) has nothing left to lose: its stm_scopes row and mark go with its last STM
-- note, so a later crash does not report it. Under the scope's advisory lock (the key the
-- writers take), re-checked, so a concurrent insert into the scope keeps its mark.
CREATE OR REPLACE FUNCTION cortex.stm_unmark_emptied() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sc record;
BEGIN
    FOR sc IN SELECT DISTINCT o.user_id, o.session_id FROM old_rows o ORDER BY 1, 2 LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(sc.user_id || chr(31) || sc.session_id, 0));
        IF NOT EXISTS (SELECT 1 FROM cortex.stm_notes n
                       WHERE n.user_id = sc.user_id AND n.session_id = sc.session_id) THEN
            DELETE FROM cortex.stm_marks m WHERE m.user_id = sc.user_id AND m.session_id = sc.session_id;
            DELETE FROM cortex.stm_scopes s WHERE s.user_id = sc.user_id AND s.session_id = sc.session_id;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER stm_unmark_emptied AFTER DELETE ON cortex.stm_notes
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.stm_unmark_emptied();

-- Scopes of a user (every user when p_user_id is NULL; one session when p_session_id is given)
-- whose STM was emptied by crash recovery at least once: the latest loss, and whether STM
-- has been written to the scope since (written_since = false: what it held is gone and
-- nothing replaced it).
CREATE OR REPLACE FUNCTION cortex.stm_losses(p_user_id text DEFAULT NULL, p_session_id text DEFAULT NULL)
RETURNS TABLE (user_id text, session_id text, lost_at timestamptz, written_since boolean)
LANGUAGE sql STABLE AS $$
    SELECT s.user_id, s.session_id,
           CASE WHEN m.user_id IS NOT NULL OR s.lost_at > s.began_at THEN s.lost_at
                ELSE pg_postmaster_start_time() END,
           m.user_id IS NOT NULL
    FROM cortex.stm_scopes s
    LEFT JOIN cortex.stm_marks m ON m.user_id = s.user_id AND m.session_id = s.session_id
    WHERE (p_user_id IS NULL OR s.user_id = p_user_id)
      AND (p_session_id IS NULL OR s.session_id = p_session_id)
      AND (m.user_id IS NULL OR s.lost_at IS NOT NULL)
    ORDER BY s.user_id, s.session_id
$$;

CREATE OR REPLACE FUNCTION cortex.stm_check()
RETURNS TABLE (lost_at timestamptz, sessions bigint, users bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cortex.stm_server) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('cortex.stm_server', 0));
    IF EXISTS (SELECT 1 FROM cortex.stm_server) THEN
        RETURN;  -- another session checked meanwhile
    END IF;
    INSERT INTO cortex.stm_server (started_at) VALUES (pg_postmaster_start_time());
    RETURN QUERY
    WITH pinned AS (
        UPDATE cortex.stm_scopes s SET lost_at = pg_postmaster_start_time()
        WHERE NOT EXISTS (SELECT 1 FROM cortex.stm_marks m
                          WHERE m.user_id = s.user_id AND m.session_id = s.session_id)
          AND (s.lost_at IS NULL OR s.lost_at < s.began_at)
        RETURNING s.user_id
    )
    SELECT pg_postmaster_start_time(), count(*), count(DISTINCT p.user_id)
    FROM pinned p
    HAVING count(*) > 0;
END $$;
