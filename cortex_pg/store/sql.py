"""SQL statements of the repository layer, kept together so a reader can paste them into psql.

Rows travel as one ``jsonb`` array per statement (``jsonb_to_recordset``) so a batch of any
size is one round trip; vectors travel as text literals and are cast to ``vector``.
"""

from __future__ import annotations

NOTE_COLUMNS = (
    "id, user_id, session_id, content, keywords, tags, context, category, memory_type, metadata, "
    "importance, created_at, updated_at, last_accessed_at, access_count"
)

RECORDSET = """
jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
    id uuid, user_id text, session_id text, content text, keywords text[], tags text[],
    context text, category text, memory_type text, metadata jsonb, importance real,
    created_at timestamptz, embedding text)
"""

# The notes of each (user, session, content hash): current LTM notes ('ltm'), STM rows
# ('stm'), and for a note merged into another ('merged') the current note its merges lead to,
# which holds its text (the same text added again is that note, not a new one to merge again).
FIND_EXISTING = """
WITH RECURSIVE keys AS MATERIALIZED (
    SELECT k.user_id, k.session_id, k.content_hash
    FROM unnest(CAST(:users AS text[]), CAST(:sessions AS text[]), CAST(:hashes AS text[]))
         AS k(user_id, session_id, content_hash)
), found AS (
    -- current notes and merged ones apart, each by its partial index (uq_notes_content_hash,
    -- ix_notes_merged_content_hash): asked together, neither index answers, and the check read
    -- every note of the database
    SELECT n.user_id, n.session_id, n.content_hash, n.id, n.merged_into
    FROM keys k JOIN cortex.notes n
      ON n.user_id = k.user_id AND n.session_id = k.session_id AND n.content_hash = k.content_hash
    WHERE n.merged_into IS NULL
    UNION ALL
    SELECT n.user_id, n.session_id, n.content_hash, n.id, n.merged_into
    FROM keys k JOIN cortex.notes n
      ON n.user_id = k.user_id AND n.session_id = k.session_id AND n.content_hash = k.content_hash
    WHERE n.merged_into IS NOT NULL
), chain (user_id, session_id, content_hash, cur, depth) AS (
    SELECT f.user_id, f.session_id, f.content_hash, f.merged_into, 1 FROM found f WHERE f.merged_into IS NOT NULL
    UNION ALL
    SELECT c.user_id, c.session_id, c.content_hash, t.merged_into, c.depth + 1
    FROM chain c JOIN cortex.notes t ON t.user_id = c.user_id AND t.id = c.cur
    WHERE t.merged_into IS NOT NULL AND c.depth < 32
)
SELECT x.user_id, x.session_id, x.content_hash, x.id, x.tier
FROM (
    SELECT f.user_id, f.session_id, f.content_hash, f.id, 'ltm' AS tier FROM found f WHERE f.merged_into IS NULL
    UNION ALL
    SELECT c.user_id, c.session_id, c.content_hash, t.id, 'merged'
    FROM chain c JOIN cortex.notes t ON t.user_id = c.user_id AND t.id = c.cur AND t.merged_into IS NULL
    UNION ALL
    SELECT s.user_id, s.session_id, s.content_hash, s.id, 'stm'
    FROM keys k JOIN cortex.stm_notes s
      ON s.user_id = k.user_id AND s.session_id = k.session_id AND s.content_hash = k.content_hash
) x
"""

# The scope lock: a transaction-level advisory lock per (user, session), in sorted order. A
# writer takes it before it looks for duplicates and inserts (and evicts from STM); deleting STM
# rows takes it too (the stm_unmark_emptied trigger, to re-check that the scope is empty). The
# order of locks is therefore: scope locks, then LTM rows by id, then STM rows by id (see TOUCH).
# A transaction that deletes STM rows takes the scopes' locks before it changes or locks any
# row: taken by the trigger after its changes, the lock came after the tenant's BM25 counter row
# (cortex.bm25_corpus, updated by every note written or removed), which a writer holding the
# scope lock waits for, and the two deadlocked (an evolution merge beside concurrent writes of
# its session, a delete beside a write of the same scope).
LOCK_SCOPES = """
SELECT pg_advisory_xact_lock(hashtextextended(u || chr(31) || s, 0))
FROM (SELECT DISTINCT u, s FROM unnest(CAST(:users AS text[]), CAST(:sessions AS text[])) AS t(u, s)
      ORDER BY 1, 2) scopes
"""

