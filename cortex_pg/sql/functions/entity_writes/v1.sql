-- Entity bookkeeping that must hold whoever writes: Python, psql, or another driver.
--
--   cortex.normalize_entity_name(name): the matching key of an entity, case- and
--     whitespace-folded: lower(trim(collapse runs of white space to one space)).
--       SELECT cortex.normalize_entity_name('  Acme   CORP ');   -- 'acme corp'
--
--   cortex.assert_relationship(user, source_id, relation, target_id, valid_from, note_id,
--                              single_valued) -> relationships.id
--     Records "source --relation--> target holds from valid_from", said by note_id.
--     * Same open fact already stored: weight + 1 (not when this note already counted),
--       note_id added to note_ids, valid_from = the earlier of the two. One
--       INSERT ... ON CONFLICT DO UPDATE, so concurrent writers never lose an increment.
--     * single_valued (works_at, lives_in, ...): the open facts of the same source and
--       relation with another target and valid_from <= this one are closed
--       (valid_to = valid_from of the new fact), not deleted. When a *later* contradicting
--       fact is already open, the new one is history: stored closed at that fact's
--       valid_from. A transaction-scoped advisory lock per (user, source, relation)
--       serialises writers of the same single-valued relation.
--
--   cortex.forget_note_entities(user, note_ids uuid[]) -> number of mentions removed
--     What a deleted (or re-extracted) note said goes: its mentions are deleted, the
--     entities' frequency is decremented by the mentions removed, their first_seen /
--     last_seen / contexts are rebuilt from the remaining mentions; relationships lose the
--     note from note_ids and 1 of weight per note, and go when no weight is left; entities
--     left with no mention go (their relationships with them, by cascade).
--     A removed fact gives its time back: the fact of the same source and relation that it
--     had closed (the one whose valid_to falls in the removed fact's [valid_from, valid_to),
--     latest first) and that still has support gets the removed fact's valid_to, so it is
--     open again (valid_to NULL) when the removed fact was. Deleting note 2 "Alice works at
--     Beta Labs" gives Alice back her Acme Corp job from note 1. Removed facts are handled
--     oldest first, so removing a chain of them at once reopens the first fact left.
--
--   Triggers notes_forget_entities / stm_notes_forget_entities (AFTER DELETE, per
--   statement): call forget_note_entities for deleted ids that are now in neither tier
--   (an LTM note evicted from STM keeps its mentions).

CREATE OR REPLACE FUNCTION cortex.normalize_entity_name(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN lower(btrim(regexp_replace(p_name, '\s+', ' ', 'g')));

CREATE OR REPLACE FUNCTION cortex.assert_relationship(
    p_user_id text,
    p_source_id bigint,
    p_relation text,
    p_target_id bigint,
    p_valid_from timestamptz DEFAULT now(),
    p_note_id uuid DEFAULT NULL,
    p_single_valued boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz;
    v_id bigint;
    v_notes uuid[] := CASE WHEN p_note_id IS NULL THEN '{}'::uuid[] ELSE ARRAY[p_note_id] END;
BEGIN
    IF p_single_valued THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            p_user_id || chr(31) || p_source_id::text || chr(31) || p_relation, 0));
        SELECT min(r.valid_from) INTO v_until
        FROM cortex.relationships r
        WHERE r.user_id = p_user_id AND r.source_id = p_source_id AND r.relation = p_relation
          AND r.target_id <> p_target_id AND r.valid_to IS NULL AND r.valid_from > p_valid_from;
        IF v_until IS NOT NULL THEN
            INSERT INTO cortex.relationships
                (user_id, source_id, relation, target_id, weight, valid_from, valid_to,
                 source_note_id, note_ids)
            VALUES (p_user_id, p_source_id, p_relation, p_target_id, 1, p_valid_from, v_until,
                    p_note_id, v_notes)
            RETURNING id INTO v_id;
            RETURN v_id;
        END IF;
        UPDATE cortex.relationships r
        SET valid_to = p_valid_from
        WHERE r.user_id = p_user_id AND r.source_id = p_source_id AND r.relation = p_relation
          AND r.target_id <> p_target_id AND r.valid_to IS NULL;
    END IF;
    INSERT INTO cortex.relationships AS r
        (user_id, source_id, relation, target_id, weight, valid_from, source_note_id, note_ids)
    VALUES (p_user_id, p_source_id, p_relation, p_target_id, 1, p_valid_from, p_note_id, v_notes)
    ON CONFLICT (user_id, source_id, relation, target_id) WHERE valid_to IS NULL DO UPDATE SET
        weight = r.weight + CASE WHEN EXCLUDED.source_note_id = ANY (r.note_ids) THEN 0 ELSE 1 END,
        note_ids = CASE WHEN EXCLUDED.source_note_id IS NULL OR EXCLUDED.source_note_id = ANY (r.note_ids)
                        THEN r.note_ids ELSE r.note_ids || EXCLUDED.source_note_id END,
        valid_from = least(r.valid_from, EXCLUDED.valid_from)
    RETURNING id INTO v_id;
    RETURN v_id;
END $$;

