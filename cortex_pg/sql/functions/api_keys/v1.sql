-- API keys of the HTTP service (`cortex-pg serve`): which tenant a bearer key acts for.
--
-- cortex.api_keys holds the SHA-256 of each key (hex), never the key: `cortex-pg keys create`
-- prints a key once and stores its hash. A key is 32 random bytes, so a plain hash is enough
-- (there is nothing to guess; a slow password hash would only slow every request).
--
-- The table has Row-Level Security enabled and no policy: a non-owner role (the service's
-- cortex_app) reads no row of it at all. The service resolves a key through this function,
-- which runs with its owner's rights (SECURITY DEFINER, fixed search_path) and returns only the
-- user_id bound to a key that is not revoked, or NULL.
--
-- With Citus, cortex.api_keys is a reference table (a lookup by hash on any node).

CREATE OR REPLACE FUNCTION cortex.api_key_user(p_key_hash text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.user_id FROM cortex.api_keys k
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;

REVOKE ALL ON FUNCTION cortex.api_key_user(text) FROM PUBLIC;