# the scope locks of notes :ids of tenant :user_id (their sessions, in either tier), sorted
LOCK_NOTE_SCOPES = """
SELECT pg_advisory_xact_lock(hashtextextended(u || chr(31) || s, 0))
FROM (SELECT n.user_id AS u, n.session_id AS s FROM cortex.notes n
      WHERE n.user_id = :user_id AND n.id = ANY (CAST(:ids AS uuid[]))
      UNION
      SELECT m.user_id, m.session_id FROM cortex.stm_notes m
      WHERE m.user_id = :user_id AND m.id = ANY (CAST(:ids AS uuid[]))
      ORDER BY 1, 2) scopes
"""

# the sessions of tenant :u in STM, and in LTM too when :src is 'all' (delete_where)
USER_SESSIONS = """
SELECT n.session_id FROM cortex.notes n WHERE n.user_id = :u AND :src = 'all'
UNION
SELECT m.session_id FROM cortex.stm_notes m WHERE m.user_id = :u
ORDER BY 1
"""

# the size of a note's metadata as JSON text (characters), the larger of its two tiers
METADATA_SIZE = """
SELECT max(length(x.metadata::text)) FROM (
    SELECT metadata FROM cortex.notes WHERE user_id = :user_id AND id = :id
    UNION ALL
    SELECT metadata FROM cortex.stm_notes WHERE user_id = :user_id AND id = :id) x
"""

INSERT_NOTES = f"""
INSERT INTO cortex.notes (id, user_id, session_id, content, keywords, tags, context, category,
                          memory_type, metadata, importance, created_at)
SELECT r.id, r.user_id, r.session_id, r.content, r.keywords, r.tags, r.context, r.category,
       r.memory_type, r.metadata, r.importance, r.created_at
FROM {RECORDSET}
ON CONFLICT DO NOTHING
RETURNING id
"""

INSERT_STM = f"""
INSERT INTO cortex.stm_notes (id, user_id, session_id, content, keywords, tags, context, category,
                              memory_type, metadata, importance, created_at, model, embedding)
SELECT r.id, r.user_id, r.session_id, r.content, r.keywords, r.tags, r.context, r.category,
       r.memory_type, r.metadata, r.importance, r.created_at, :model, CAST(r.embedding AS vector)
FROM {RECORDSET}
ON CONFLICT DO NOTHING
RETURNING id, user_id, session_id
"""

# LRU eviction: keep the :capacity most recently accessed notes per (user_id, session_id), the
# notes this transaction inserted into STM (:written, every batch so far) first. Their
# last_accessed_at is the time their transaction began, so a touch committed meanwhile made them
# look least recently used, and the write evicted the notes it had just added.
TRIM_STM = """
WITH evicted AS MATERIALIZED (
    SELECT s.user_id, s.id
    FROM cortex.stm_notes s
    JOIN (
        SELECT t.user_id, t.id,
               row_number() OVER (PARTITION BY t.user_id, t.session_id
                                  ORDER BY t.id = ANY (CAST(:written AS uuid[])) DESC,
                                           t.last_accessed_at DESC, t.seq DESC) AS rn
        FROM cortex.stm_notes t
        JOIN (SELECT DISTINCT * FROM unnest(CAST(:users AS text[]), CAST(:sessions AS text[])))
             AS k(user_id, session_id)
          ON t.user_id = k.user_id AND t.session_id = k.session_id
    ) ranked ON s.user_id = ranked.user_id AND s.id = ranked.id
    WHERE ranked.rn > :capacity
    ORDER BY s.id FOR UPDATE OF s  -- the touching reads' order (cortex.touch_notes): no deadlock
)
DELETE FROM cortex.stm_notes s USING evicted e
WHERE s.user_id = e.user_id AND s.id = e.id
"""

# update(): lock the LTM row and re-read merged_into (a merge locks it FOR NO KEY UPDATE too)
LOCK_NOTE_FOR_UPDATE = """
SELECT merged_into, content FROM cortex.notes WHERE user_id = :user_id AND id = :id FOR NO KEY UPDATE
"""
# a note only in short-term memory: its one row, locked for update(content=...)
LOCK_STM_NOTE_FOR_UPDATE = """
SELECT content FROM cortex.stm_notes WHERE user_id = :user_id AND id = :id FOR NO KEY UPDATE
"""

