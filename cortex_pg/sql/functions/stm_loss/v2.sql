-- cortex.stm_check() (version 2): runs with its owner's rights.
--
-- Version 1 (stm_loss/v1.sql) ran with its caller's. Under Row-Level Security the caller is the
-- application role (cortex_app), which saw only the current tenant's rows of cortex.stm_scopes
-- (none at all as a store opens, with no tenant set), so the check after a crash pinned no
-- session; and that role could insert cortex.stm_server's row itself, so any tenant's session
-- could mark the check done and hide the loss from the next store that opened. The function is
-- now SECURITY DEFINER with a fixed search_path (its body names every object by schema), and
-- the application role may no longer write cortex.stm_server (cortex_pg.db.tenancy). Its body
-- and results are version 1's.

ALTER FUNCTION cortex.stm_check() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
