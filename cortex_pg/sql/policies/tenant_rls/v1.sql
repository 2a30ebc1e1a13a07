-- Row-Level Security: one policy per tenant table, keyed on the session setting
-- cortex.user_id (set per transaction by the store with isolation="rls":
-- SELECT set_config('cortex.user_id', '<tenant>', true)).
--
-- RLS is enabled, not forced: the tables' owner (the role that ran the migrations) and
-- superusers are not restricted; a non-owner role (cortex-pg uses "cortex_app") sees and
-- writes only rows whose user_id equals the setting. With the setting unset, it sees nothing.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['notes', 'stm_notes', 'embeddings', 'note_links', 'note_history',
                             'entities', 'entity_mentions', 'relationships', 'evolution_jobs'] LOOP
        EXECUTE format('ALTER TABLE cortex.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON cortex.%I '
            'USING (user_id = current_setting(''cortex.user_id'', true)) '
            'WITH CHECK (user_id = current_setting(''cortex.user_id'', true))', t);
    END LOOP;
END $$;
