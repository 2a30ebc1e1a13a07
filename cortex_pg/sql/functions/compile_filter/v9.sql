-- cortex.compile_filter (version 9): filter values are read in the form notes store them,
-- $under is checked against the other conditions of its field, and importance is held to the
-- 0..1 of its column.
--
-- Three kinds of filter compiled to a condition no row meets, so the search returned [] in
-- silence:
-- 1. $under with another condition of its field that no value meets together, in one operator
--    object or spread over a conjunction (version 7's merge left $under out):
--      {"category": {"$eq": "work", "$under": "home"}}
--      {"category": {"$in": ["work"], "$under": "home"}}
--      {"category": "work", "$and": [{"category": {"$under": "home"}}]}
--      {"$and": [{"category": {"$under": "a"}}, {"category": {"$under": "b"}}]}
--    $under "x" holds x and the values that start with "x." (cortex.category_under). Two $under
--    meet when one path lies under the other (the deeper one holds); the values of $eq and $in
--    are kept when they lie under every $under, and when none does the field is an error. $ne
--    and $nin never empty an $under on their own (it holds every path below it), so they only
--    count against the values of $eq and $in, with version 5's rules.
-- 2. Values written otherwise than notes store them. A note's category is stored as a dot path
--    ("/" read as ".", every segment stripped: "work/python" and " work . python " are stored
--    as "work.python"), its tags and keywords stripped (a blank one dropped, each kept once);
--    a filter with the value as written never matched. Now a string of category's $eq, $ne,
--    $in, $nin and $under, and of tags' and keywords' $eq, $ne, $contains, $in and $nin, is
--    read in its stored form, by the same rules as cortex_pg.store.validation.category and
--    string_list (stripped of the characters Python's str.strip() strips); an exact list
--    ($eq [..] on tags or keywords) as string_list stores it. A value that no note can hold
--    (a category that is blank, has an empty segment such as "..a", a control character or
--    more than 255 characters; a tag that is blank or holds a control character) is kept as
--    written: in $eq, $under, $contains and an exact list, and as the only kind of value of an
--    $in, it is an error naming its path; $ne and $nin excluding it exclude nothing, as before.
--    Ranges ($gt ..) and $contains of category compare the text as written.
-- 3. importance outside 0..1, which the CHECK of notes and stm_notes keeps it in:
--    {"importance": 2}, {"importance": {"$gt": 1}}, {"importance": {"$lt": 0}} (compared as the
--    column's real). access_count has no such CHECK (a note may be written with any integer),
--    so only its int4 range is the domain, as in version 7.
-- The errors are SQLSTATE 22023 naming the path of the offending part, as every other filter
-- error. A filter whose values are in their stored form and that some row meets compiles to
-- the same text as version 8.
--
-- Version 7's cortex.compile_filter and version 8's cortex.filter_conjunction_problem are kept
-- as compile_filter_v8 and filter_conjunction_problem_v8. New: cortex.filter_strip,
-- cortex.filter_category, cortex.filter_tag, cortex.filter_stored_value,
-- cortex.filter_stored_form and cortex.filter_value_problem.

ALTER FUNCTION cortex.compile_filter(jsonb, text, text) RENAME TO compile_filter_v8;
ALTER FUNCTION cortex.filter_conjunction_problem(text, jsonb) RENAME TO filter_conjunction_problem_v8;

-- p_text without the leading and trailing characters Python's str.strip() strips (its 29
-- whitespace characters: btrim alone strips spaces only).
CREATE FUNCTION cortex.filter_strip(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT btrim(p_text, E'\t\n\u000b\f\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000')
$$;

-- The category p_text is stored as (cortex_pg.store.validation.category: "/" read as ".",
-- each segment stripped), or NULL when no note's category is that: blank (stored as none), an
-- empty segment, a control character, or longer than 255 characters.
CREATE FUNCTION cortex.filter_category(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN coalesce(bool_or(s.seg = '' OR s.seg ~ '[\u0001-\u001f\u007f-\u009f]'), true)
                  OR char_length(string_agg(s.seg, '.' ORDER BY u.n)) > 255 THEN NULL
                ELSE string_agg(s.seg, '.' ORDER BY u.n) END
    FROM unnest(string_to_array(replace(p_text, '/', '.'), '.')) WITH ORDINALITY u(seg, n),
         LATERAL (SELECT cortex.filter_strip(u.seg) AS seg) s
$$;

-- The tag or keyword p_text is stored as (cortex_pg.store.validation.string_list: stripped),
-- or NULL when no note has it: blank (dropped) or holding a control character.
CREATE FUNCTION cortex.filter_tag(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t = '' OR t ~ '[\u0001-\u001f\u007f-\u009f]' THEN NULL ELSE t END
    FROM (SELECT cortex.filter_strip(p_text) AS t) x
$$;

-- The value p_value of operator p_op on field p_field, its strings in their stored form
-- (category, tags, keywords; see the header); a string no note holds is kept as written, and
-- every other value is returned unchanged.
CREATE FUNCTION cortex.filter_stored_value(p_field text, p_op text, p_value jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_field = 'category' AND p_op IN ('$eq', '$ne', '$under') AND jsonb_typeof(p_value) = 'string' THEN
            coalesce(to_jsonb(cortex.filter_category(p_value #>> '{}')), p_value)
        WHEN p_field = 'category' AND p_op IN ('$in', '$nin') AND jsonb_typeof(p_value) = 'array' THEN
            (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(a.e) = 'string'
                                            THEN coalesce(to_jsonb(cortex.filter_category(a.e #>> '{}')), a.e)
                                            ELSE a.e END ORDER BY a.n), '[]'::jsonb)
             FROM jsonb_array_elements(p_value) WITH ORDINALITY a(e, n))
        WHEN p_field NOT IN ('tags', 'keywords') THEN p_value
        WHEN p_op IN ('$eq', '$ne', '$contains') AND jsonb_typeof(p_value) = 'string' THEN
            coalesce(to_jsonb(cortex.filter_tag(p_value #>> '{}')), p_value)
        WHEN p_op IN ('$in', '$nin') AND jsonb_typeof(p_value) = 'array' THEN
            (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(a.e) = 'string'
                                            THEN coalesce(to_jsonb(cortex.filter_tag(a.e #>> '{}')), a.e)
                                            ELSE a.e END ORDER BY a.n), '[]'::jsonb)
             FROM jsonb_array_elements(p_value) WITH ORDINALITY a(e, n))
        -- an exact list as string_list stores it: stripped, blanks dropped, each kept once
        WHEN p_op = '$eq' AND jsonb_typeof(p_value) = 'array'
             AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_value) e WHERE jsonb_typeof(e) <> 'string') THEN
            (SELECT coalesce(jsonb_agg(to_jsonb(d.t) ORDER BY d.n), '[]'::jsonb)
             FROM (SELECT coalesce(cortex.filter_tag(a.e), a.e) AS t, min(a.n) AS n
                   FROM jsonb_array_elements_text(p_value) WITH ORDINALITY a(e, n)
                   WHERE cortex.filter_strip(a.e) <> ''
                   GROUP BY 1) d)
        ELSE p_value END
$$;

-- The filter p_filter with the values of category, tags and keywords in their stored form
-- (cortex.filter_stored_value), at every level ($and, $or, $not); everything else unchanged.
CREATE FUNCTION cortex.filter_stored_form(p_filter jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_out jsonb := '{}';
    k text;
    v jsonb;
BEGIN
    IF jsonb_typeof(p_filter) IS DISTINCT FROM 'object' THEN
        RETURN p_filter;
    END IF;
    FOR k, v IN SELECT key, value FROM jsonb_each(p_filter) LOOP
        IF k IN ('$and', '$or') AND jsonb_typeof(v) = 'array' THEN
            v := coalesce((SELECT jsonb_agg(cortex.filter_stored_form(a.e) ORDER BY a.n)
                           FROM jsonb_array_elements(v) WITH ORDINALITY a(e, n)), v);
        ELSIF k = '$not' THEN
            v := cortex.filter_stored_form(v);
        ELSIF k IN ('category', 'tags', 'keywords') THEN
            v := CASE WHEN jsonb_typeof(v) = 'object'
                      THEN coalesce((SELECT jsonb_object_agg(o.key, cortex.filter_stored_value(k, o.key, o.value))
                                     FROM jsonb_each(v) o), v)
                      ELSE cortex.filter_stored_value(k, '$eq', v) END;
        END IF;
        v_out := v_out || jsonb_build_object(k, v);
    END LOOP;
    RETURN v_out;
END $$;

-- Raises SQLSTATE 22023 when a value of category, tags or keywords at the top level of the
-- filter p_filter (in stored form, see cortex.filter_stored_form) is one no note holds, where
-- it must be held: $eq, $under, $contains, an exact list, or every value of an $in.
CREATE FUNCTION cortex.filter_value_problem(p_filter jsonb, p_path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k text;
    v jsonb;
    op text;
    x jsonb;
    v_at text;
    v_rule text;
    v_bad text;
BEGIN
    FOR k, v IN SELECT key, value FROM jsonb_each(p_filter) WHERE key IN ('category', 'tags', 'keywords') LOOP
        v_rule := CASE k WHEN 'category' THEN
            'a category is stored as a dot path such as "work.python" ("/" read as ".", each segment stripped), '
            'with no empty segment, no control character and at most 255 characters; a blank one as none'
            ELSE format('%s are stored stripped, a blank one dropped, and none holds a control character', k) END;
        FOR op, x IN SELECT '$eq', v WHERE jsonb_typeof(v) <> 'object'
                     UNION ALL SELECT o.key, o.value FROM jsonb_each(CASE WHEN jsonb_typeof(v) = 'object' THEN v ELSE '{}' END) o
        LOOP
            v_at := p_path || '.' || k || CASE WHEN jsonb_typeof(v) = 'object' THEN '.' || op ELSE '' END;
            IF op IN ('$eq', '$under', '$contains') AND jsonb_typeof(x) = 'string'
               AND (CASE k WHEN 'category' THEN op <> '$contains' AND cortex.filter_category(x #>> '{}') IS NULL
                           ELSE op <> '$under' AND cortex.filter_tag(x #>> '{}') IS NULL END) THEN
                PERFORM cortex.filter_error(v_at, format(CASE k WHEN 'category' THEN 'no note''s category is %s: %s'
                                                                ELSE 'no note has the %3$s %1$s: %2$s' END,
                                                         x::text, v_rule, rtrim(k, 's')));
            END IF;
            IF op = '$eq' AND k <> 'category' AND jsonb_typeof(x) = 'array' THEN
                SELECT e::text INTO v_bad FROM jsonb_array_elements(x) e
                WHERE jsonb_typeof(e) = 'string' AND cortex.filter_tag(e #>> '{}') IS NULL LIMIT 1;
                IF v_bad IS NOT NULL THEN
                    PERFORM cortex.filter_error(v_at, format('no note''s %s hold %s: %s', k, v_bad, v_rule));
                END IF;
            END IF;
            IF op = '$in' AND jsonb_typeof(x) = 'array' AND jsonb_array_length(x) > 0
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(x) e
                               WHERE jsonb_typeof(e) <> 'string'
                                  OR CASE k WHEN 'category' THEN cortex.filter_category(e #>> '{}')
                                            ELSE cortex.filter_tag(e #>> '{}') END IS NOT NULL) THEN
                PERFORM cortex.filter_error(v_at, format(CASE k WHEN 'category' THEN 'no note''s category is any of %s: %s'
                                                                ELSE 'no note has any of the %3$s %1$s: %2$s' END,
                                                         x::text, v_rule, k));
            END IF;
        END LOOP;
    END LOOP;
END $$;

-- NULL when some value of field p_field (a name of cortex.filter_conjunction) meets every
-- operator object of the JSON array p_ops together (each one compiles); else why none does.
-- Version 8's rules, plus $under (the deepest of a field's $under paths, which must lie on one
-- path, keeps the values of $eq and $in under it) and importance's 0..1.
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
    v_under text;                -- text fields: the deepest $under path
    v_kept jsonb;
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
        -- text fields: two $under meet when one path lies under the other, and the deeper holds
        IF o ? '$under' THEN
            IF v_under IS NULL OR cortex.category_under(o ->> '$under', v_under) THEN
                v_under := o ->> '$under';
            ELSIF NOT cortex.category_under(v_under, o ->> '$under') THEN
                RETURN format('no value is both under %s and under %s (neither path lies under the other)',
                              to_jsonb(v_under)::text, (o -> '$under')::text);
            END IF;
        END IF;
    END LOOP;

    -- the values of $eq and $in that lie under the $under path
    IF v_under IS NOT NULL AND v_points IS NOT NULL THEN
        SELECT jsonb_agg(a.p ORDER BY a.n) INTO v_kept
        FROM jsonb_array_elements(v_points) WITH ORDINALITY a(p, n)
        WHERE cortex.category_under(a.p #>> '{}', v_under);
        IF v_kept IS NULL THEN
            RETURN format('no value is both %s and under %s',
                          CASE WHEN jsonb_array_length(v_points) = 1 THEN (v_points -> 0)::text
                               ELSE 'one of ' || v_points::text END,
                          to_jsonb(v_under)::text);
        END IF;
        v_points := v_kept;
    END IF;

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

    -- importance: the CHECK of notes and stm_notes keeps it from 0 to 1 (compared as the column's real)
    IF p_field = 'importance' THEN
        IF (cortex.filter_compare(v_lo, '1', 'real') > 0 OR (v_lo_op = '$gt' AND cortex.filter_compare(v_lo, '1', 'real') = 0))
           OR (cortex.filter_compare(v_hi, '0', 'real') < 0 OR (v_hi_op = '$lt' AND cortex.filter_compare(v_hi, '0', 'real') = 0)) THEN
            RETURN format('importance holds values from 0 to 1, and none meets %s',
                          concat_ws(' and ', v_lo_op || ' ' || v_lo::text, v_hi_op || ' ' || v_hi::text));
        END IF;
        IF v_points IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_points) p
                                                WHERE cortex.filter_compare(p, '0', 'real') >= 0
                                                  AND cortex.filter_compare(p, '1', 'real') <= 0) THEN
            RETURN format('importance holds values from 0 to 1, and %s',
                          CASE WHEN jsonb_array_length(v_points) = 1 THEN (v_points -> 0)::text || ' is not one'
                               ELSE 'none of ' || v_points::text || ' is one' END);
        END IF;
    END IF;

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
        RETURN NULL;  -- only $contains, or $under on their own: nothing left to check
    END IF;
    RETURN cortex.filter_operators_problem(p_field, v_merged);
END $$;

CREATE FUNCTION cortex.compile_filter(
    p_filter jsonb, p_alias text DEFAULT 'n', p_path text DEFAULT 'where_filter'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_filter jsonb := cortex.filter_stored_form(p_filter);  -- values as notes store them
    v_sql text := cortex.compile_filter_clauses(v_filter, p_alias, p_path);  -- every other check first
    v_field text;
    v_clauses jsonb;
    v_why text;
    n int;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RETURN v_sql;
    END IF;
    PERFORM cortex.filter_value_problem(v_filter, p_path);
    -- fields with two or more clauses in this object's conjunction, access_count, importance,
    -- and a field with $under
    FOR v_field, v_clauses IN
        SELECT a.c ->> 'field', jsonb_agg(a.c ORDER BY a.i)
        FROM jsonb_array_elements(cortex.filter_conjunction(v_filter, false, p_path)) WITH ORDINALITY a(c, i)
        GROUP BY a.c ->> 'field'
        HAVING count(*) > 1 OR a.c ->> 'field' IN ('access_count', 'importance') OR bool_or(a.c -> 'ops' ? '$under')
        ORDER BY min(a.i)
    LOOP
        CONTINUE WHEN cortex.filter_conjunction_problem(
            v_field, (SELECT jsonb_agg(c -> 'ops') FROM jsonb_array_elements(v_clauses) c)) IS NULL;
        -- name the clause with which the conjunction becomes unsatisfiable
        FOR n IN 1 .. jsonb_array_length(v_clauses) LOOP
            v_why := cortex.filter_conjunction_problem(
                v_field, (SELECT jsonb_agg(a.c -> 'ops' ORDER BY a.i)
                          FROM jsonb_array_elements(v_clauses) WITH ORDINALITY a(c, i) WHERE a.i <= n));
            IF v_why IS NOT NULL THEN
                PERFORM cortex.filter_error(v_clauses -> (n - 1) ->> 'path', CASE WHEN n = 1 THEN v_why ELSE format(
                    'contradicts %s: %s',
                    (SELECT string_agg(a.c ->> 'path', ', ' ORDER BY a.i)
                     FROM jsonb_array_elements(v_clauses) WITH ORDINALITY a(c, i) WHERE a.i < n),
                    v_why) END);
            END IF;
        END LOOP;
    END LOOP;
    RETURN v_sql;
END $$;
