-- cortex.compile_filter (version 8): the same errors and the same compiled text as version 7,
-- in time linear in the size of the filter's value lists.
--
-- Version 5's check of one operator object compared every value its $eq / $in allow with every
-- value its $ne / $nin exclude, and version 7's check of a conjunction intersected the $in lists
-- of its clauses pair by pair, each comparison a call of cortex.filter_compare: a filter of two
-- lists of 1,500 values kept a database process busy for 40 to 70 seconds. Values are now
-- matched by cortex.filter_key, a text that two values equal under cortex.filter_compare share
-- (so the lists are joined by hashing), and each match is confirmed by cortex.filter_compare,
-- so which values count as equal is unchanged.
--
-- Versions 5 and 7 of the two functions are kept as compile_filter_clauses_v7 and
-- filter_conjunction_problem_v7.

ALTER FUNCTION cortex.compile_filter_clauses(jsonb, text, text) RENAME TO compile_filter_clauses_v7;
ALTER FUNCTION cortex.filter_conjunction_problem(text, jsonb) RENAME TO filter_conjunction_problem_v7;

-- A text that values a and b share when cortex.filter_compare(a, b, p_type) = 0: the instant of a
-- time, the canonical form of a UUID, a number without trailing zeros, a real as the column
-- reads it (-0 as 0), a text as written, and for metadata (jsonb) the JSON type with the jsonb
-- hash, which equal jsonb values share (1 and 1.0 alike). Values that share it may still differ
-- (a hash collision): callers confirm with cortex.filter_compare.
CREATE FUNCTION cortex.filter_key(a jsonb, p_type text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_type
        WHEN 'timestamptz' THEN extract(epoch FROM (a #>> '{}')::timestamptz)::text
        WHEN 'uuid' THEN (a #>> '{}')::uuid::text
        WHEN 'numeric' THEN trim_scale((a #>> '{}')::numeric)::text
        WHEN 'real' THEN ((a #>> '{}')::real + 0::real)::text
        WHEN 'text' THEN a #>> '{}'
        ELSE jsonb_typeof(a) || ':' || jsonb_hash_extended(a, 0)::text
    END
$$;

-- Version 5's check of one field's operator object (see compile_filter/v5.sql), its excluded
-- values matched by key.
CREATE FUNCTION cortex.compile_filter_clauses(
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
        WITH excluded AS MATERIALIZED (
            SELECT x.value AS x, cortex.filter_key(x.value, v_type) AS k
            FROM jsonb_each(v) o,
                 jsonb_array_elements(CASE WHEN o.key = '$nin' AND jsonb_typeof(o.value) = 'array'
                                           THEN o.value ELSE jsonb_build_array(o.value) END) x
            WHERE o.key IN ('$ne', '$nin'))
        SELECT count(*) INTO v_left
        FROM jsonb_array_elements(v_points) p
        WHERE NOT EXISTS (SELECT 1 FROM excluded e
                          WHERE e.k = cortex.filter_key(p, v_type) AND cortex.filter_compare(p, e.x, v_type) = 0)
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

-- NULL when some value of field p_field (a name of cortex.filter_conjunction) meets every
-- operator object of the JSON array p_ops together (each one compiles); else why none does.
CREATE FUNCTION cortex.filter_conjunction_problem(p_field text, p_ops jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- the type the compiled filter compares in, as version 5 reads it
    v_type text := CASE WHEN p_field IN ('created_at', 'updated_at', 'last_accessed_at') THEN 'timestamptz'
                        WHEN p_field = '@id' THEN 'uuid'
                        WHEN p_field = 'importance' THEN 'real'
                        WHEN p_field = 'access_count' THEN 'numeric'
                        WHEN p_field IN ('content', 'context', 'category', 'memory_type', 'session_id',
                                         '@user_id') THEN 'text'
                        WHEN p_field IN ('keywords', 'tags') THEN 'list'
                        ELSE 'jsonb' END;
    o jsonb;
    x jsonb;
    b record;
    v_c int;
    v_excluded jsonb := '[]';    -- $ne and $nin values of every clause
    v_exact jsonb;               -- list fields: the exact list of $eq [..]
    v_required jsonb := '[]';    -- list fields: tags of $eq "x" and $contains
    v_any jsonb := '[]';         -- list fields: the $in lists
    v_points jsonb;              -- scalar fields: the values every $eq and $in allow (NULL: no such operator)
    v_eq boolean := false;
    v_lo_op text;
    v_lo jsonb;
    v_hi_op text;
    v_hi jsonb;
    v_lo_n numeric;
    v_hi_n numeric;
    v_merged jsonb := '{}';
    v_why text;
BEGIN
    FOR o IN SELECT value FROM jsonb_array_elements(p_ops) LOOP
        v_excluded := v_excluded
            || CASE WHEN jsonb_typeof(o -> '$nin') = 'array' THEN o -> '$nin' ELSE '[]'::jsonb END
            || CASE WHEN o ? '$ne' THEN jsonb_build_array(o -> '$ne') ELSE '[]'::jsonb END;
        IF v_type = 'list' THEN
            IF jsonb_typeof(o -> '$eq') = 'array' THEN
                IF v_exact IS NOT NULL AND v_exact <> o -> '$eq' THEN
                    RETURN format('no list is exactly %s and exactly %s', v_exact::text, (o -> '$eq')::text);
                END IF;
                v_exact := o -> '$eq';
            ELSIF o ? '$eq' THEN
                v_required := v_required || jsonb_build_array(o -> '$eq');
            END IF;
            IF o ? '$contains' THEN
                v_required := v_required || jsonb_build_array(o -> '$contains');
            END IF;
            IF o ? '$in' THEN
                v_any := v_any || jsonb_build_array(o -> '$in');
            END IF;
            CONTINUE;
        END IF;
        -- scalar fields: the values allowed by $eq and by $in, clause after clause
        FOR x IN SELECT CASE k WHEN '$eq' THEN jsonb_build_array(o -> k) ELSE o -> k END
                 FROM unnest(ARRAY['$eq', '$in']) k WHERE o ? k LOOP
            IF v_points IS NOT NULL THEN
                IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_points) p, jsonb_array_elements(x) y
                               WHERE cortex.filter_key(p, v_type) = cortex.filter_key(y, v_type)
                                 AND cortex.filter_compare(p, y, v_type) = 0) THEN
                    RETURN format('no value is both %s and %s',
                                  CASE WHEN jsonb_array_length(v_points) = 1 THEN (v_points -> 0)::text
                                       ELSE 'one of ' || v_points::text END,
                                  CASE WHEN jsonb_array_length(x) = 1 THEN (x -> 0)::text
                                       ELSE 'one of ' || x::text END);
                END IF;
                SELECT jsonb_agg(a.p ORDER BY a.n) INTO v_points
                FROM jsonb_array_elements(v_points) WITH ORDINALITY a(p, n)
                WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(x) y
                              WHERE cortex.filter_key(y, v_type) = cortex.filter_key(a.p, v_type)
                                AND cortex.filter_compare(a.p, y, v_type) = 0);
            ELSE
                v_points := x;
            END IF;
        END LOOP;
        v_eq := v_eq OR o ? '$eq';
    END LOOP;

    IF v_type = 'list' THEN
        -- each required tag and each $in list, with the exact list and every exclusion
        IF v_exact IS NOT NULL THEN
            v_merged := v_merged || jsonb_build_object('$eq', v_exact);
        END IF;
        IF v_excluded <> '[]'::jsonb THEN
            v_merged := v_merged || jsonb_build_object('$nin', v_excluded);
        END IF;
        IF v_merged = '{}'::jsonb THEN
            RETURN NULL;  -- nothing is excluded and no exact list: any $in or required tag can be met
        END IF;
        v_why := cortex.filter_operators_problem(p_field, v_merged);
        FOR x IN SELECT jsonb_build_object('$contains', r) FROM jsonb_array_elements(v_required) r
                 UNION ALL SELECT jsonb_build_object('$in', a) FROM jsonb_array_elements(v_any) a LOOP
            EXIT WHEN v_why IS NOT NULL;
            v_why := cortex.filter_operators_problem(p_field, v_merged || x);
        END LOOP;
        RETURN v_why;
    END IF;

    -- scalar fields: the tightest bound of each side
    FOR b IN SELECT e.key AS op, e.value AS val
             FROM jsonb_array_elements(p_ops) WITH ORDINALITY a(o, n), jsonb_each(a.o) e
             WHERE e.key IN ('$gt', '$gte', '$lt', '$lte') ORDER BY a.n, e.key LOOP
        IF b.op IN ('$gt', '$gte') THEN
            v_c := CASE WHEN v_lo IS NULL THEN 1 ELSE cortex.filter_compare(b.val, v_lo, v_type) END;
            IF v_c IS NULL THEN
                RETURN format('no value is above both %s and %s (a number and a string)', v_lo::text, b.val::text);
            END IF;
            IF v_c > 0 OR (v_c = 0 AND b.op = '$gt') THEN
                v_lo_op := b.op;
                v_lo := b.val;
            END IF;
        ELSE
            v_c := CASE WHEN v_hi IS NULL THEN -1 ELSE cortex.filter_compare(b.val, v_hi, v_type) END;
            IF v_c IS NULL THEN
                RETURN format('no value is below both %s and %s (a number and a string)', v_hi::text, b.val::text);
            END IF;
            IF v_c < 0 OR (v_c = 0 AND b.op = '$lt') THEN
                v_hi_op := b.op;
                v_hi := b.val;
            END IF;
        END IF;
    END LOOP;

    -- access_count: whole numbers of an integer column; strict bounds become inclusive whole ones
    IF p_field = 'access_count' AND (v_lo IS NOT NULL OR v_hi IS NOT NULL) THEN
        v_lo_n := CASE v_lo_op WHEN '$gt' THEN floor((v_lo #>> '{}')::numeric) + 1
                               WHEN '$gte' THEN ceil((v_lo #>> '{}')::numeric) ELSE -2147483648 END;
        v_hi_n := CASE v_hi_op WHEN '$lt' THEN ceil((v_hi #>> '{}')::numeric) - 1
                               WHEN '$lte' THEN floor((v_hi #>> '{}')::numeric) ELSE 2147483647 END;
        IF v_lo_n > v_hi_n OR v_lo_n > 2147483647 OR v_hi_n < -2147483648 THEN
            RETURN format('access_count holds whole numbers (from -2147483648 to 2147483647), and none meets %s',
                          concat_ws(' and ', v_lo_op || ' ' || v_lo::text, v_hi_op || ' ' || v_hi::text));
        END IF;
        IF v_lo IS NOT NULL THEN
            v_lo_op := '$gte';
            v_lo := to_jsonb(v_lo_n);
        END IF;
        IF v_hi IS NOT NULL THEN
            v_hi_op := '$lte';
            v_hi := to_jsonb(v_hi_n);
        END IF;
    END IF;

    IF v_points IS NOT NULL THEN
        v_merged := v_merged || CASE WHEN v_eq AND jsonb_array_length(v_points) = 1 AND jsonb_typeof(v_points -> 0) <> 'array'
                                     THEN jsonb_build_object('$eq', v_points -> 0)
                                     ELSE jsonb_build_object('$in', v_points) END;
    END IF;
    IF v_excluded <> '[]'::jsonb THEN
        v_merged := v_merged || CASE WHEN jsonb_array_length(v_excluded) = 1 AND NOT p_ops @> '[{"$nin": []}]'
                                     THEN jsonb_build_object('$ne', v_excluded -> 0)
                                     ELSE jsonb_build_object('$nin', v_excluded) END;
    END IF;
    IF v_lo IS NOT NULL THEN
        v_merged := v_merged || jsonb_build_object(v_lo_op, v_lo);
    END IF;
    IF v_hi IS NOT NULL THEN
        v_merged := v_merged || jsonb_build_object(v_hi_op, v_hi);
    END IF;
    IF v_merged = '{}'::jsonb THEN
        RETURN NULL;  -- only $contains or $under: version 5 finds no contradiction between them
    END IF;
    RETURN cortex.filter_operators_problem(p_field, v_merged);
END $$;
