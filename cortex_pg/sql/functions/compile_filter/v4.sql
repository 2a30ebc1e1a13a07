-- cortex.compile_filter (version 4): version 2's compiler, plus an empty range between two
-- string bounds is an error, as one between two numbers already was.
--
--   {"created_at": {"$gte": "2023-06-01", "$lt": "2023-05-01"}}   times, compared as times
--   {"created_at": {"$gt": "2023-05-08", "$lt": "2023-05-08"}}    a point with a strict bound
--   {"source": {"$gt": "z", "$lt": "a"}}                          text (a text column or a
--                                                                 metadata string), compared
--                                                                 in the database's collation,
--                                                                 as the compiled filter does
--   {"$fields": "item", "memory_id": {"$gt": "<uuid>", "$lt": "<smaller uuid>"}}  as UUIDs
--
-- Version 2 refused an empty range only between numbers ({"$gt": 5, "$lt": 3}); the same
-- mistake with dates, text or ids compiled to a condition no row meets, so a search with a
-- date window written backwards returned [] in silence. A range is empty when a lower bound
-- ($gt, $gte) lies above an upper bound ($lt, $lte), or equals it while either is strict.
-- Such a filter now raises SQLSTATE 22023 naming the field's path, like every other shape
-- that could only match nothing.
--
-- Version 2's cortex.compile_filter is kept under the name compile_filter_v2 and does all of
-- the compiling; this function calls it, then checks the string ranges of its own level. A
-- nested filter ($and, $or, $not) is compiled through cortex.compile_filter again, so every
-- level is checked.

ALTER FUNCTION cortex.compile_filter(jsonb, text, text) RENAME TO compile_filter_v2;

CREATE FUNCTION cortex.compile_filter(
    p_filter jsonb, p_alias text DEFAULT 'n', p_path text DEFAULT 'where_filter'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_sql text := cortex.compile_filter_v2(p_filter, p_alias, p_path);  -- every other check first
    v_item boolean;
    k text;
    v jsonb;
    v_field text;
    v_type text;
    v_empty record;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RETURN v_sql;
    END IF;
    v_item := p_filter -> '$fields' = '"item"'::jsonb;
    FOR k, v IN SELECT key, value FROM jsonb_each(p_filter) WHERE left(key, 1) <> '$' AND jsonb_typeof(value) = 'object' LOOP
        v_field := CASE WHEN v_item THEN CASE k WHEN 'timestamp' THEN 'created_at' WHEN 'last_accessed' THEN 'last_accessed_at'
                                                 WHEN 'memory_id' THEN '@id' ELSE k END
                        ELSE k END;
        -- the type the compiled filter compares in (version 2's compile_filter_value); number
        -- columns take number bounds only, checked by version 2
        v_type := CASE WHEN v_field IN ('created_at', 'updated_at', 'last_accessed_at') THEN 'timestamptz'
                       WHEN v_field = '@id' THEN 'uuid'
                       ELSE 'text' END;
        SELECT l.key AS lo_op, l.value #>> '{}' AS lo, u.key AS hi_op, u.value #>> '{}' AS hi INTO v_empty
        FROM jsonb_each(v) l, jsonb_each(v) u,
             LATERAL (SELECT CASE v_type
                 WHEN 'timestamptz' THEN CASE WHEN (l.value #>> '{}')::timestamptz > (u.value #>> '{}')::timestamptz THEN 1
                                              WHEN (l.value #>> '{}')::timestamptz = (u.value #>> '{}')::timestamptz THEN 0
                                              ELSE -1 END
                 WHEN 'uuid' THEN CASE WHEN (l.value #>> '{}')::uuid > (u.value #>> '{}')::uuid THEN 1
                                       WHEN (l.value #>> '{}')::uuid = (u.value #>> '{}')::uuid THEN 0 ELSE -1 END
                 ELSE CASE WHEN (l.value #>> '{}') > (u.value #>> '{}') THEN 1
                           WHEN (l.value #>> '{}') = (u.value #>> '{}') THEN 0 ELSE -1 END
                 END AS cmp) c
        WHERE l.key IN ('$gt', '$gte') AND u.key IN ('$lt', '$lte')
          AND jsonb_typeof(l.value) = 'string' AND jsonb_typeof(u.value) = 'string'
          AND (c.cmp > 0 OR (c.cmp = 0 AND (l.key = '$gt' OR u.key = '$lt')))
        ORDER BY l.key, u.key
        LIMIT 1;
        IF FOUND THEN
            PERFORM cortex.filter_error(p_path || '.' || k, format('the range from %s (%s) to %s (%s) is empty',
                                                                   v_empty.lo, v_empty.lo_op, v_empty.hi, v_empty.hi_op));
        END IF;
    END LOOP;
    RETURN v_sql;
END $$;
