-- cortex.compile_filter (version 7): a conjunction is checked as a whole, field by field, and
-- a range of access_count that holds no whole number is empty.
--
-- Version 5 refused operators of one field that no value meets together, but only within one
-- field's operator object. The same contradiction spread over the clauses of a conjunction
-- compiled to a condition no row meets, so the search returned [] in silence:
--   {"$and": [{"category": "work"}, {"category": "home"}]}
--   {"category": "work", "$and": [{"category": "home"}]}          (an object's keys are AND-ed
--                                                                   with its $and)
--   {"$and": [{"importance": {"$gt": 0.8}}, {"importance": {"$lt": 0.2}}]}
--   {"access_count": {"$gt": 1, "$lt": 2}}                        (an integer column: no whole
--                                                                   number lies between 1 and 2)
-- Now the conjunction an object states (its field keys, and the clauses of each element of its
-- $and, nested $and flattened; not the branches of $or nor what $not negates) is gathered per
-- field, names that mean one field counted as one (calute's item names such as timestamp and
-- created_at; a metadata key written with or without "metadata."), and a field with two or
-- more clauses is checked with version 5's rules for one operator object, applied to the
-- clauses merged: the values its $eq and $in allow are those every clause allows, $ne and $nin
-- exclude what any clause excludes, the tightest lower and upper bounds hold (bounds of one
-- side of two JSON types: no value is both). On tags and keywords each required tag ($eq "x",
-- $contains) and each $in list is checked against the exact list of $eq [..] and every
-- exclusion, and two different exact lists are a contradiction.
-- access_count, the one integer field, holds whole numbers from -2147483648 to 2147483647: its
-- strict bounds are read as inclusive whole ones ($gt 1 is $gte 2), so a range that holds no
-- whole number is an error even within one operator object, and a range of one whole number
-- is that value ({"$gt": 1, "$lte": 2, "$ne": 2}).
-- The error is SQLSTATE 22023 naming the path of the clause with which the conjunction became
-- unsatisfiable and the paths of the clauses before it (where_filter.$and[1].category:
-- contradicts where_filter.$and[0].category: ...). Every level is checked, so a contradictory
-- conjunction inside an $or branch or under $not is an error too, as a contradictory operator
-- object there already was.
--
-- Version 5's cortex.compile_filter is kept, renamed compile_filter_clauses, and does all the compiling
-- (so the compiled text of every filter is unchanged); this function calls it, then checks its
-- own level. New: cortex.filter_conjunction, cortex.filter_conjunction_problem and
-- cortex.filter_operators_problem.

ALTER FUNCTION cortex.compile_filter(jsonb, text, text) RENAME TO compile_filter_clauses;

-- The clauses of the conjunction a filter object states, as a JSON array of
-- {"field": <one name per field>, "ops": <operator object>, "path": <its path>}: the object's
-- field keys (in key order; a bare value is {"$eq": value}), then those of each element of its
-- $and, flattened. Field names: columns by name, '@id' and '@user_id' for calute's item
-- memory_id and user_id, 'metadata.<key>' for a metadata key. p_item: the $fields mode the
-- object inherits. The filter has been compiled (so checked) before.
CREATE FUNCTION cortex.filter_conjunction(p_filter jsonb, p_item boolean, p_path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_item boolean := CASE p_filter -> '$fields' WHEN '"item"'::jsonb THEN true
                                                  WHEN '"note"'::jsonb THEN false ELSE p_item END;
    v_out jsonb;
    i int;
BEGIN
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'field', CASE WHEN f.name LIKE 'metadata.%'
                               OR f.name IN ('content', 'context', 'category', 'memory_type', 'session_id',
                                             'importance', 'access_count', 'created_at', 'updated_at',
                                             'last_accessed_at', 'keywords', 'tags', '@id', '@user_id')
                             THEN f.name ELSE 'metadata.' || f.name END,
               'ops', CASE WHEN jsonb_typeof(e.value) = 'object' THEN e.value
                           ELSE jsonb_build_object('$eq', e.value) END,
               'path', p_path || '.' || e.key) ORDER BY e.key COLLATE "C"), '[]'::jsonb)
    INTO v_out
    FROM jsonb_each(p_filter) e,
         LATERAL (SELECT CASE WHEN v_item THEN CASE e.key WHEN 'timestamp' THEN 'created_at'
                                                          WHEN 'last_accessed' THEN 'last_accessed_at'
                                                          WHEN 'memory_id' THEN '@id'
                                                          WHEN 'user_id' THEN '@user_id' ELSE e.key END
                              ELSE e.key END AS name) f
    WHERE left(e.key, 1) <> '$';
    IF jsonb_typeof(p_filter -> '$and') = 'array' THEN
        FOR i IN 0 .. jsonb_array_length(p_filter -> '$and') - 1 LOOP
            v_out := v_out || cortex.filter_conjunction(p_filter -> '$and' -> i, v_item,
                                                        format('%s.$and[%s]', p_path, i));
        END LOOP;
    END IF;
    RETURN v_out;
END $$;

-- NULL when version 5 compiles the operator object p_ops of field p_field (a name of
-- cortex.filter_conjunction), else the reason it gives, without its path.
CREATE FUNCTION cortex.filter_operators_problem(p_field text, p_ops jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_msg text;
BEGIN
    PERFORM cortex.compile_filter_clauses(CASE p_field
        WHEN '@id' THEN jsonb_build_object('$fields', 'item', 'memory_id', p_ops)
        WHEN '@user_id' THEN jsonb_build_object('$fields', 'item', 'user_id', p_ops)
        ELSE jsonb_build_object(p_field, p_ops) END, 'n', 'f');
    RETURN NULL;
EXCEPTION WHEN SQLSTATE '22023' THEN
    GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
    RETURN substr(v_msg, strpos(v_msg, ': ') + 2);
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
                               WHERE cortex.filter_compare(p, y, v_type) = 0) THEN
                    RETURN format('no value is both %s and %s',
                                  CASE WHEN jsonb_array_length(v_points) = 1 THEN (v_points -> 0)::text
                                       ELSE 'one of ' || v_points::text END,
                                  CASE WHEN jsonb_array_length(x) = 1 THEN (x -> 0)::text
                                       ELSE 'one of ' || x::text END);
                END IF;
                SELECT jsonb_agg(a.p ORDER BY a.n) INTO v_points
                FROM jsonb_array_elements(v_points) WITH ORDINALITY a(p, n)
                WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(x) y WHERE cortex.filter_compare(a.p, y, v_type) = 0);
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

CREATE FUNCTION cortex.compile_filter(
    p_filter jsonb, p_alias text DEFAULT 'n', p_path text DEFAULT 'where_filter'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_sql text := cortex.compile_filter_clauses(p_filter, p_alias, p_path);  -- every other check first
    v_field text;
    v_clauses jsonb;
    v_why text;
    n int;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RETURN v_sql;
    END IF;
    -- fields with two or more clauses in this object's conjunction, and access_count
    FOR v_field, v_clauses IN
        SELECT a.c ->> 'field', jsonb_agg(a.c ORDER BY a.i)
        FROM jsonb_array_elements(cortex.filter_conjunction(p_filter, false, p_path)) WITH ORDINALITY a(c, i)
        GROUP BY a.c ->> 'field'
        HAVING count(*) > 1 OR a.c ->> 'field' = 'access_count'
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
