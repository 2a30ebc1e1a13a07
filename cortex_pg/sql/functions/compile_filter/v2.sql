-- cortex.compile_filter(p_filter jsonb, p_alias text, p_path text) -> text   (version 2)
--
-- Compiles a Chroma-style where_filter into a SQL boolean expression over a note row
-- (alias p_alias: a row of cortex.notes or cortex.stm_notes, which share their columns).
-- Values are embedded with quote_literal (format %L) and cast to the column's type; field
-- names must be identifiers (letters, digits, underscores; "metadata.<key>" names a metadata
-- key explicitly) and are quoted with format %I. Anything else raises SQLSTATE 22023 with
-- COLUMN = the first segment of p_path (default 'where_filter'; the calute stores pass
-- 'filters') and a message naming the path of the offending part.
--
-- Grammar:
--   filter   := { clause, ... }                      (clauses AND-ed; {} matches every row)
--   clause   := "$and": [filter, ...] | "$or": [filter, ...] | "$not": filter
--             | "$fields": "item" | "$fields": "note"  (field names, see below; default note)
--             | field: value                          (same as {"$eq": value})
--             | field: { op: value, ... }             (ops AND-ed)
--   op       := $eq $ne $gt $gte $lt $lte $in $nin $contains
-- A bare value is $eq: a bare list means "equal to exactly this list" (JSON equality, order
-- and duplicates count), never "any of" (that is $in) nor "contains" (that is $contains); on a
-- column holding one value (text, number, time) a bare list is an error.
-- Fields:
--   text columns      content, context, category, memory_type, session_id
--                     ($contains = substring)
--   number columns    importance, access_count
--   time columns      created_at, updated_at, last_accessed_at (ISO 8601 strings)
--   list columns      keywords, tags ($contains / $eq "x" = has x; $in = has any; $nin = has none;
--                     $eq [..] = exactly that list)
--   anything else     a metadata key, compared as jsonb: $eq/$ne/$in/$nin by value;
--                     $gt.. only between values of the same JSON type (number or string);
--                     $contains = list membership, or substring of a string value.
--   "$fields": "item" adds the names of a calute MemoryItem, for this object and the filters
--                     nested in it: timestamp (= created_at), last_accessed (= last_accessed_at),
--                     memory_id (the note id, a UUID string), user_id (the item's user:
--                     metadata.user_id when set, else the tenant); agent_id, task_id and
--                     conversation_id are metadata keys in both modes.
-- Shapes that could only match nothing because of how they are written are errors, never an
-- empty result: a logical word without "$" as a field ("or": [...], "and", "not", "nor"; a
-- metadata key with such a name is written "metadata.or"), an operator word without "$"
-- ({"gte": 5}), bounds of one field of different JSON types ({"$gte": 1, "$lt": "z"}), a
-- range bound that is a number written as a string ({"$gte": "2022"}: strings compare as text
-- and never equal a number; write 2022), an empty $in, and an empty range between two numbers
-- ({"$gt": 5, "$lt": 3}).

