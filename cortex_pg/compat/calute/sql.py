"""SQL of the calute facade, kept together so a reader can paste it into psql.

``{table}`` is ``cortex.notes`` or ``cortex.stm_notes`` (aliased ``n``), ``{where}`` a
where_filter compiled by ``cortex.compile_filter`` (:mod:`cortex_pg.store.filters`) (values quoted by the
server), ``{scope}`` the scope test below. Values are always bound.
"""

from __future__ import annotations

from cortex_pg.store.sql import NOTE_COLUMNS

COLUMNS = ", ".join(f"n.{c.strip()}" for c in NOTE_COLUMNS.split(","))

SCOPE = "n.user_id = :user_id AND n.session_id = :session_id AND n.memory_type = :memory_type"

# LTM score of the calute LongTermMemory (keyword path weights of calute's long_term_memory.py):
#   0.5 * relevance + 0.3 * min(1, max(0, 1 - age_days / retention_days)) + 0.2 * importance
# (at most 1: an item dated in the future is as recent as one written now; its age used to make
# the recency, and the score, far above 1)
LTM_RECENCY = (
    "least(1, greatest(0, 1 - extract(epoch FROM (now() - {a}.created_at)) / 86400.0 / :retention_days))"
)
LTM_SCORE = "(0.5 * {rel} + 0.3 * " + LTM_RECENCY + " + 0.2 * {a}.importance)"

ORDERS = {
    "newest": "n.created_at DESC, {tiebreak} DESC",
    "oldest": "n.created_at, {tiebreak}",
    "ltm_score": LTM_SCORE.format(rel="1.0", a="n") + " DESC, n.created_at DESC, n.id",
}

LIST = """
SELECT {cols}, '{tier}' AS memory_tier FROM {table} n
WHERE {scope} AND ({where}) {live}
ORDER BY {order}
LIMIT :limit
"""

# the store's TOUCH for one tier (:tier, the shelf's: ltm or stm); see there
TOUCH = """
SELECT set_config('synchronous_commit', 'off', true) AS lazy_commit,
       cortex.touch_notes(:user_id, CAST(:ids AS uuid[]), :tier) AS touched
"""

# The deletes below lock their rows in id order first (FOR UPDATE in a materialised CTE), the
# order of the touching reads (cortex.touch_notes), so that a delete beside a touching read of the
# same items waits for it, or it for the delete, and never deadlocks (in its plan's order, a
# multi-row delete could). Each returns the places (session_id, created_at, seq) of the LTM notes
# it deleted, whose followers' context embeddings the store then writes anew
# (MemoryStore.contexts_after_delete), in the delete's transaction.
DELETE = """
WITH doomed AS MATERIALIZED (
    SELECT n.id FROM {table} n WHERE {scope} AND ({where}) AND (CAST(:id AS uuid) IS NULL OR n.id = :id)
    ORDER BY n.id FOR UPDATE
), gone AS (
    DELETE FROM {table} n USING doomed d WHERE n.user_id = :user_id AND n.id = d.id
    RETURNING n.id, n.session_id, n.created_at, n.seq
)
SELECT id::text AS id, session_id, created_at, seq FROM gone ORDER BY id
"""

COUNT = "SELECT count(*) FROM {table} n WHERE {scope} {live}"
HOLDS_TEXT = (
    "SELECT EXISTS (SELECT 1 FROM {table} n WHERE n.user_id = :user_id AND n.session_id = :session_id "
    "AND n.content_hash = :h {live})"
)

# hybrid search of the LTM shelf, re-scored with importance and recency (weights above); a
# query that names a day or month (:focus_from, :focus_to; NULL for none) is searched within it
# too, and a note of that window weighs (1 - :date_weight) * relevance + :date_weight, any other
# (1 - :date_weight) * relevance (as MemoryStore.search's named dates)
_LTM_CALL = """cortex.search_notes(
        p_user_id => :user_id,
        p_query_embedding => CAST(:embedding AS vector),
        p_query_text => :query,
        p_limit => :pool,
        p_date_from => {date_from},
        p_date_to => {date_to},
        p_filter => CAST(:filter AS jsonb),
        p_session_id => :session_id,
        p_memory_source => 'ltm',
        p_model => :model)"""
