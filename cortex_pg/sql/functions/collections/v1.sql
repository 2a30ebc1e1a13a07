-- Smart collections (version 1): category prefix counts kept in the note's transaction, and
-- the jobs that create or refresh a collection.
--
--   cortex.category_counts (user_id, path)  note_count: current long-term notes whose category
--                                            is path or lies under it
--   cortex.collections     (user_id, path)  description, query_helper, centroid, memory_count
--
-- A category is a dot path ("work.programming.python"); its prefixes are "work",
-- "work.programming" and "work.programming.python". Prefixes are whole segments: "work" is a
-- prefix of "work.programming" and never of "workout" (cortex.category_under).
--
-- Triggers on cortex.notes keep category_counts exact whatever writes the notes (the store,
-- the evolution worker, plain SQL). The notes counted are the current long-term ones
-- (merged_into IS NULL) with a category. Counter rows are written in (user_id, path) order,
-- so concurrent writers of one tenant queue instead of deadlocking; a row that drops to 0 is
-- deleted.
--
-- After every change of a prefix's count, cortex.schedule_collections queues a job
-- (cortex.evolution_jobs, kind 'collection', collection_path = the prefix) in the same
-- transaction when:
--   create:  no collection yet, count >= cortex.collection_min_notes() (default 10; set
--            cortex.collection_min_notes with ALTER DATABASE / ALTER ROLE / SET), unless it
--            would fragment its parent: parent count >= 30 and count < 0.3 * parent count;
--   refresh: the collection exists and its prefix has no notes left (the job removes it), or
--            (the count grew to >= 1.5 * memory_count or
--            >= memory_count + 25, and an hour passed since refreshed_at) or a day passed.
-- At most one queued or running job per (user_id, path); the worker computes the row
-- (cortex_pg.collections.refresh): centroid = avg() of the members' text embeddings, in SQL.

CREATE OR REPLACE FUNCTION cortex.category_prefixes(p_path text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(array_to_string(s[1:i], '.') ORDER BY i), '{}')
    FROM (SELECT string_to_array(p_path, '.') AS s) x, generate_subscripts(x.s, 1) AS i
    WHERE coalesce(p_path, '') <> ''
$$;