GET_NOTE = f"""
SELECT {NOTE_COLUMNS}, 'ltm' AS memory_tier, merged_into, evolution_history
FROM cortex.notes WHERE id = :id AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)
UNION ALL
SELECT {NOTE_COLUMNS}, 'stm', NULL, '[]'::jsonb
FROM cortex.stm_notes WHERE id = :id AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)
"""

# A read that counts its notes as accessed (search, get with touch) writes only that bookkeeping,
# in a transaction of its own: its commit need not wait for the disk, so the statement that
# touches also sets synchronous_commit off for its transaction only (the same statement: no extra
# round trip). A server crash may lose the last fraction of a second of access counts; the
# database stays consistent. A search's commit otherwise waited for the WAL flush: 0.1-0.8 ms,
# and 150-250 ms when the disk was busy (timed from the client, 100,000-note store).
# Every touching read goes through cortex.touch_notes, which locks LTM rows, then STM rows, each
# in id order, so two touches of overlapping notes wait for each other rather than deadlock.
TOUCH = """
SELECT set_config('synchronous_commit', 'off', true) AS lazy_commit,
       cortex.touch_notes(:user_id, CAST(:ids AS uuid[]), 'all') AS touched
"""

# A writer that updates several notes of a tenant locks them first in the touching reads' order
# (LTM rows by id, then STM rows by id; see cortex.touch_notes), so that it waits for a touch
# of the same notes instead of deadlocking with it.
LOCK_NOTES = """
SELECT id FROM {table}
WHERE user_id = :user_id AND id = ANY (CAST(:ids AS uuid[]))
ORDER BY id FOR NO KEY UPDATE
"""
LOCK_LTM_NOTES = LOCK_NOTES.format(table="cortex.notes")
LOCK_STM_NOTES = LOCK_NOTES.format(table="cortex.stm_notes")
# delete_where: the notes of a user (and session, or sessions :ss) in one tier, locked for the
# delete in that order
LOCK_SCOPE_FOR_DELETE = """
SELECT id FROM {table}
WHERE user_id = :u AND (CAST(:s AS text) IS NULL OR session_id = :s)
  AND (CAST(:ss AS text[]) IS NULL OR session_id = ANY (CAST(:ss AS text[])))
ORDER BY id FOR UPDATE
"""

# the query without the names of the tenant's speakers it names (NULL: it names none; see
# Ranking.unnamed_query_weight)
QUERY_WITHOUT_SPEAKERS = "SELECT cortex.query_without_speakers(:user_id, :query) AS unnamed"
# one call of cortex.search_notes, its date window given as {date_from} / {date_to}
_SEARCH_CALL = """cortex.search_notes(
        p_user_id => :user_id,
        p_query_embedding => CAST(:embedding AS vector),
        p_query_text => :query,
        p_limit => :limit,
        p_temporal_weight => CAST(:temporal_weight AS real),
        p_date_from => {date_from},
        p_date_to => {date_to},
        p_filter => CAST(:where_filter AS jsonb),
        p_now => :now,
        p_session_id => :session_id,
        p_memory_source => :memory_source,
        p_model => :model,
        p_context_embedding => CAST(:context_embedding AS vector),
        p_query_entities => CAST(:query_entities AS text[]),
        p_entity_weight => CAST(:entity_weight AS real),
        p_expand_entities => :expand_entities,
        p_ranking => CAST(:ranking AS jsonb))"""