LTM_SEARCH = (
    """
WITH dated AS MATERIALIZED (
    SELECT * FROM """
    + _LTM_CALL.format(date_from="CAST(:focus_from AS timestamptz)", date_to="CAST(:focus_to AS timestamptz)")
    + """
    WHERE CAST(:focus_from AS timestamptz) IS NOT NULL
), whole AS MATERIALIZED (
    SELECT * FROM """
    + _LTM_CALL.format(date_from="NULL", date_to="NULL")
    + """
), hits AS MATERIALIZED (
    SELECT d.*, (1 - CAST(:date_weight AS float8)) * d.relevance_score + CAST(:date_weight AS float8) AS rel
    FROM dated d
    UNION ALL
    SELECT w.*, (1 - CAST(:date_weight AS float8)) * w.relevance_score
    FROM whole w WHERE w.id NOT IN (SELECT d.id FROM dated d)
), scored AS (
    SELECT h.*, """
    + LTM_SCORE.format(rel="h.rel", a="h")
    + """ AS ltm_score FROM hits h
), top AS (
    SELECT * FROM scored ORDER BY ltm_score DESC, id LIMIT :limit
), touched AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS lazy_commit,
           cortex.touch_notes(:user_id, array_agg(t.id), 'ltm') AS touched
    FROM top t
)
SELECT t.* FROM top t CROSS JOIN touched ORDER BY t.ltm_score DESC, t.id
"""
)

# whether a note id of the user is stored in either tier (a save whose item is not on its shelf:
# a duplicate of another store's item, or removed by a concurrent delete)
STORED_ANYWHERE = (
    "SELECT EXISTS (SELECT 1 FROM cortex.notes WHERE user_id = :user_id AND id = :id AND merged_into IS NULL)"
    " OR EXISTS (SELECT 1 FROM cortex.stm_notes WHERE user_id = :user_id AND id = :id)"
)

LOCK_SCOPE = "SELECT pg_advisory_xact_lock(hashtextextended(:user_id || chr(31) || :session_id, 0))"

# calute's cleanup, in one statement so that its row locks are taken in one pass, in id order:
# retention (the memory's own time is older than retention_days), then capacity among the items
# left: keep the best :keep by calute's cleanup score
#   0.3 * importance + 0.3 * access_count / 100 + 0.4 * min(1, 1 - age_days / retention_days)
# so the oldest, least important, least accessed go first
# (:spare, a content hash or NULL: an item the cleanup leaves, the one a save just wrote)
CLEANUP = """
WITH live AS (
    SELECT n.id, n.importance, n.access_count, n.created_at,
           n.created_at < now() - CAST(:retention_days AS float8) * interval '1 day' AS expired
    FROM cortex.notes n
    WHERE {scope} AND n.merged_into IS NULL AND n.content_hash IS DISTINCT FROM CAST(:spare AS text)
), ranked AS (
    SELECT l.id, l.expired, row_number() OVER (
        PARTITION BY l.expired
        ORDER BY 0.3 * l.importance + 0.3 * l.access_count / 100.0
                 + 0.4 * least(1, 1 - extract(epoch FROM (now() - l.created_at)) / 86400.0 / :retention_days) DESC,
                 l.created_at DESC, l.id DESC) AS rn
    FROM live l
), doomed AS MATERIALIZED (
    SELECT n.id, r.expired FROM cortex.notes n JOIN ranked r ON n.user_id = :user_id AND n.id = r.id
    WHERE r.expired OR r.rn > :keep
    ORDER BY n.id FOR UPDATE OF n
), gone AS (
    DELETE FROM cortex.notes n USING doomed d WHERE n.user_id = :user_id AND n.id = d.id
    RETURNING n.id, d.expired, n.session_id, n.created_at, n.seq
)
SELECT id, expired, session_id, created_at, seq FROM gone ORDER BY id
"""

# pairs of similar LTM items: |words(a) & words(b)| / max(|words(a)|, |words(b)|) >= threshold,
# a (the keeper) the longer text (ties: the smaller id); words = lowercased, whitespace-split.
# Candidate pairs by prefix filtering (Bayardo, Ma and Srikant, "Scaling up all pairs similarity
# search", WWW 2007; Xiao et al., "Efficient similarity joins for near duplicate detection",
# WWW 2008): with every item's words ordered rarest first (by their number of items in the
# scope, then the word), two items whose overlap reaches t * max(|a|, |b|) share a word among
# the first |x| - ceil(t * |x|) + 1 words of each x, so only items sharing such a word are
# compared, and each candidate pair is then checked exactly. A common word ("the") pairs items
# only when it is among an item's rarest words; the cost follows the number of near-duplicate
# candidates instead of the square of the scope's size.
SIMILAR_PAIRS = """
WITH w AS MATERIALIZED (
    SELECT n.id, char_length(n.content) AS len,
           ARRAY(SELECT DISTINCT t FROM regexp_split_to_table(lower(btrim(n.content)), '\\s+') AS t) AS words
    FROM cortex.notes n WHERE {scope} AND n.merged_into IS NULL
),
tok AS MATERIALIZED (
    SELECT w.id, x.word, cardinality(w.words) AS size FROM w, unnest(w.words) AS x(word)
),
freq AS (SELECT word, count(*) AS df FROM tok GROUP BY word),
ranked AS (
    SELECT t.id, t.word, t.size,
           row_number() OVER (PARTITION BY t.id ORDER BY f.df, t.word) AS pos
    FROM tok t JOIN freq f USING (word)
),
prefix AS MATERIALIZED (
    SELECT id, word FROM ranked
    WHERE pos <= size - ceil(CAST(:threshold AS float8) * size - 1e-9) + 1
),
candidates AS (
    SELECT DISTINCT p.id AS a_id, q.id AS b_id FROM prefix p JOIN prefix q ON q.word = p.word AND q.id <> p.id
)
SELECT a.id AS keep_id, b.id AS drop_id
FROM candidates c
JOIN w a ON a.id = c.a_id
JOIN w b ON b.id = c.b_id
WHERE (a.len > b.len OR (a.len = b.len AND a.id < b.id))
  AND (SELECT count(*) FROM (SELECT unnest(a.words) INTERSECT SELECT unnest(b.words)) x)::float8
      / greatest(cardinality(a.words), cardinality(b.words)) >= :threshold
ORDER BY a.len DESC, a.id, b.id
"""

