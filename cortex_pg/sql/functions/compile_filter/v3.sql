-- cortex.compile_filter (version 3): version 2 plus the operator $under on text columns.
--
--   {"category": {"$under": "work"}}   category is "work" or lies below it ("work.python", ...)
--
-- Matching is by whole dot-path segments (cortex.category_under): "work" never matches
-- "workout" nor "work_notes". The value must be a non-empty string that neither starts nor
-- ends with "." and has no empty segment ("work..x" can match nothing); anything else, or
-- $under on a column that is not text (importance, tags, a metadata key), raises SQLSTATE 22023
-- naming the path of the offending part, like every other filter error.
--
-- Version 2's cortex.compile_filter_value is kept under the name compile_filter_value_v2 and
-- called for every other operator, so nothing else changes.

ALTER FUNCTION cortex.compile_filter_value(text, text, jsonb, text, text) RENAME TO compile_filter_value_v2;

CREATE FUNCTION cortex.compile_filter_value(
    p_field text, p_op text, p_value jsonb, p_alias text, p_path text
) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_op <> '$under' THEN
        RETURN cortex.compile_filter_value_v2(p_field, p_op, p_value, p_alias, p_path);
    END IF;
    IF p_field NOT IN ('content', 'context', 'category', 'memory_type', 'session_id') THEN
        PERFORM cortex.filter_error(p_path, format('$under applies to a text column (category, context, ...), not %s', p_field));
    END IF;
    IF jsonb_typeof(p_value) <> 'string' THEN
        PERFORM cortex.filter_error(p_path, '$under takes a dot path string such as "work.programming"');
    END IF;
    IF (p_value #>> '{}') = '' OR '' = ANY (string_to_array(p_value #>> '{}', '.')) THEN
        PERFORM cortex.filter_error(p_path, format('%s is not a dot path (empty segment)', p_value::text));
    END IF;
    RETURN format('cortex.category_under(%s.%I, %L)', p_alias, p_field, p_value #>> '{}');
END $$;