CREATE OR REPLACE FUNCTION cortex.filter_error(p_path text, p_reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: %', p_path, p_reason
        USING ERRCODE = '22023', COLUMN = split_part(split_part(p_path, '.', 1), '[', 1);
END $$;

CREATE OR REPLACE FUNCTION cortex.compile_filter_value(
    p_field text, p_op text, p_value jsonb, p_alias text, p_path text
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    col_type text;
    is_list boolean := p_field IN ('keywords', 'tags');
    meta_key text;
    sql_op text;
    elems text[];
    e jsonb;
    target text;
BEGIN
    col_type := CASE
        WHEN p_field IN ('content', 'context', 'category', 'memory_type', 'session_id', '@user_id') THEN 'text'
        WHEN p_field = '@id' THEN 'uuid'
        WHEN p_field IN ('importance') THEN 'real'
        WHEN p_field IN ('access_count') THEN 'integer'
        WHEN p_field IN ('created_at', 'updated_at', 'last_accessed_at') THEN 'timestamptz'
        ELSE NULL END;
    sql_op := CASE p_op WHEN '$eq' THEN '=' WHEN '$gt' THEN '>' WHEN '$gte' THEN '>='
                        WHEN '$lt' THEN '<' WHEN '$lte' THEN '<=' ELSE NULL END;

    IF p_op NOT IN ('$eq', '$ne', '$gt', '$gte', '$lt', '$lte', '$in', '$nin', '$contains') THEN
        PERFORM cortex.filter_error(p_path, format('unknown operator %s', p_op));
    END IF;

    -- ---------------------------------------------------------------- list columns
    IF is_list THEN
        target := format('%s.%I', p_alias, p_field);
        IF p_op IN ('$in', '$nin') OR (p_op = '$eq' AND jsonb_typeof(p_value) = 'array') THEN
            IF jsonb_typeof(p_value) <> 'array'
               OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_value) x WHERE jsonb_typeof(x) <> 'string') THEN
                PERFORM cortex.filter_error(p_path, format('%s on %s takes a list of strings', p_op, p_field));
            END IF;
            SELECT coalesce(array_agg(x), '{}') INTO elems FROM jsonb_array_elements_text(p_value) x;
            RETURN CASE p_op
                WHEN '$in' THEN format('(%s && %L::text[])', target, elems)
                WHEN '$nin' THEN format('(NOT (%s && %L::text[]))', target, elems)
                ELSE format('(%s = %L::text[])', target, elems) END;
        END IF;
        IF p_op IN ('$eq', '$ne', '$contains') THEN
            IF jsonb_typeof(p_value) <> 'string' THEN
                PERFORM cortex.filter_error(p_path, format('%s on %s takes a string', p_op, p_field));
            END IF;
            RETURN format(CASE WHEN p_op = '$ne' THEN '(NOT (%L = ANY (%s)))' ELSE '(%L = ANY (%s))' END,
                          p_value #>> '{}', target);
        END IF;
        PERFORM cortex.filter_error(p_path, format('%s does not apply to the list field %s', p_op, p_field));
    END IF;

    -- ---------------------------------------------------------------- scalar columns
    IF col_type IS NOT NULL THEN
        target := CASE p_field
            WHEN '@user_id' THEN format('coalesce(nullif(%1$s.metadata ->> ''user_id'', ''''), %1$s.user_id)', p_alias)
            WHEN '@id' THEN format('%s.id', p_alias)
            ELSE format('%s.%I', p_alias, p_field) END;
        IF p_op NOT IN ('$in', '$nin') AND jsonb_typeof(p_value) = 'array' THEN
            PERFORM cortex.filter_error(p_path, format(
                'a list value matches only a list, and this field holds one value; use $in for "any of"'));
        END IF;
        IF p_op IN ('$in', '$nin') THEN
            IF jsonb_typeof(p_value) <> 'array' OR jsonb_array_length(p_value) = 0 THEN
                PERFORM cortex.filter_error(p_path, format('%s takes a non-empty list', p_op));
            END IF;
            elems := '{}';
            FOR e IN SELECT x FROM jsonb_array_elements(p_value) x LOOP
                elems := elems || cortex.compile_filter_literal(e, col_type, p_path);
            END LOOP;
            RETURN format(CASE WHEN p_op = '$in' THEN '(%s IN (%s))' ELSE '(%s NOT IN (%s))' END,
                          target, array_to_string(elems, ', '));
        END IF;
        IF p_op = '$contains' THEN
            IF col_type <> 'text' OR jsonb_typeof(p_value) <> 'string' THEN
                PERFORM cortex.filter_error(p_path, format('$contains on %s takes a string (substring match)', p_field));
            END IF;
            RETURN format('(strpos(%s, %L) > 0)', target, p_value #>> '{}');
        END IF;
        IF p_op = '$ne' THEN
            RETURN format('(%s IS DISTINCT FROM %s)', target, cortex.compile_filter_literal(p_value, col_type, p_path));
        END IF;
        RETURN format('(%s %s %s)', target, sql_op, cortex.compile_filter_literal(p_value, col_type, p_path));
    END IF;

    -- ---------------------------------------------------------------- metadata keys
    meta_key := CASE WHEN p_field LIKE 'metadata.%' THEN substr(p_field, 10) ELSE p_field END;
    target := format('(%s.metadata -> %L)', p_alias, meta_key);
    IF p_op IN ('$in', '$nin') THEN
        IF jsonb_typeof(p_value) <> 'array' OR jsonb_array_length(p_value) = 0 THEN
            PERFORM cortex.filter_error(p_path, format('%s takes a non-empty list', p_op));
        END IF;
        SELECT array_agg(format('%L::jsonb', x::text)) INTO elems FROM jsonb_array_elements(p_value) x;
        RETURN format(CASE WHEN p_op = '$in' THEN '(%s = ANY (ARRAY[%s]))'
                           ELSE '(coalesce(NOT (%s = ANY (ARRAY[%s])), true))' END,
                      target, array_to_string(elems, ', '));
    END IF;
    IF jsonb_typeof(p_value) IN ('object') THEN
        PERFORM cortex.filter_error(p_path, 'a value must be a string, number, boolean, null or list; use operators for conditions');
    END IF;
    IF p_op = '$eq' THEN
        RETURN format('(%s = %L::jsonb)', target, p_value::text);
    ELSIF p_op = '$ne' THEN
        RETURN format('(%s IS DISTINCT FROM %L::jsonb)', target, p_value::text);
    ELSIF p_op = '$contains' THEN
        IF jsonb_typeof(p_value) = 'string' THEN
            RETURN format('(CASE jsonb_typeof(%1$s) WHEN ''array'' THEN %1$s @> jsonb_build_array(%2$L::text) '
                          'WHEN ''string'' THEN strpos(%1$s #>> ''{}'', %2$L) > 0 ELSE false END)',
                          target, p_value #>> '{}');
        END IF;
        RETURN format('(jsonb_typeof(%1$s) = ''array'' AND %1$s @> jsonb_build_array(%2$L::jsonb))',
                      target, p_value::text);
    END IF;
    IF jsonb_typeof(p_value) NOT IN ('number', 'string') THEN
        PERFORM cortex.filter_error(p_path, format('%s compares numbers or strings', p_op));
    END IF;
    IF jsonb_typeof(p_value) = 'string' AND (p_value #>> '{}') ~ '^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$' THEN
        PERFORM cortex.filter_error(p_path, format(
            'the string %s is compared as text and never matches a number; write %s without quotes',
            p_value::text, btrim(p_value #>> '{}')));
    END IF;
    RETURN format('(jsonb_typeof(%1$s) = %2$L AND %1$s %3$s %4$L::jsonb)',
                  target, jsonb_typeof(p_value), sql_op, p_value::text);
END $$;

CREATE OR REPLACE FUNCTION cortex.compile_filter_literal(p_value jsonb, p_type text, p_path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_type IN ('real', 'integer') THEN
        IF jsonb_typeof(p_value) <> 'number' THEN
            PERFORM cortex.filter_error(p_path, format('expected a number, got %s', p_value::text));
        END IF;
        IF p_type = 'integer' AND ((p_value::numeric) % 1 <> 0 OR abs(p_value::numeric) > 2147483647) THEN
            PERFORM cortex.filter_error(p_path, format('expected a whole number, got %s', p_value::text));
        END IF;
        IF p_type = 'real' AND abs(p_value::numeric) > 1e38 THEN
            PERFORM cortex.filter_error(p_path, format('%s is out of range', p_value::text));
        END IF;
        RETURN format('%L::%s', p_value #>> '{}', p_type);
    END IF;
    IF jsonb_typeof(p_value) <> 'string' THEN
        PERFORM cortex.filter_error(p_path, format('expected a string, got %s', p_value::text));
    END IF;
    IF p_type = 'uuid' THEN
        IF (p_value #>> '{}') !~* '^\s*\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?\s*$' THEN
            PERFORM cortex.filter_error(p_path, format('%s is not a memory id (a UUID)', p_value::text));
        END IF;
    END IF;
    IF p_type = 'timestamptz' THEN
        BEGIN
            PERFORM (p_value #>> '{}')::timestamptz;
        EXCEPTION WHEN others THEN
            PERFORM cortex.filter_error(p_path, format('%s is not an ISO 8601 time', p_value::text));
        END;
    END IF;
    RETURN format('%L::%s', p_value #>> '{}', p_type);
END $$;

CREATE OR REPLACE FUNCTION cortex.compile_filter(
    p_filter jsonb, p_alias text DEFAULT 'n', p_path text DEFAULT 'where_filter'
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k text;
    field text;
    v jsonb;
    op text;
    opv jsonb;
    parts text[] := '{}';
    sub text[];
    i int;
    item_mode boolean := false;
    mode jsonb;
    bound_types text[];
    lo numeric;
    hi numeric;
BEGIN
    IF p_filter IS NULL OR p_filter = 'null'::jsonb THEN
        RETURN 'true';
    END IF;
    IF jsonb_typeof(p_filter) <> 'object' THEN
        PERFORM cortex.filter_error(p_path, 'a filter must be a JSON object');
    END IF;
    IF p_filter ? '$fields' THEN
        IF p_filter -> '$fields' NOT IN ('"item"'::jsonb, '"note"'::jsonb) THEN
            PERFORM cortex.filter_error(p_path || '.$fields', 'must be "item" or "note"');
        END IF;
        item_mode := p_filter -> '$fields' = '"item"'::jsonb;
    END IF;
    mode := CASE WHEN item_mode THEN '{"$fields": "item"}'::jsonb ELSE '{}'::jsonb END;
    FOR k, v IN SELECT key, value FROM jsonb_each(p_filter) WHERE key <> '$fields' ORDER BY key LOOP
        field := k;
        IF item_mode THEN
            field := CASE k WHEN 'timestamp' THEN 'created_at' WHEN 'last_accessed' THEN 'last_accessed_at'
                            WHEN 'memory_id' THEN '@id' WHEN 'user_id' THEN '@user_id' ELSE k END;
        END IF;
        IF k IN ('$and', '$or') THEN
            IF jsonb_typeof(v) <> 'array' OR jsonb_array_length(v) = 0 THEN
                PERFORM cortex.filter_error(p_path || '.' || k, 'takes a non-empty list of filters');
            END IF;
            sub := '{}';
            FOR i IN 0 .. jsonb_array_length(v) - 1 LOOP
                IF jsonb_typeof(v -> i) <> 'object' THEN
                    PERFORM cortex.filter_error(format('%s.%s[%s]', p_path, k, i), 'must be a filter object');
                END IF;
                sub := sub || cortex.compile_filter(mode || (v -> i), p_alias, format('%s.%s[%s]', p_path, k, i));
            END LOOP;
            parts := parts || ('(' || array_to_string(sub, CASE k WHEN '$and' THEN ' AND ' ELSE ' OR ' END) || ')');
        ELSIF k = '$not' THEN
            IF jsonb_typeof(v) <> 'object' THEN
                PERFORM cortex.filter_error(p_path || '.$not', 'takes a filter object');
            END IF;
            IF v = '{}'::jsonb THEN  -- {} matches every row, so its negation matches none
                PERFORM cortex.filter_error(p_path || '.$not', 'takes a non-empty filter ({} matches everything)');
            END IF;
            parts := parts || ('(NOT ' || cortex.compile_filter(mode || v, p_alias, p_path || '.$not') || ')');
        ELSIF left(k, 1) = '$' THEN
            PERFORM cortex.filter_error(p_path, format('unknown operator %s at the top of a filter', k));
        ELSIF lower(k) IN ('and', 'or', 'not', 'nor') THEN
            PERFORM cortex.filter_error(p_path || '.' || k, format(
                'a logical operator is written with "$" (%s); a metadata key of that name is written "metadata.%s"',
                CASE lower(k) WHEN 'nor' THEN '$not of $or' ELSE '$' || lower(k) END, k));
        ELSIF k !~ '^[A-Za-z_][A-Za-z0-9_]*$' AND k !~ '^metadata\.[A-Za-z_][A-Za-z0-9_]*$' THEN
            PERFORM cortex.filter_error(p_path, format('%s is not a field name (letters, digits, _)', quote_literal(k)));
        ELSIF field IN ('user_id', 'id', 'tsv', 'content_hash', 'embedding', 'model', 'seq', 'merged_into',
                        'evolution_history', 'metadata')
              OR (item_mode AND field = 'relevance_score') THEN
            PERFORM cortex.filter_error(p_path || '.' || k, 'this field cannot be filtered on');
        ELSIF jsonb_typeof(v) = 'object' AND EXISTS (SELECT 1 FROM jsonb_object_keys(v) x WHERE left(x, 1) = '$') THEN
            IF EXISTS (SELECT 1 FROM jsonb_object_keys(v) x WHERE left(x, 1) <> '$') THEN
                PERFORM cortex.filter_error(p_path || '.' || k, 'mixes operators and plain keys');
            END IF;
            -- range bounds of one field: one JSON type, and a non-empty numeric interval
            SELECT array_agg(DISTINCT jsonb_typeof(x.value)) INTO bound_types
            FROM jsonb_each(v) x WHERE x.key IN ('$gt', '$gte', '$lt', '$lte');
            IF 'number' = ANY (bound_types) AND 'string' = ANY (bound_types) THEN
                PERFORM cortex.filter_error(p_path || '.' || k,
                    'compares with a number and with a string: no value is both; use bounds of one type');
            END IF;
            IF bound_types = ARRAY['number'] THEN
                SELECT max(x.value::text::numeric) INTO lo FROM jsonb_each(v) x WHERE x.key IN ('$gt', '$gte');
                SELECT min(x.value::text::numeric) INTO hi FROM jsonb_each(v) x WHERE x.key IN ('$lt', '$lte');
                IF lo IS NOT NULL AND hi IS NOT NULL
                   AND (lo > hi OR (lo = hi AND (v ? '$gt' AND (v ->> '$gt')::numeric = lo
                                                  OR v ? '$lt' AND (v ->> '$lt')::numeric = hi))) THEN
                    PERFORM cortex.filter_error(p_path || '.' || k, format('the range from %s to %s is empty', lo, hi));
                END IF;
            END IF;
            FOR op, opv IN SELECT key, value FROM jsonb_each(v) ORDER BY key LOOP
                parts := parts || cortex.compile_filter_value(field, op, opv, p_alias, p_path || '.' || k || '.' || op);
            END LOOP;
        ELSIF jsonb_typeof(v) = 'object' AND EXISTS (
                SELECT 1 FROM jsonb_object_keys(v) x
                WHERE lower(x) IN ('eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'nin', 'contains', 'and', 'or', 'not')) THEN
            SELECT x INTO op FROM jsonb_object_keys(v) x
            WHERE lower(x) IN ('eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'nin', 'contains', 'and', 'or', 'not')
            ORDER BY x LIMIT 1;
            PERFORM cortex.filter_error(p_path || '.' || k || '.' || op,
                format('%s is not an operator: operators are written with "$" ($%s)', op, lower(op)));
        ELSE
            parts := parts || cortex.compile_filter_value(field, '$eq', v, p_alias, p_path || '.' || k);
        END IF;
    END LOOP;
    IF cardinality(parts) = 0 THEN
        RETURN 'true';
    END IF;
    RETURN '(' || array_to_string(parts, ' AND ') || ')';
END $$;