# the dropped item is marked merged (kept for history; search and counts skip it); the keeper
# takes the larger importance and the sum of the access counts (calute's merge rule)
# (the dropped item is deleted, as calute removes it: marked merged_into the keeper, which does
# not hold its text, saving that text again found the keeper and stored nothing); returns the
# dropped item's place (session_id, created_at, seq), as the deletes above
MERGE = """
WITH src AS (
    DELETE FROM cortex.notes n
    WHERE n.user_id = :user_id AND n.id = :drop_id AND n.merged_into IS NULL
    RETURNING n.importance, n.access_count, n.metadata->'importance' AS item_importance,
              n.session_id, n.created_at, n.seq
), kept AS (
    UPDATE cortex.notes k
    SET importance = greatest(k.importance, src.importance), access_count = k.access_count + src.access_count,
        -- the item's importance as calute reads it (metadata), the larger too
        metadata = CASE WHEN jsonb_typeof(src.item_importance) = 'number'
                             AND (jsonb_typeof(k.metadata->'importance') IS DISTINCT FROM 'number'
                                  OR src.item_importance::numeric > (k.metadata->'importance')::numeric)
                        THEN jsonb_set(k.metadata, '{importance}', src.item_importance)
                        ELSE k.metadata END
    FROM src WHERE k.user_id = :user_id AND k.id = :keep_id
    RETURNING k.id
)
SELECT session_id, created_at, seq FROM src
"""

CONTEXT_PUSH = (
    "SELECT type, data, pushed_at FROM cortex.context_push(:user_id, :scope, :type, CAST(:data AS jsonb))"
)
CONTEXT_POP = "SELECT type, data, pushed_at FROM cortex.context_pop(:user_id, :scope)"
CONTEXT_PEEK = "SELECT type, data, pushed_at FROM cortex.context_peek(:user_id, :scope)"
CONTEXT_FRAMES = (
    "SELECT type, data, pushed_at FROM cortex.context_frames "
    "WHERE user_id = :user_id AND scope = :scope ORDER BY depth"
)
CONTEXT_CLEAR = "DELETE FROM cortex.context_frames WHERE user_id = :user_id AND scope = :scope"

PREFERENCES_GET = "SELECT preferences FROM cortex.user_preferences WHERE user_id = :user_id"
PREFERENCES_MERGE = """
INSERT INTO cortex.user_preferences AS p (user_id, preferences) VALUES (:user_id, CAST(:patch AS jsonb))
ON CONFLICT (user_id) DO UPDATE SET preferences = p.preferences || EXCLUDED.preferences, updated_at = now()
RETURNING preferences
"""
PREFERENCES_ROW = "SELECT preferences FROM cortex.user_preferences WHERE user_id = :user_id"
PREFERENCES_ALL = "SELECT user_id, preferences FROM cortex.user_preferences ORDER BY user_id"
# a user becomes known (calute's get_or_create_user_memory stored the defaults)
PREFERENCES_KNOW = (
    "INSERT INTO cortex.user_preferences (user_id) VALUES (:user_id) ON CONFLICT (user_id) DO NOTHING"
)
PREFERENCES_DELETE = "DELETE FROM cortex.user_preferences WHERE user_id = :user_id"

# distinct entities mentioned by the entity notes of one (user, session)
SCOPE_ENTITIES = """
SELECT e.name FROM cortex.entities e
WHERE e.user_id = :user_id AND e.frequency > 0 AND EXISTS (
    SELECT 1 FROM cortex.entity_mentions m JOIN cortex.notes n ON n.user_id = m.user_id AND n.id = m.note_id
    WHERE m.user_id = e.user_id AND m.entity_id = e.id AND n.session_id = :session_id
      AND n.memory_type = 'entity')
ORDER BY e.frequency DESC, e.name
"""
