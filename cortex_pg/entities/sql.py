"""SQL statements of the entity repository, kept together so a reader can paste them into psql.

Counters (frequency, first_seen/last_seen, contexts, relationship weight) move only inside
SQL: ``INSERT ... ON CONFLICT DO UPDATE`` when a note is indexed, relative ``UPDATE``s in
``cortex.forget_note_entities`` when it is deleted; Python never reads a counter to write it.
"""

from __future__ import annotations

from cortex_pg.store.sql import NOTE_COLUMNS

N_COLUMNS = ", ".join("n." + c.strip() for c in NOTE_COLUMNS.split(","))


def in_session(user: str, note_id: str) -> str:
    """SQL test: note ``note_id`` of tenant ``user`` (SQL expressions) is in session
    ``:session_id`` (LTM or STM), or ``:session_id`` is NULL (every session)."""
    return (
        "(CAST(:session_id AS text) IS NULL"
        f" OR EXISTS (SELECT 1 FROM cortex.notes sn WHERE sn.user_id = {user} AND sn.id = {note_id}"
        " AND sn.session_id = :session_id)"
        f" OR EXISTS (SELECT 1 FROM cortex.stm_notes ss WHERE ss.user_id = {user} AND ss.id = {note_id}"
        " AND ss.session_id = :session_id))"
    )


# A relationship said (also) by a note of session :session_id, or any one when it is NULL.
REL_IN_SESSION = (
    "(CAST(:session_id AS text) IS NULL OR EXISTS (SELECT 1 FROM unnest(r.note_ids) AS rn(id) WHERE "
    + in_session("r.user_id", "rn.id")
    + "))"
)

# Statement 1 of indexing a note: make sure every entity exists (and lock its row until the
# transaction ends, in name order so that concurrent writers do not deadlock). A better kind
# than 'other' replaces 'other'.
ENSURE_ENTITIES = """
INSERT INTO cortex.entities AS e (user_id, name, normalized_name, kind, first_seen, last_seen)
SELECT DISTINCT ON (cortex.normalize_entity_name(r.name))
       :user_id, r.name, cortex.normalize_entity_name(r.name), r.kind,
       CAST(:seen_at AS timestamptz), CAST(:seen_at AS timestamptz)
FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb)) AS (name text, kind text))
     WITH ORDINALITY AS r(name, kind, ord)
ORDER BY cortex.normalize_entity_name(r.name), r.ord
ON CONFLICT (user_id, normalized_name) DO UPDATE
SET kind = CASE WHEN e.kind = 'other' THEN EXCLUDED.kind ELSE e.kind END
"""

# Statement 2: the mentions of this note that are new, and the entity counters they move.
# A note indexed twice (same content saved again) adds nothing: frequency = number of notes.
# contexts keeps the snippets of the last 10 new mentions, oldest first.
ADD_MENTIONS = """
WITH r AS (
    SELECT r.*, cortex.normalize_entity_name(r.name) AS norm
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(name text, kind text, char_offset int, snippet text)
), ent AS (
    SELECT DISTINCT e.id, e.name, e.normalized_name, e.kind
    FROM cortex.entities e JOIN r ON e.user_id = :user_id AND e.normalized_name = r.norm
), fresh AS (
    INSERT INTO cortex.entity_mentions (user_id, entity_id, note_id, char_offset, snippet, mentioned_at)
    SELECT DISTINCT ON (ent.id) :user_id, ent.id, CAST(:note_id AS uuid), r.char_offset,
           left(coalesce(r.snippet, ''), 100), CAST(:seen_at AS timestamptz)
    FROM r JOIN ent ON ent.normalized_name = r.norm
    ORDER BY ent.id
    ON CONFLICT (user_id, entity_id, note_id) DO NOTHING
    RETURNING entity_id, snippet
)
INSERT INTO cortex.entities AS e
    (user_id, name, normalized_name, kind, first_seen, last_seen, frequency, contexts)
SELECT :user_id, ent.name, ent.normalized_name, ent.kind, CAST(:seen_at AS timestamptz),
       CAST(:seen_at AS timestamptz), 1, ARRAY[f.snippet]
FROM fresh f JOIN ent ON ent.id = f.entity_id
ORDER BY ent.normalized_name
ON CONFLICT (user_id, normalized_name) DO UPDATE SET
    frequency = e.frequency + EXCLUDED.frequency,
    first_seen = least(e.first_seen, EXCLUDED.first_seen),
    last_seen = greatest(e.last_seen, EXCLUDED.last_seen),
    contexts = (SELECT coalesce(array_agg(t.c ORDER BY t.i), '{}')
                FROM (SELECT u.c, u.i FROM unnest(e.contexts || EXCLUDED.contexts) WITH ORDINALITY AS u(c, i)
                      ORDER BY u.i DESC LIMIT 10) t)
RETURNING e.id
"""