# the search's results touched (access counts, LRU) when :touch, in the same statement
_TOUCHED = """touched AS MATERIALIZED (
    SELECT CASE WHEN :touch THEN set_config('synchronous_commit', 'off', true) END AS lazy_commit,
           CASE WHEN :touch THEN cortex.touch_notes(:user_id, array_agg(h.id), 'all') END AS touched
    FROM hits h WHERE h.user_id = :user_id
)"""
SEARCH = f"""
WITH hits AS MATERIALIZED (
    SELECT * FROM {_SEARCH_CALL.format(date_from=":date_from", date_to=":date_to")}
), {_TOUCHED}
SELECT h.* FROM hits h CROSS JOIN touched ORDER BY h.score DESC, h.id
"""
# a query that names its dates (cortex_pg.temporal.query_date_window): the search within them
# (:focus_from, :focus_to: the named window, inside the caller's) and the search without, fused:
# score = (1 - :date_weight) * score + :date_weight for a note of the dated search (its score in
# that search), (1 - :date_weight) * score for the others; the best :limit of both
SEARCH_DATED = f"""
WITH dated AS MATERIALIZED (
    SELECT * FROM {_SEARCH_CALL.format(date_from=":focus_from", date_to=":focus_to")}
), whole AS MATERIALIZED (
    SELECT * FROM {_SEARCH_CALL.format(date_from=":date_from", date_to=":date_to")}
), both_searches AS (
    SELECT d.*, 1 AS in_window FROM dated d
    UNION ALL
    SELECT w.*, 0 FROM whole w WHERE w.id NOT IN (SELECT d.id FROM dated d)
), hits AS MATERIALIZED (
    SELECT b.id, b.user_id, b.session_id, b.memory_tier, b.content, b.keywords, b.tags, b.context,
           b.category, b.memory_type, b.metadata, b.importance, b.created_at, b.updated_at,
           b.last_accessed_at, b.access_count,
           (1 - CAST(:date_weight AS float8)) * b.score + CAST(:date_weight AS float8) * b.in_window AS score,
           b.relevance_score, b.semantic_score, b.distance, b.text_score, b.recency_score,
           b.vector_rank, b.text_rank, b.context_score, b.entity_score, b.entity_rank
    FROM both_searches b
    ORDER BY score DESC, b.id  -- (the output column: the fused score)
    LIMIT :limit
), {_TOUCHED}
SELECT h.* FROM hits h CROSS JOIN touched ORDER BY h.score DESC, h.id
"""

# a note of this tenant under this id, in either tier (merged notes too)
NOTE_ID_STORED = """
SELECT 1 FROM cortex.notes WHERE user_id = :user_id AND id = CAST(:id AS uuid)
UNION ALL
SELECT 1 FROM cortex.stm_notes WHERE user_id = :user_id AND id = CAST(:id AS uuid)
LIMIT 1
"""

# STM rows under caller-given ids that hold another text, or sit in another session
STM_ID_OTHER_TEXT = """
SELECT s.id FROM cortex.stm_notes s
JOIN unnest(CAST(:users AS text[]), CAST(:ids AS uuid[]), CAST(:sessions AS text[]), CAST(:hashes AS text[]))
     AS k(user_id, id, session_id, content_hash)
  ON s.user_id = k.user_id AND s.id = k.id
WHERE s.session_id <> k.session_id OR s.content_hash <> k.content_hash
LIMIT 1
"""

# add_many(bulk=True): one bulk load at a time per database (session advisory lock); the
# model's HNSW index is dropped only while the model has no embeddings, and rebuilt by
# cortex.register_embedding_model after the load.
LOCK_BULK_LOAD = "SELECT pg_advisory_lock(hashtextextended('cortex.bulk_load', 0))"
UNLOCK_BULK_LOAD = "SELECT pg_advisory_unlock(hashtextextended('cortex.bulk_load', 0))"
TRY_LOCK_BULK_LOAD = "SELECT pg_try_advisory_lock(hashtextextended('cortex.bulk_load', 0))"
MODEL_HAS_EMBEDDINGS = "SELECT 1 FROM cortex.embeddings WHERE model = :model LIMIT 1"
MODEL_INDEX = "SELECT index_name FROM cortex.embedding_models WHERE model = :model"
# the planner's estimate of the number of notes (0 before the first ANALYZE)
NOTES_ESTIMATE = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'cortex.notes'::regclass"
# the partitions of cortex.embeddings and their sizes (bytes), to build the largest index first
PARTITION_SIZES = """
SELECT n.nspname, c.relname, pg_relation_size(c.oid) AS bytes
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'cortex.embeddings'::regclass
"""

