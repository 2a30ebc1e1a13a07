-- Triggers shared by cortex.notes and cortex.stm_notes.
--   cortex.set_note_derived(): content_hash = hex sha256 of the UTF-8 content (duplicate
--     detection), updated_at bumped when content-bearing fields change.
--   cortex.record_note_history(): every insert / update / delete of a long-term note is
--     written to cortex.note_history with the old and new values of the fields that
--     changed. Access bookkeeping (access_count, last_accessed_at, updated_at, tsv) alone
--     is not a change. The op is insert/update/delete unless the transaction set
--     `SET LOCAL cortex.change_reason = 'merge'` (or another label).

CREATE OR REPLACE FUNCTION cortex.set_note_derived() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.content_hash := encode(sha256(convert_to(NEW.content, 'UTF8')), 'hex');
    IF TG_OP = 'UPDATE' AND (
        NEW.content IS DISTINCT FROM OLD.content OR NEW.keywords IS DISTINCT FROM OLD.keywords
        OR NEW.tags IS DISTINCT FROM OLD.tags OR NEW.context IS DISTINCT FROM OLD.context
        OR NEW.category IS DISTINCT FROM OLD.category OR NEW.metadata IS DISTINCT FROM OLD.metadata
        OR NEW.importance IS DISTINCT FROM OLD.importance)
       AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION cortex.record_note_history() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ignored constant text[] := ARRAY['access_count', 'last_accessed_at', 'updated_at', 'tsv'];
    old_doc jsonb;
    new_doc jsonb;
    reason text := nullif(current_setting('cortex.change_reason', true), '');
    k text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        new_doc := to_jsonb(NEW) - ignored;
        INSERT INTO cortex.note_history (user_id, note_id, session_id, op, old, new)
        VALUES (NEW.user_id, NEW.id, NEW.session_id, coalesce(reason, 'insert'), NULL, new_doc);
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        old_doc := to_jsonb(OLD) - ignored;
        INSERT INTO cortex.note_history (user_id, note_id, session_id, op, old, new)
        VALUES (OLD.user_id, OLD.id, OLD.session_id, coalesce(reason, 'delete'), old_doc, NULL);
        RETURN OLD;
    END IF;
    old_doc := to_jsonb(OLD) - ignored;
    new_doc := to_jsonb(NEW) - ignored;
    IF old_doc = new_doc THEN
        RETURN NEW;
    END IF;
    -- keep only the fields that changed
    FOR k IN SELECT key FROM jsonb_each(old_doc) LOOP
        IF old_doc -> k = new_doc -> k THEN
            old_doc := old_doc - k;
            new_doc := new_doc - k;
        END IF;
    END LOOP;
    INSERT INTO cortex.note_history (user_id, note_id, session_id, op, old, new)
    VALUES (NEW.user_id, NEW.id, NEW.session_id, coalesce(reason, 'update'), old_doc, new_doc);
    RETURN NEW;
END $$;

CREATE TRIGGER notes_derived BEFORE INSERT OR UPDATE ON cortex.notes
    FOR EACH ROW EXECUTE FUNCTION cortex.set_note_derived();
CREATE TRIGGER stm_notes_derived BEFORE INSERT OR UPDATE ON cortex.stm_notes
    FOR EACH ROW EXECUTE FUNCTION cortex.set_note_derived();
CREATE TRIGGER notes_history AFTER INSERT OR UPDATE OR DELETE ON cortex.notes
    FOR EACH ROW EXECUTE FUNCTION cortex.record_note_history();