ASSERT_RELATIONSHIP = """
SELECT cortex.assert_relationship(:user_id, s.id, :relation, t.id, CAST(:seen_at AS timestamptz),
                                  CAST(:note_id AS uuid), :single_valued)
FROM cortex.entities s, cortex.entities t
WHERE s.user_id = :user_id AND s.normalized_name = cortex.normalize_entity_name(:source)
  AND t.user_id = :user_id AND t.normalized_name = cortex.normalize_entity_name(:target)
"""

FORGET_NOTES = "SELECT cortex.forget_note_entities(:user_id, CAST(:note_ids AS uuid[]))"

# ENTITY_INFO counted over the mentions by notes of session :session_id only (no row when the
# session never mentions the entity).
ENTITY_INFO_IN_SESSION = f"""
WITH m AS (
    SELECT m.entity_id, m.note_id, m.snippet, m.mentioned_at
    FROM cortex.entities e
    JOIN cortex.entity_mentions m ON m.user_id = e.user_id AND m.entity_id = e.id
    WHERE e.user_id = :user_id AND e.normalized_name = cortex.normalize_entity_name(:name)
      AND {in_session("m.user_id", "m.note_id")}
)
SELECT e.id, e.name, e.kind, min(m.mentioned_at) AS first_seen, max(m.mentioned_at) AS last_seen,
       count(*) AS frequency,
       ARRAY(SELECT t.snippet FROM (SELECT m2.snippet, m2.mentioned_at, m2.note_id FROM m m2
                                    ORDER BY m2.mentioned_at DESC, m2.note_id DESC LIMIT 10) t
             ORDER BY t.mentioned_at, t.note_id) AS contexts,
       ARRAY(SELECT CAST(m3.note_id AS text) FROM m m3 ORDER BY m3.mentioned_at, m3.note_id) AS mentions
FROM m JOIN cortex.entities e ON e.user_id = :user_id AND e.id = m.entity_id
GROUP BY e.id, e.name, e.kind
"""

ENTITY_INFO = """
SELECT e.id, e.name, e.kind, e.first_seen, e.last_seen, e.frequency, e.contexts,
       ARRAY(SELECT CAST(m.note_id AS text) FROM cortex.entity_mentions m
             WHERE m.user_id = e.user_id AND m.entity_id = e.id
             ORDER BY m.mentioned_at, m.note_id) AS mentions
FROM cortex.entities e
WHERE e.user_id = :user_id AND e.normalized_name = cortex.normalize_entity_name(:name)
"""

LIST_ENTITIES = """
SELECT e.id, e.name, e.kind, e.first_seen, e.last_seen, e.frequency, e.contexts
FROM cortex.entities e
WHERE e.user_id = :user_id
ORDER BY e.frequency DESC, e.last_seen DESC, e.name
LIMIT :limit
"""

