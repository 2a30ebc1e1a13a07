-- Note ids are global: one id never names notes of two tenants.
--
-- cortex.note_ids (id PRIMARY KEY, user_id) is the registry of every id ever stored, and
-- cortex.notes and cortex.stm_notes reference it by FOREIGN KEY (user_id, id). So the
-- guarantee is the database's: the primary key lets an id be registered once, and the
-- foreign key lets a tenant store a note only under an id registered to that tenant. Two
-- concurrent inserts of one id for two tenants: the second waits on the first's index
-- entry, then finds the id taken and fails its foreign key (SQLSTATE 23503).
--
-- cortex.register_note_id() (BEFORE INSERT on both tables) registers the id of every new
-- row (ON CONFLICT DO NOTHING), so plain-SQL inserts work as before. A deleted note's id
-- stays registered to its tenant (it can be stored again by that tenant, never by another).
--
-- With Citus, cortex.note_ids is a reference table (a foreign key from a distributed table to
-- a reference table is allowed; its primary key is enforced on the single shard it has).

CREATE OR REPLACE FUNCTION cortex.register_note_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cortex.note_ids (id, user_id) VALUES (NEW.id, NEW.user_id) ON CONFLICT (id) DO NOTHING;
    RETURN NEW;
END $$;

CREATE TRIGGER register_note_id BEFORE INSERT ON cortex.notes
    FOR EACH ROW EXECUTE FUNCTION cortex.register_note_id();
CREATE TRIGGER register_note_id BEFORE INSERT ON cortex.stm_notes
    FOR EACH ROW EXECUTE FUNCTION cortex.register_note_id();