# Context embeddings. A note's context text is its predecessor's content, a newline, and its
# own content; the predecessor is the previous current note of the same user and session in
# (created_at, seq) order. For the notes just written (:ids, of tenant :user_id) the statement
# returns their own
# context texts, and those of the stored notes that follow them (an earlier-dated note inserted
# later changes its successor's context). A note without a predecessor has no context row.
# The notes' contents travel with them (no second lookup by id: joined, a tenant the planner's
# statistics did not know yet, a new one, had its notes scanned once per target, 211 ms for a
# batch of 256 notes of a 2,048-note tenant against 13 ms; probed, the planner picked whichever
# index starts with user_id, as it took the unknown tenant for one row).
CONTEXT_TEXTS = """
WITH fresh AS (
    SELECT n.user_id, n.session_id, n.id, n.created_at, n.seq, n.content
    FROM cortex.notes n
    WHERE n.user_id = :user_id AND n.id = ANY (CAST(:ids AS uuid[]))
), targets AS (
    SELECT f.user_id, f.session_id, f.id, f.created_at, f.seq, f.content FROM fresh f
    UNION
    SELECT nx.user_id, nx.session_id, nx.id, nx.created_at, nx.seq, nx.content
    FROM fresh f
    CROSS JOIN LATERAL (
        SELECT m.user_id, m.session_id, m.id, m.created_at, m.seq, m.content FROM cortex.notes m
        WHERE m.user_id = :user_id AND m.session_id = f.session_id AND m.merged_into IS NULL
          AND (m.created_at, m.seq) > (f.created_at, f.seq)
        ORDER BY m.created_at, m.seq LIMIT 1) nx
    WHERE nx.id <> ALL (CAST(:ids AS uuid[]))
)
SELECT t.user_id, t.session_id, t.id, p.content || E'\\n' || t.content AS context_text
FROM targets t
CROSS JOIN LATERAL (
    SELECT m.content FROM cortex.notes m
    WHERE m.user_id = :user_id AND m.session_id = t.session_id AND m.merged_into IS NULL
      AND (m.created_at, m.seq) < (t.created_at, t.seq)
    ORDER BY m.created_at DESC, m.seq DESC LIMIT 1) p
"""

# CONTEXT_TEXTS for a batch of many tenants (a bulk import): the pairs of :users and :ids
# (parallel arrays) in one statement instead of one per tenant. Each note is found by a
# primary-key probe (LATERAL ... LIMIT 1) rather than a join the planner may turn into a scan
# of every note. It reads several tenants, so on Citus it would go to every shard: there the
# store runs CONTEXT_TEXTS per tenant instead (see context_embeddings in writing.py).
CONTEXT_TEXTS_MANY = """
WITH fresh AS (
    SELECT n.user_id, n.session_id, n.id, n.created_at, n.seq
    FROM unnest(CAST(:users AS text[]), CAST(:ids AS uuid[])) AS k(user_id, id)
    CROSS JOIN LATERAL (  -- a primary-key probe per note
        SELECT n.user_id, n.session_id, n.id, n.created_at, n.seq FROM cortex.notes n
        WHERE n.user_id = k.user_id AND n.id = k.id LIMIT 1) n
), targets AS (
    SELECT f.user_id, f.session_id, f.id, f.created_at, f.seq FROM fresh f
    UNION
    SELECT nx.user_id, nx.session_id, nx.id, nx.created_at, nx.seq
    FROM fresh f
    CROSS JOIN LATERAL (
        SELECT m.user_id, m.session_id, m.id, m.created_at, m.seq FROM cortex.notes m
        WHERE m.user_id = f.user_id AND m.session_id = f.session_id AND m.merged_into IS NULL
          AND (m.created_at, m.seq) > (f.created_at, f.seq)
        ORDER BY m.created_at, m.seq LIMIT 1) nx
    WHERE NOT EXISTS (SELECT 1 FROM fresh g WHERE g.user_id = nx.user_id AND g.id = nx.id)
)
SELECT t.user_id, t.session_id, t.id, p.content || E'\\n' || n.content AS context_text
FROM targets t
CROSS JOIN LATERAL (
    SELECT n.content FROM cortex.notes n WHERE n.user_id = t.user_id AND n.id = t.id LIMIT 1) n
CROSS JOIN LATERAL (
    SELECT m.content FROM cortex.notes m
    WHERE m.user_id = t.user_id AND m.session_id = t.session_id AND m.merged_into IS NULL
      AND (m.created_at, m.seq) < (t.created_at, t.seq)
    ORDER BY m.created_at DESC, m.seq DESC LIMIT 1) p
ORDER BY t.user_id, t.created_at, t.seq
"""

