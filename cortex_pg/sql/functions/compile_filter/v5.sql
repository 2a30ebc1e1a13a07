-- cortex.compile_filter (version 5): version 4's compiler, plus two more shapes that could
-- only match nothing, or match by the session's settings, are errors.
--
-- 1. Operators of one field that no value can meet together. Version 4 refused an empty
--    range; these compiled to a condition no row meets, so the search returned [] in silence:
--      {"n": {"$eq": 5, "$ne": 5}}                       the value is excluded
--      {"n": {"$eq": 5, "$gt": 6}}                       the value lies outside the range
--      {"n": {"$in": [1, 2], "$nin": [1, 2]}}            every listed value is excluded
--      {"created_at": {"$eq": "2023-05-07", "$gt": "2024-01-01"}}
--      {"tags": {"$in": ["a"], "$nin": ["a"]}}           list fields: a tag required ($eq or
--      {"tags": {"$contains": "a", "$ne": "a"}}          $contains "a", any of $in, exactly
--                                                         the list of $eq [..]) and forbidden
--                                                         ($ne "a", $nin) at once
--    A field's candidate values are its $eq value, or its $in list (both: those in both), or
--    the one value of a range whose $gte and $lte are equal;
--    each is compared with the $ne and $nin values and the range bounds as the compiled filter
--    compares them (times as times, ids as UUIDs, numbers as numbers, text in the database's
--    collation, metadata values as jsonb, where a range holds only values of its bounds' JSON
--    type). When none is left, SQLSTATE 22023 names the field's path.
-- 2. A time that is not written in ISO 8601. Version 2 cast time strings with PostgreSQL's
--    timestamptz input, which also takes 'now', 'today', 'epoch', 'infinity', zone
--    abbreviations ('2023-05-08 PST') and dates whose order follows the session's DateStyle
--    ('05/08/2023' is 8 May under MDY and 5 August under DMY). A time is now YYYY-MM-DD,
--    optionally followed by T (or t, or a space), the hour and minute, optional seconds and
--    fraction, and an optional Z or numeric offset (hours, minutes, seconds), or the basic
--    form 20230508T143000Z; a time without an offset is read in the session's TimeZone (UTC on
--    the store's connections).
--
-- Version 4's cortex.compile_filter is kept as compile_filter_v4 and does all the compiling
-- (it calls version 2's, kept as compile_filter_v2); this function calls it, then checks its
-- own level. Nested filters ($and, $or, $not) are compiled through cortex.compile_filter again,
-- so every level is checked.

ALTER FUNCTION cortex.compile_filter(jsonb, text, text) RENAME TO compile_filter_v4;

-- -1, 0 or 1 as a compares with b in the compiled filter's type p_type ('timestamptz', 'uuid',
-- 'numeric', 'real', 'text' or 'jsonb'); NULL when the filter never compares them (jsonb values of
-- different JSON types, or a type that has no order: booleans, null)
CREATE FUNCTION cortex.filter_compare(a jsonb, b jsonb, p_type text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_type
        WHEN 'timestamptz' THEN sign(extract(epoch FROM ((a #>> '{}')::timestamptz - (b #>> '{}')::timestamptz)))::int
        WHEN 'uuid' THEN CASE WHEN (a #>> '{}')::uuid < (b #>> '{}')::uuid THEN -1
                              WHEN (a #>> '{}')::uuid > (b #>> '{}')::uuid THEN 1 ELSE 0 END
        WHEN 'numeric' THEN sign((a #>> '{}')::numeric - (b #>> '{}')::numeric)::int
        WHEN 'real' THEN CASE WHEN (a #>> '{}')::real < (b #>> '{}')::real THEN -1
                              WHEN (a #>> '{}')::real > (b #>> '{}')::real THEN 1 ELSE 0 END
        WHEN 'text' THEN CASE WHEN (a #>> '{}') < (b #>> '{}') THEN -1 WHEN (a #>> '{}') > (b #>> '{}') THEN 1 ELSE 0 END
        ELSE CASE WHEN jsonb_typeof(a) <> jsonb_typeof(b) THEN NULL
                  WHEN jsonb_typeof(a) NOT IN ('number', 'string') THEN CASE WHEN a = b THEN 0 END
                  WHEN a < b THEN -1 WHEN a > b THEN 1 ELSE 0 END
        END
$$;

CREATE FUNCTION cortex.compile_filter(
    p_filter jsonb, p_alias text DEFAULT 'n', p_path text DEFAULT 'where_filter'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_sql text := cortex.compile_filter_v4(p_filter, p_alias, p_path);  -- every other check first
    v_item boolean;
    k text;
    v jsonb;
    v_field text;
    v_type text;
    v_bad text;
    v_points jsonb;
    v_left int;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RETURN v_sql;
    END IF;
    v_item := p_filter -> '$fields' = '"item"'::jsonb;
    FOR k, v IN SELECT key, value FROM jsonb_each(p_filter) WHERE left(key, 1) <> '$' LOOP
        v_field := CASE WHEN v_item THEN CASE k WHEN 'timestamp' THEN 'created_at' WHEN 'last_accessed' THEN 'last_accessed_at'
                                                 WHEN 'memory_id' THEN '@id' ELSE k END
                        ELSE k END;
        v_type := CASE WHEN v_field IN ('created_at', 'updated_at', 'last_accessed_at') THEN 'timestamptz'
                       WHEN v_field = '@id' THEN 'uuid'
                       WHEN v_field = 'importance' THEN 'real'  -- compared as the column's real
                       WHEN v_field = 'access_count' THEN 'numeric'
                       WHEN v_field IN ('content', 'context', 'category', 'memory_type', 'session_id') THEN 'text'
                       WHEN v_field = 'user_id' AND v_item THEN 'text'
                       WHEN v_field IN ('keywords', 'tags') THEN 'list'
                       ELSE 'jsonb' END;

        -- 2. times in ISO 8601 (version 2 has checked that each casts)
        IF v_type = 'timestamptz' THEN
            SELECT x INTO v_bad
            FROM (SELECT CASE WHEN jsonb_typeof(v) = 'object' THEN NULL ELSE v END AS w
                  UNION ALL SELECT o.value FROM jsonb_each(CASE WHEN jsonb_typeof(v) = 'object' THEN v ELSE '{}' END) o) ops,
                 LATERAL (SELECT e #>> '{}' AS x
                          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(ops.w) = 'array' THEN ops.w
                                                         ELSE jsonb_build_array(ops.w) END) e
                          WHERE jsonb_typeof(e) = 'string') s
            WHERE s.x !~ '^\s*(\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?|\d{8}([Tt]\d{4}(\d{2}(\.\d+)?)?)?)\s*([Zz]|[+-]\d{2}(:?\d{2}(:?\d{2}(\.\d+)?)?)?)?\s*$'
            LIMIT 1;
            IF v_bad IS NOT NULL THEN
                PERFORM cortex.filter_error(p_path || '.' || k, format(
                    '%s is not an ISO 8601 time (such as 2023-05-08, 2023-05-08T14:30:00Z or 2023-05-08T14:30:00+02:00)',
                    to_jsonb(v_bad)::text));
            END IF;
        END IF;
        CONTINUE WHEN jsonb_typeof(v) <> 'object';

        -- 1. operators of one field that no value meets together
        IF v_type = 'list' THEN
            IF jsonb_typeof(v -> '$in') = 'array' AND jsonb_array_length(v -> '$in') = 0 THEN
                PERFORM cortex.filter_error(p_path || '.' || k || '.$in', '$in takes a non-empty list');
            END IF;
            -- $eq [..] is exactly that list: a tag required by $contains / $eq "x" must be in it
            SELECT string_agg(DISTINCT v ->> op, ', ') INTO v_bad
            FROM unnest(ARRAY['$contains']) op
            WHERE jsonb_typeof(v -> '$eq') = 'array' AND jsonb_typeof(v -> op) = 'string' AND NOT (v -> '$eq') ? (v ->> op);
            IF v_bad IS NOT NULL THEN
                PERFORM cortex.filter_error(p_path || '.' || k, format('%s is required but not in the exact list of $eq', v_bad));
            END IF;
            -- tags required by $eq / $contains "x", any of $in, exactly $eq [..]; forbidden by $ne "x", $nin
            SELECT string_agg(DISTINCT r.t, ', ') INTO v_bad
            FROM (SELECT v ->> op AS t FROM unnest(ARRAY['$eq', '$contains']) op WHERE jsonb_typeof(v -> op) = 'string'
                  UNION ALL SELECT jsonb_array_elements_text(v -> '$eq') WHERE jsonb_typeof(v -> '$eq') = 'array') r
            WHERE r.t = v ->> '$ne' AND jsonb_typeof(v -> '$ne') = 'string'
               OR (jsonb_typeof(v -> '$nin') = 'array' AND v -> '$nin' ? r.t);
            IF v_bad IS NULL AND jsonb_typeof(v -> '$in') = 'array' AND jsonb_array_length(v -> '$in') > 0
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(v -> '$in') a(t)
                               WHERE NOT coalesce(jsonb_typeof(v -> '$nin') = 'array' AND v -> '$nin' ? a.t, false)
                                 AND a.t IS DISTINCT FROM CASE WHEN jsonb_typeof(v -> '$ne') = 'string' THEN v ->> '$ne' END
                                 AND (jsonb_typeof(v -> '$eq') IS DISTINCT FROM 'array' OR v -> '$eq' ? a.t)) THEN
                v_bad := 'every value of $in';
            END IF;
            IF v_bad IS NOT NULL THEN
                PERFORM cortex.filter_error(p_path || '.' || k, format('%s is both required and excluded', v_bad));
            END IF;
            CONTINUE;
        END IF;
        -- a scalar field: its candidate values ($eq, $in; both: the $eq value if $in lists it; a
        -- range whose $gte and $lte are one value: that value)
        IF NOT (v ? '$eq' OR v ? '$in') AND v ? '$gte' AND v ? '$lte'
           AND cortex.filter_compare(v -> '$gte', v -> '$lte', v_type) = 0 THEN
            v := v || jsonb_build_object('$eq', v -> '$gte');
        END IF;
        CONTINUE WHEN NOT (v ? '$eq' OR v ? '$in') OR jsonb_typeof(v -> '$eq') = 'array';
        v_points := CASE
            WHEN v ? '$eq' AND v ? '$in' THEN
                CASE WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(v -> '$in') e
                                  WHERE cortex.filter_compare(e, v -> '$eq', v_type) = 0)
                     THEN jsonb_build_array(v -> '$eq') ELSE '[]'::jsonb END
            WHEN v ? '$eq' THEN jsonb_build_array(v -> '$eq')
            ELSE v -> '$in' END;
        SELECT count(*) INTO v_left
        FROM jsonb_array_elements(v_points) p
        WHERE NOT EXISTS (SELECT 1 FROM jsonb_each(v) o,
                                        jsonb_array_elements(CASE WHEN o.key = '$nin' AND jsonb_typeof(o.value) = 'array'
                                                                  THEN o.value ELSE jsonb_build_array(o.value) END) x
                          WHERE o.key IN ('$ne', '$nin') AND cortex.filter_compare(p, x, v_type) = 0)
          AND NOT EXISTS (SELECT 1 FROM jsonb_each(v) o,
                                        LATERAL (SELECT cortex.filter_compare(p, o.value, v_type) AS c) c
                          WHERE o.key IN ('$gt', '$gte', '$lt', '$lte')
                            AND (c.c IS NULL
                                 OR (o.key = '$gt' AND c.c <= 0) OR (o.key = '$gte' AND c.c < 0)
                                 OR (o.key = '$lt' AND c.c >= 0) OR (o.key = '$lte' AND c.c > 0)));
        IF v_left = 0 THEN
            PERFORM cortex.filter_error(p_path || '.' || k, format(
                'no value meets all of %s (every value its %s allows is excluded by another operator)',
                (p_filter -> k)::text,
                CASE WHEN p_filter -> k ? '$eq' THEN '$eq' WHEN p_filter -> k ? '$in' THEN '$in' ELSE '$gte and $lte' END));
        END IF;
    END LOOP;
    RETURN v_sql;
END $$;