# Facts valid at :as_of (default now): valid_from <= as_of < valid_to; or every row (:history).
RELATIONSHIPS = f"""
SELECT r.id, s.name AS source, r.relation, t.name AS target, r.weight, r.valid_from, r.valid_to,
       CAST(r.source_note_id AS text) AS source_note_id, r.created_at,
       s.normalized_name = cortex.normalize_entity_name(CAST(:name AS text)) AS outgoing
FROM cortex.relationships r
JOIN cortex.entities s ON s.user_id = r.user_id AND s.id = r.source_id
JOIN cortex.entities t ON t.user_id = r.user_id AND t.id = r.target_id
WHERE r.user_id = :user_id
  AND (CAST(:name AS text) IS NULL
       OR s.normalized_name = cortex.normalize_entity_name(CAST(:name AS text))
       OR t.normalized_name = cortex.normalize_entity_name(CAST(:name AS text)))
  AND (:history OR (r.valid_from <= coalesce(CAST(:as_of AS timestamptz), now())
                    AND (r.valid_to IS NULL OR r.valid_to > coalesce(CAST(:as_of AS timestamptz), now()))))
  AND {REL_IN_SESSION}
ORDER BY r.valid_from, r.id
"""

# The edges (valid at :as_of, default now) said by notes of session :session_id, both ends'
# names and kinds: the graph that EntityStore.related_entities walks for one session.
SESSION_EDGES = f"""
SELECT s.name AS source, s.kind AS source_kind, t.name AS target, t.kind AS target_kind
FROM cortex.relationships r
JOIN cortex.entities s ON s.user_id = r.user_id AND s.id = r.source_id
JOIN cortex.entities t ON t.user_id = r.user_id AND t.id = r.target_id
WHERE r.user_id = :user_id
  AND r.valid_from <= coalesce(CAST(:as_of AS timestamptz), now())
  AND (r.valid_to IS NULL OR r.valid_to > coalesce(CAST(:as_of AS timestamptz), now()))
  AND {REL_IN_SESSION}
ORDER BY r.id
"""

RELATED = """
SELECT id, name, kind, depth
FROM cortex.related_entities(:user_id, :name, :max_depth, CAST(:as_of AS timestamptz))
"""

# /*filters*/ true is replaced by a compiled where_filter (cortex_pg.store.filters.compile_where).
# Notes that mention the query's entities; score = matched entities / query entities, in (0, 1].
NOTES_BY_ENTITIES = f"""
WITH q AS (
    SELECT DISTINCT cortex.normalize_entity_name(x) AS norm
    FROM unnest(CAST(:names AS text[])) AS x WHERE btrim(x) <> ''
), hits AS (
    SELECT m.note_id, count(DISTINCT m.entity_id) AS k
    FROM q
    JOIN cortex.entities e ON e.user_id = :user_id AND e.normalized_name = q.norm
    JOIN cortex.entity_mentions m ON m.user_id = :user_id AND m.entity_id = e.id
    GROUP BY m.note_id
)
SELECT {N_COLUMNS}, 'ltm' AS memory_tier,
       CAST(h.k AS real) / (SELECT count(*) FROM q) AS score
FROM hits h
JOIN cortex.notes n ON n.user_id = :user_id AND n.id = h.note_id
WHERE n.merged_into IS NULL
  AND (CAST(:memory_type AS text) IS NULL OR n.memory_type = :memory_type)
  AND (/*filters*/ true)
  AND (CAST(:session_id AS text) IS NULL OR n.session_id = :session_id)
ORDER BY score DESC, n.created_at DESC, n.id
LIMIT :limit
"""

