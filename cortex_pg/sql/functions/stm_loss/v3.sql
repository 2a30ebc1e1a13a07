-- Short-term memory lost to crash recovery (version 3): a loss is dated at the crash recovery
-- that emptied it, never before its session's STM began, and counted once.
--
-- What changed, and why. Versions 1-2 dated every loss pg_postmaster_start_time(), "the start of
-- the server that recovered". But a backend that dies abnormally (kill -9, the OOM killer, a
-- segfault) makes the postmaster end every backend and run crash recovery itself, without
-- restarting: the UNLOGGED tables are emptied and pg_postmaster_start_time() does not move. A
-- session whose STM began after the postmaster started was then reported lost before it began
-- (lost_at < began_at). And versions 1-2 told a counted loss from the times alone (lost_at >=
-- began_at: counted; lost_at < began_at: a loss of the STM written since, not yet counted), so
-- every later check counted such a session again (a second backend crash, nothing written in
-- between, reported the same sessions again, with the same wrong time), and its next write
-- overwrote its time once more.
--
-- Version 3:
--
-- * cortex.stm_reset_at(): when the server last emptied its UNLOGGED tables. Crash recovery,
--   with or without a postmaster restart, resets the cluster-wide statistics as it starts
--   (stats_reset of pg_stat_archiver, pg_stat_bgwriter and pg_stat_wal, PostgreSQL >= 15), and
--   a clean restart keeps them; the earliest of the three is the start of the last crash
--   recovery (later, never earlier, when someone reset all three since with
--   pg_stat_reset_shared, or the statistics file was lost at a clean start). Neither
--   pg_postmaster_start_time() nor pg_stat_database.stats_reset (NULL after recovery) says it.
--   Without those statistics (all NULL): the postmaster's start, as before.
-- * A loss is dated greatest(cortex.stm_reset_at(), began_at): the STM written since began_at
--   was there when its mark was written, so it was emptied after; the bound only acts when the
--   server's record cannot explain the loss (the UNLOGGED tables emptied by hand, a standby
--   promoted after the scope began on the primary), and then says "not before it began".
-- * Which loss is counted is state, not a comparison of times (two columns added by migration
--   0039): stm_scopes.lost_pinned is true when lost_at is the loss of the STM written since
--   began_at, pinned by cortex.stm_check(); stm_scopes.lost_reported is false when a write
--   found the loss before the check did (it dated it and began the scope's STM anew), so the
--   check still has to count it. The check pins the scopes without mark and not pinned, and
--   counts the marked ones not reported; the trigger keeps a pinned time (its loss counted) or
--   dates a loss nothing pinned yet (left to the check: lost_reported false), and starts the
--   new STM life unpinned; cortex.stm_losses() reports the pinned time, or dates a loss not
--   yet pinned. Every loss is counted by exactly one check: the first after it (v1-v2 counted
--   a loss a write found first; the first form of v3 did not, and the loss went unwarned).
--
-- * The check first locks the scope rows it may count (FOR UPDATE, in key order), so a writer
--   that was re-marking one of them finishes first, and then reads the marks afresh: a scope a
--   writer marked while the check waited is counted as found by that write, not pinned as if
--   nothing had been written (which would leave the STM written since unreported at the next
--   loss).
-- * cortex.stm_unmark_emptied() keeps the scope row of a loss a write found and no check has
--   counted yet (lost_reported false) when its STM is emptied on purpose: the check still
--   counts that loss, at the time the write gave it.
--
-- Detection is unchanged and exact (v1.sql): a stm_scopes row (LOGGED) without its stm_marks row
-- (UNLOGGED, emptied with stm_notes) is STM lost to a reset; cortex.stm_server's row (UNLOGGED)
-- is gone after a reset, so the first check after one does the work. Its started_at now holds
-- cortex.stm_reset_at(). The triggers are v1's.

CREATE OR REPLACE FUNCTION cortex.stm_reset_at() RETURNS timestamptz
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(least((SELECT a.stats_reset FROM pg_catalog.pg_stat_archiver a),
                          (SELECT b.stats_reset FROM pg_catalog.pg_stat_bgwriter b),
                          (SELECT w.stats_reset FROM pg_catalog.pg_stat_wal w)),
                    pg_catalog.pg_postmaster_start_time())
$$;

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
        SET lost_at = CASE WHEN s.lost_pinned THEN s.lost_at  -- pinned by stm_check()
                           -- a loss a write found, its STM emptied on purpose since: its time
                           WHEN NOT s.lost_reported AND cortex.stm_reset_at() <= s.began_at THEN s.lost_at
                           ELSE greatest(cortex.stm_reset_at(), s.began_at) END,
            lost_reported = s.lost_pinned,  -- a loss not pinned yet is left to the check
            began_at = now(),
            lost_pinned = false;
    RETURN NULL;
END $$;

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
            DELETE FROM cortex.stm_scopes s  -- (a loss not counted yet stays, for the check)
            WHERE s.user_id = sc.user_id AND s.session_id = sc.session_id AND s.lost_reported;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- Scopes of a user (every user when p_user_id is NULL; one session when p_session_id is given)
-- whose STM was emptied by crash recovery at least once: the latest loss, and whether STM
-- has been written to the scope since (written_since = false: what it held is gone and
-- nothing replaced it).
CREATE OR REPLACE FUNCTION cortex.stm_losses(p_user_id text DEFAULT NULL, p_session_id text DEFAULT NULL)
RETURNS TABLE (user_id text, session_id text, lost_at timestamptz, written_since boolean)
LANGUAGE sql STABLE AS $$
    SELECT s.user_id, s.session_id,
           CASE WHEN m.user_id IS NOT NULL OR s.lost_pinned THEN s.lost_at
                WHEN NOT s.lost_reported AND cortex.stm_reset_at() <= s.began_at THEN s.lost_at
                ELSE greatest(cortex.stm_reset_at(), s.began_at) END,
           m.user_id IS NOT NULL
    FROM cortex.stm_scopes s
    LEFT JOIN cortex.stm_marks m ON m.user_id = s.user_id AND m.session_id = s.session_id
    WHERE (p_user_id IS NULL OR s.user_id = p_user_id)
      AND (p_session_id IS NULL OR s.session_id = p_session_id)
      AND (m.user_id IS NULL OR s.lost_at IS NOT NULL)
    ORDER BY s.user_id, s.session_id
$$;

-- Runs with its owner's rights (v2.sql says why); every object named by schema.
CREATE OR REPLACE FUNCTION cortex.stm_check()
RETURNS TABLE (lost_at timestamptz, sessions bigint, users bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    reset_at timestamptz;
BEGIN
    IF EXISTS (SELECT 1 FROM cortex.stm_server) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('cortex.stm_server', 0));
    IF EXISTS (SELECT 1 FROM cortex.stm_server) THEN
        RETURN;  -- another session checked meanwhile
    END IF;
    reset_at := cortex.stm_reset_at();
    INSERT INTO cortex.stm_server (started_at) VALUES (reset_at);
    -- the rows it may count, locked in key order: a writer re-marking one of them finishes first,
    -- and the statement below (a snapshot of its own) sees its mark
    PERFORM 1 FROM cortex.stm_scopes s
    WHERE NOT s.lost_pinned OR NOT s.lost_reported
    ORDER BY s.user_id, s.session_id
    FOR UPDATE;
    RETURN QUERY
    WITH pinned AS (  -- lost, nothing written since (or written, then emptied on purpose)
        UPDATE cortex.stm_scopes s
        -- (a loss a write found keeps its time unless a later crash emptied what it began)
        SET lost_at = CASE WHEN s.lost_reported OR reset_at > s.began_at THEN greatest(reset_at, s.began_at)
                           ELSE s.lost_at END,
            lost_pinned = true, lost_reported = true
        WHERE NOT s.lost_pinned
          AND NOT EXISTS (SELECT 1 FROM cortex.stm_marks m
                          WHERE m.user_id = s.user_id AND m.session_id = s.session_id)
        RETURNING s.user_id, s.lost_at
    ), found_by_writes AS (  -- lost, found and dated by a write since (its mark is new)
        UPDATE cortex.stm_scopes s SET lost_reported = true
        WHERE NOT s.lost_reported
          AND EXISTS (SELECT 1 FROM cortex.stm_marks m
                      WHERE m.user_id = s.user_id AND m.session_id = s.session_id)
        RETURNING s.user_id, s.lost_at
    )
    SELECT max(p.lost_at), count(*), count(DISTINCT p.user_id)
    FROM (SELECT * FROM pinned UNION ALL SELECT * FROM found_by_writes) p
    HAVING count(*) > 0;
END $$;
