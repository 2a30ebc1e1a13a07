-- The speakers of a tenant's notes (version 2): version 1's table and triggers, and
-- cortex.query_without_speakers.
--
-- A question about a person names them ("What activities has Melanie done with her
-- family?"), and the query's embedding then leans toward the turns that address that person
-- by name ("Hey Melanie! ...", said by someone else) more than toward what the person said
-- ("I'm off to go swimming with the kids"), which rarely holds the name. The library embeds
-- the query a second time without the names (cortex_pg.store.ranking.Ranking's
-- unnamed_query_weight) and searches with a blend of both embeddings, as search_notes v14
-- leaves the names out of the full-text terms for the same reason.
--
-- cortex.query_without_speakers(p_user_id, p_query): p_query without the names of the
-- tenant's speakers it names, by search_notes v13/v14's rule: a speaker of
-- cortex.speaker_counts (the current long-term notes' speakers) is named when its words
-- appear in a row among the query's words (lower case, runs of characters that are not letters
-- or digits as one space). Each occurrence leaves the text, matched without regard to case,
-- with a possessive "'s" after it ("What does Melanie's son like?" -> "What does son like?"),
-- longer names first, but not before an apostrophe and another letter ("Why don't you ...?"
-- keeps "don't" for a speaker Don); runs of white space become one space, trimmed. NULL when
-- the query names none of the tenant's speakers, when no occurrence leaves it, or when no
-- letter or digit would be left ("Melanie?").

CREATE OR REPLACE FUNCTION cortex.query_without_speakers(p_user_id text, p_query text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_words text := ' ' || btrim(regexp_replace(lower(left(coalesce(p_query, ''), 100000)), '[^[:alnum:]]+', ' ', 'g')) || ' ';
    v_out text := p_query;
    v_named boolean := false;
    w text;
BEGIN
    FOR w IN SELECT c.words FROM cortex.speaker_counts c
             WHERE c.user_id = p_user_id AND position(' ' || c.words || ' ' IN v_words) > 0
             ORDER BY length(c.words) DESC, c.words LOOP
        v_named := true;
        -- (the words hold letters, digits and single spaces only: nothing a pattern reads as
        -- an operator)
        -- (not before an apostrophe and a letter other than a possessive s: "don't" is not
        -- Don, "can't" not Can)
        v_out := regexp_replace(v_out, '(^|[^[:alnum:]])' || replace(w, ' ', '[^[:alnum:]]+')
                                       || '([''’]s)?(?=[^[:alnum:]''’]|[''’][^[:alnum:]]|[''’]$|$)', '\1', 'gi');
    END LOOP;
    IF NOT v_named OR v_out = p_query THEN
        RETURN NULL;
    END IF;
    v_out := btrim(regexp_replace(v_out, '\s+', ' ', 'g'));
    RETURN CASE WHEN v_out ~ '[[:alnum:]]' THEN v_out END;
END $$;