# Full-text fallback: the query's lexemes OR-ed; score = ts_rank_cd normalised to [0, 1)
# (flag 32: rank / (rank + 1)). A query with no lexeme (only stop words) matches nothing.
# The matching notes come from the tenant's inverted index (cortex.bm25_postings).
NOTES_BY_TEXT = f"""
WITH q AS (
    SELECT CAST(replace(CAST(plainto_tsquery('english', :query) AS text), '&', '|') AS tsquery) AS tsq,
           array(SELECT t.lexeme FROM unnest(to_tsvector('english', :query)) t) AS lexemes
), matched AS (
    SELECT DISTINCT p.note_id FROM cortex.bm25_postings p, q
    WHERE p.user_id = :user_id AND p.lexeme = ANY (q.lexemes)
)
SELECT {N_COLUMNS}, 'ltm' AS memory_tier, ts_rank_cd(n.tsv, q.tsq, 32) AS score
FROM matched m JOIN cortex.notes n ON n.user_id = :user_id AND n.id = m.note_id, q
WHERE n.user_id = :user_id AND n.tsv @@ q.tsq AND n.merged_into IS NULL
  AND (CAST(:memory_type AS text) IS NULL OR n.memory_type = :memory_type)
  AND (/*filters*/ true)
  AND (CAST(:session_id AS text) IS NULL OR n.session_id = :session_id)
ORDER BY score DESC, n.created_at DESC, n.id
LIMIT :limit
"""

GRAPH_NODES = """
SELECT e.id, e.name, e.kind, e.frequency, e.first_seen, e.last_seen
FROM cortex.entities e WHERE e.user_id = :user_id ORDER BY e.id
"""

# GRAPH_NODES of one session: the entities its notes mention, counted over those notes.
GRAPH_NODES_IN_SESSION = f"""
SELECT e.id, e.name, e.kind, count(*) AS frequency, min(m.mentioned_at) AS first_seen,
       max(m.mentioned_at) AS last_seen
FROM cortex.entities e
JOIN cortex.entity_mentions m ON m.user_id = e.user_id AND m.entity_id = e.id
WHERE e.user_id = :user_id AND {in_session("m.user_id", "m.note_id")}
GROUP BY e.id, e.name, e.kind
ORDER BY e.id
"""

# The entities mentioned (frequency > 0) by the user's notes, or by the notes of session
# :session_id when it is set; oldest first (EntityMemory.entities / entity_mentions keys).
ENTITY_NAMES = f"""
SELECT e.name FROM cortex.entities e
WHERE e.user_id = :user_id AND e.frequency > 0
  AND (CAST(:session_id AS text) IS NULL OR EXISTS (
        SELECT 1 FROM cortex.entity_mentions m
        WHERE m.user_id = e.user_id AND m.entity_id = e.id AND {in_session("m.user_id", "m.note_id")}))
ORDER BY e.first_seen, e.name
"""

# Every mentioned entity of the user with its mentions (oldest first), in one statement.
ENTITY_TABLE = """
SELECT e.name, e.kind, e.first_seen, e.last_seen, e.frequency, e.contexts,
       ARRAY(SELECT CAST(m.note_id AS text) FROM cortex.entity_mentions m
             WHERE m.user_id = e.user_id AND m.entity_id = e.id
             ORDER BY m.mentioned_at, m.note_id) AS mentions
FROM cortex.entities e
WHERE e.user_id = :user_id AND e.frequency > 0
ORDER BY e.first_seen, e.name
"""

# The entity items of tenant :user_id matching {where} (a test on n, cortex.notes), by session:
# the sessions whose scope locks a delete of them takes first (store.sql.LOCK_SCOPES)
ITEM_SESSIONS = "SELECT DISTINCT n.session_id FROM cortex.notes n WHERE {where} ORDER BY 1"

# Delete those items of sessions :sessions (locked) and their STM rows; returns the places
# (session_id, created_at, seq) of the notes deleted, for their followers' context embeddings
# (MemoryStore.contexts_after_delete). Mentions, frequencies and relationships follow (trigger
# notes_forget_entities).
DELETE_ITEMS = """
WITH l AS (
    DELETE FROM cortex.notes n WHERE {where} AND n.session_id = ANY (CAST(:sessions AS text[]))
    RETURNING n.id, n.session_id, n.created_at, n.seq
), s AS (
    DELETE FROM cortex.stm_notes t WHERE t.user_id = :user_id AND t.id IN (SELECT id FROM l)
)
SELECT session_id, created_at, seq FROM l
"""