CREATE OR REPLACE FUNCTION cortex.forget_note_entities(p_user_id text, p_note_ids uuid[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_removed integer;
    v_touched bigint[];
    v_gone jsonb;
    g record;
BEGIN
    WITH gone AS (
        DELETE FROM cortex.entity_mentions m
        WHERE m.user_id = p_user_id AND m.note_id = ANY (p_note_ids)
        RETURNING m.entity_id
    ), counts AS (
        SELECT entity_id, count(*)::int AS k FROM gone GROUP BY entity_id
    ), upd AS (
        UPDATE cortex.entities e
        SET frequency = greatest(e.frequency - c.k, 0)
        FROM counts c
        WHERE e.user_id = p_user_id AND e.id = c.entity_id
        RETURNING e.id, c.k
    )
    SELECT coalesce(sum(k), 0)::int, coalesce(array_agg(id), '{}') INTO v_removed, v_touched FROM upd;

    -- relationships said only by these notes go; the others lose them from their evidence
    WITH gone AS (
        DELETE FROM cortex.relationships r
        WHERE r.user_id = p_user_id AND r.note_ids && p_note_ids
          AND r.weight - (SELECT count(*) FROM unnest(r.note_ids) x WHERE x = ANY (p_note_ids)) <= 0
        RETURNING r.source_id, r.relation, r.valid_from, r.valid_to
    )
    SELECT coalesce(jsonb_agg(to_jsonb(gone)), '[]') INTO v_gone FROM gone;
    UPDATE cortex.relationships r
    SET weight = r.weight - (SELECT count(*) FROM unnest(r.note_ids) x WHERE x = ANY (p_note_ids)),
        note_ids = ARRAY(SELECT x FROM unnest(r.note_ids) x WHERE x <> ALL (p_note_ids)),
        source_note_id = CASE WHEN r.source_note_id = ANY (p_note_ids)
                              THEN (SELECT x FROM unnest(r.note_ids) x WHERE x <> ALL (p_note_ids) LIMIT 1)
                              ELSE r.source_note_id END
    WHERE r.user_id = p_user_id AND r.note_ids && p_note_ids;

    -- the facts that removed facts had closed get their time back (see the header)
    FOR g IN
        SELECT * FROM jsonb_to_recordset(v_gone)
            AS x(source_id bigint, relation text, valid_from timestamptz, valid_to timestamptz)
        ORDER BY x.valid_from, x.valid_to NULLS LAST
    LOOP
        UPDATE cortex.relationships c
        SET valid_to = g.valid_to
        WHERE c.user_id = p_user_id
          AND c.id = (SELECT p.id FROM cortex.relationships p
                      WHERE p.user_id = p_user_id AND p.source_id = g.source_id
                        AND p.relation = g.relation AND p.valid_to IS NOT NULL
                        AND p.valid_to >= g.valid_from
                        AND (g.valid_to IS NULL OR p.valid_to < g.valid_to)
                      ORDER BY p.valid_to DESC, p.valid_from DESC, p.id DESC
                      LIMIT 1)
          AND (g.valid_to IS NOT NULL
               OR NOT EXISTS (SELECT 1 FROM cortex.relationships o
                              WHERE o.user_id = p_user_id AND o.source_id = c.source_id
                                AND o.relation = c.relation AND o.target_id = c.target_id
                                AND o.valid_to IS NULL));
    END LOOP;

    DELETE FROM cortex.entities e
    WHERE e.user_id = p_user_id AND e.id = ANY (v_touched) AND e.frequency <= 0;
    UPDATE cortex.entities e
    SET first_seen = s.first_seen, last_seen = s.last_seen, contexts = s.contexts
    FROM (
        SELECT m.entity_id, min(m.mentioned_at) AS first_seen, max(m.mentioned_at) AS last_seen,
               coalesce((SELECT array_agg(t.snippet ORDER BY t.mentioned_at, t.note_id)
                         FROM (SELECT m2.snippet, m2.mentioned_at, m2.note_id
                               FROM cortex.entity_mentions m2
                               WHERE m2.user_id = p_user_id AND m2.entity_id = m.entity_id
                               ORDER BY m2.mentioned_at DESC, m2.note_id DESC LIMIT 10) t),
                        '{}') AS contexts
        FROM cortex.entity_mentions m
        WHERE m.user_id = p_user_id AND m.entity_id = ANY (v_touched)
        GROUP BY m.entity_id
    ) s
    WHERE e.user_id = p_user_id AND e.id = s.entity_id;
    RETURN v_removed;
END $$;

CREATE OR REPLACE FUNCTION cortex.forget_deleted_note_entities() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT o.user_id, array_agg(DISTINCT o.id) AS ids
        FROM deleted_notes o
        WHERE NOT EXISTS (SELECT 1 FROM cortex.notes n WHERE n.user_id = o.user_id AND n.id = o.id)
          AND NOT EXISTS (SELECT 1 FROM cortex.stm_notes s WHERE s.user_id = o.user_id AND s.id = o.id)
        GROUP BY o.user_id
    LOOP
        PERFORM cortex.forget_note_entities(r.user_id, r.ids);
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER notes_forget_entities AFTER DELETE ON cortex.notes
    REFERENCING OLD TABLE AS deleted_notes
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.forget_deleted_note_entities();
CREATE TRIGGER stm_notes_forget_entities AFTER DELETE ON cortex.stm_notes
    REFERENCING OLD TABLE AS deleted_notes
    FOR EACH STATEMENT EXECUTE FUNCTION cortex.forget_deleted_note_entities();
