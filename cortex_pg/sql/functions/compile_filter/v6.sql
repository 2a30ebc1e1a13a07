-- cortex.compile_filter (version 6): a whole number written with a fraction part, such as
-- 1.0 or 2.00, is a whole number for an integer column (access_count).
--
-- cortex.compile_filter_literal (version 2's, in compile_filter/v2.sql) checked that the value
-- of an integer field is whole ({"access_count": 1.5} is an error naming its path) but then
-- wrote it as the JSON text, '1.0'::integer, which PostgreSQL refuses: the search raised
-- "invalid input syntax for type integer" at run time instead of matching. Version 2's
-- function is kept as compile_filter_literal_v2 and does every other check; an integer value
-- is now written through numeric ('1'::integer for 1.0). The compiled text of every other
-- filter is unchanged.

ALTER FUNCTION cortex.compile_filter_literal(jsonb, text, text) RENAME TO compile_filter_literal_v2;

CREATE FUNCTION cortex.compile_filter_literal(p_value jsonb, p_type text, p_path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_sql text := cortex.compile_filter_literal_v2(p_value, p_type, p_path);
BEGIN
    -- (version 2 has refused a value that is not a whole number within int4 by now)
    IF p_type = 'integer' THEN
        RETURN format('%L::integer', (p_value::numeric)::integer::text);
    END IF;
    RETURN v_sql;
END $$;