# the context rows of notes :ids of tenant :user_id and model :model, before a COPY writes them
# anew (context_embeddings in writing.py)
DELETE_CONTEXT_EMBEDDINGS = """
DELETE FROM cortex.embeddings e
WHERE e.user_id = :user_id AND e.note_id = ANY (CAST(:ids AS uuid[])) AND e.model = :model
  AND e.kind = 'context' AND e.window_no = 0
"""

# A write that changes the embeddings of notes :ids (tenant :user_id) under model :model (their
# text, or their context: a note inserted before one, its predecessor deleted, its time changed)
# deletes their rows of every other model, so a back-fill of another model
# (cortex_pg.store.reembed) finds them missing and embeds them again as they now are, instead of
# keeping rows of an older text or context. First the shared side of the models' advisory lock
# (reembed.activate holds it exclusively from its catch-up to its switch, so a drop is never
# lost between the two) and a key-share lock on the notes (a back-fill batch holds them FOR
# UPDATE until it commits: the delete then sees its rows). The back-fill itself, which writes
# another model's rows beside the active one's, deletes nothing.
LOCK_FOR_MODEL_DROP = """
SELECT pg_advisory_xact_lock_shared(hashtextextended('cortex.embedding_models', 0)),
       (SELECT count(*) FROM (SELECT 1 FROM cortex.notes n
                              WHERE n.user_id = :user_id AND n.id = ANY (CAST(:ids AS uuid[]))
                              ORDER BY n.id FOR KEY SHARE) locked)
"""
DROP_OTHER_MODEL_ROWS = """
DELETE FROM cortex.embeddings e
WHERE e.user_id = :user_id AND e.note_id = ANY (CAST(:ids AS uuid[])) AND e.model <> :model
"""

INSERT_CONTEXT_EMBEDDINGS = """
INSERT INTO cortex.embeddings (user_id, note_id, model, kind, window_no, session_id, embedding)
SELECT r.user_id, r.id, :model, 'context', 0, r.session_id, CAST(r.embedding AS vector)
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(user_id text, id uuid, session_id text, embedding text)
ON CONFLICT (user_id, note_id, model, kind, window_no)
DO UPDATE SET embedding = EXCLUDED.embedding, created_at = now()
"""

# The current note that follows :id (of tenant :u) in its session ((created_at, seq) order).
NEXT_IN_SESSION = """
SELECT m.user_id, m.id FROM cortex.notes n
CROSS JOIN LATERAL (
    SELECT m.user_id, m.id FROM cortex.notes m
    WHERE m.user_id = :u AND m.session_id = n.session_id AND m.merged_into IS NULL
      AND (m.created_at, m.seq) > (n.created_at, n.seq)
    ORDER BY m.created_at, m.seq LIMIT 1) m
WHERE n.user_id = :u AND n.id = :id
"""

# The current notes of tenant :u that follow the places of deleted notes (parallel arrays
# :sessions, :times, :seqs: each a deleted note's session_id, created_at, seq), each once: the
# first current note after each place in its session, whose predecessor the delete changed.
NEXT_AFTER_PLACES = """
SELECT DISTINCT nx.id FROM unnest(CAST(:sessions AS text[]), CAST(:times AS timestamptz[]),
                                  CAST(:seqs AS bigint[])) AS g(session_id, created_at, seq)
CROSS JOIN LATERAL (
    SELECT m.id FROM cortex.notes m
    WHERE m.user_id = :u AND m.session_id = g.session_id AND m.merged_into IS NULL
      AND (m.created_at, m.seq) > (g.created_at, g.seq)
    ORDER BY m.created_at, m.seq LIMIT 1) nx
"""

# the context rows (every model) of notes :ids of tenant :u, before they are written anew
DROP_CONTEXT_ROWS = """
DELETE FROM cortex.embeddings WHERE user_id = :u AND note_id = ANY (CAST(:ids AS uuid[])) AND kind = 'context'
"""

# The tenant a note id is registered to (cortex.note_ids), for by-id calls without a user_id.
ID_OWNER = "SELECT user_id FROM cortex.note_ids WHERE id = :id"