CREATE OR REPLACE FUNCTION cortex.category_under(p_category text, p_path text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_category = p_path OR starts_with(p_category, p_path || '.')
$$;

CREATE OR REPLACE FUNCTION cortex.category_parent(p_path text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(p_path, '.') = 0 THEN NULL ELSE regexp_replace(p_path, '\.[^.]*$', '') END
$$;

CREATE OR REPLACE FUNCTION cortex.collection_min_notes() RETURNS int
LANGUAGE sql STABLE AS $$
    SELECT greatest(coalesce(nullif(current_setting('cortex.collection_min_notes', true), '')::int, 10), 1)
$$;

-- Queue a collection job for (p_user_id, p_path) unless one is queued or running; returns
-- whether one was queued. Called by cortex.schedule_collections, and by hand to force a
-- refresh: SELECT cortex.enqueue_collection_job('alice', 'work');
CREATE OR REPLACE FUNCTION cortex.enqueue_collection_job(p_user_id text, p_path text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    INSERT INTO cortex.evolution_jobs (user_id, kind, collection_path)
    VALUES (p_user_id, 'collection', p_path)
    ON CONFLICT (user_id, collection_path, kind)
        WHERE status IN ('queued', 'running') AND collection_path IS NOT NULL
    DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('cortex_evolution', '');
    END IF;
    RETURN n > 0;
END $$;

CREATE OR REPLACE FUNCTION cortex.schedule_collections(p_users text[], p_paths text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.enqueue_collection_job(a.user_id, a.path)
    FROM (SELECT DISTINCT u AS user_id, p AS path FROM unnest(p_users, p_paths) AS t(u, p)) a
    LEFT JOIN cortex.category_counts cc ON cc.user_id = a.user_id AND cc.path = a.path
    LEFT JOIN cortex.collections c ON c.user_id = a.user_id AND c.path = a.path
    LEFT JOIN cortex.category_counts parent
           ON parent.user_id = a.user_id AND parent.path = cortex.category_parent(a.path)
    WHERE (c.path IS NULL
           AND cc.note_count >= cortex.collection_min_notes()
           AND NOT (coalesce(parent.note_count, 0) >= 30 AND cc.note_count < 0.3 * parent.note_count))
       OR (c.path IS NOT NULL AND cc.path IS NULL)  -- no notes left: the job removes it
       OR (c.path IS NOT NULL
           AND (((cc.note_count >= 1.5 * c.memory_count OR cc.note_count >= c.memory_count + 25)
                 AND c.refreshed_at < now() - interval '1 hour')
                OR c.refreshed_at < now() - interval '1 day'))
    ORDER BY a.user_id, a.path;
END $$;

-- Add (p_sign = 1) or remove (p_sign = -1) notes' categories (parallel arrays) from the counts.
CREATE OR REPLACE FUNCTION cortex.category_count_apply(p_users text[], p_categories text[], p_sign int)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    touched_users text[];
    touched_paths text[];
BEGIN
    WITH d AS (
        SELECT r.user_id, p.path, p_sign * count(*) AS delta
        FROM unnest(p_users, p_categories) AS r(user_id, category),
             LATERAL unnest(cortex.category_prefixes(r.category)) AS p(path)
        WHERE r.category IS NOT NULL
        GROUP BY r.user_id, p.path
    ), up AS (
        INSERT INTO cortex.category_counts AS c (user_id, path, note_count)
        SELECT d.user_id, d.path, d.delta FROM d ORDER BY d.user_id, d.path
        ON CONFLICT (user_id, path) DO UPDATE
            SET note_count = c.note_count + EXCLUDED.note_count, updated_at = now()
        RETURNING c.user_id, c.path
    )
    SELECT array_agg(user_id), array_agg(path) INTO touched_users, touched_paths FROM up;
    IF touched_users IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM cortex.category_counts c
    USING unnest(touched_users, touched_paths) AS t(user_id, path)
    WHERE c.user_id = t.user_id AND c.path = t.path AND c.note_count <= 0;
    PERFORM cortex.schedule_collections(touched_users, touched_paths);
END $$;

CREATE OR REPLACE FUNCTION cortex.category_counts_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.category_count_apply(array_agg(a.user_id), array_agg(a.category), 1)
    FROM added a WHERE a.category IS NOT NULL AND a.merged_into IS NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.category_counts_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cortex.category_count_apply(array_agg(r.user_id), array_agg(r.category), -1)
    FROM removed r WHERE r.category IS NOT NULL AND r.merged_into IS NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.category_counts_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.merged_into IS NULL AND OLD.category IS NOT NULL THEN
        PERFORM cortex.category_count_apply(ARRAY[OLD.user_id], ARRAY[OLD.category], -1);
    END IF;
    IF NEW.merged_into IS NULL AND NEW.category IS NOT NULL THEN
        PERFORM cortex.category_count_apply(ARRAY[NEW.user_id], ARRAY[NEW.category], 1);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cortex.category_counts_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cortex.category_counts;
    RETURN NULL;
END $$;

CREATE TRIGGER category_counts_insert AFTER INSERT ON cortex.notes
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION cortex.category_counts_on_insert();
CREATE TRIGGER category_counts_delete AFTER DELETE ON cortex.notes
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION cortex.category_counts_on_delete();
CREATE TRIGGER category_counts_update AFTER UPDATE ON cortex.notes
    FOR EACH ROW WHEN (OLD.category IS DISTINCT FROM NEW.category
                       OR (OLD.merged_into IS NULL) <> (NEW.merged_into IS NULL)
                       OR OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION cortex.category_counts_on_update();
CREATE TRIGGER category_counts_truncate AFTER TRUNCATE ON cortex.notes
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.category_counts_on_truncate();
