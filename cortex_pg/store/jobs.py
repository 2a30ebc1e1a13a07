"""The durable evolution queue: rows of ``cortex.evolution_jobs``.

Enqueue happens in the caller's transaction (the one that inserts the notes), so a note and
its job commit or roll back together. A worker takes jobs in a short transaction
(``SELECT ... FOR UPDATE SKIP LOCKED``: status ``running``, ``locked_by``/``locked_at`` set,
``attempts`` + 1) and finishes each one in the transaction that writes its effects
(:func:`finish`), guarded by its lease: if the lock was taken over meanwhile, the finish
updates no row and the effects are rolled back with it. A job whose lock is older than the
lock timeout (its worker died) is taken again; after ``max_attempts`` it is ``failed``.

Channel: every enqueue sends ``NOTIFY cortex_evolution`` (delivered at commit) so idle
workers can wake at once; polling stays the fallback.

Cross-tenant by design: workers serve every user, so the take statement is the one query that
does not filter on ``user_id`` (it reads the small partial indexes of ready and locked jobs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

CHANNEL = "cortex_evolution"
DEFAULT_KIND = "evolve"
#: a note of the Prem Cortex API: its analysis (AgenticMemorySystem), then its evolution; taken
#: only by a worker that runs that analysis (``AgenticMemorySystem.job_worker``,
#: ``cortex-pg worker --prem``), so that a plain worker never ends one without it
PREM_KIND = "prem"
#: the kinds of job that evolve a note
NOTE_KINDS = (DEFAULT_KIND, PREM_KIND)
COLLECTION_KIND = "collection"  # create or refresh the collection at ``collection_path`` (no note)
DEFAULT_MAX_ATTEMPTS = 5

# A note whose job is queued gets nothing more (the job will read the note as it is then); one
# whose job is running marks it run_again (the job read the note before this change), and the
# job's end queues it again (FINISH, FAIL, REAP).
ENQUEUE = """
WITH new_jobs AS (
    INSERT INTO cortex.evolution_jobs (user_id, note_id, kind, max_attempts)
    SELECT k.user_id, k.note_id, :kind, :max_attempts
    FROM unnest(CAST(:users AS text[]), CAST(:ids AS uuid[])) WITH ORDINALITY AS k(user_id, note_id, n)
    GROUP BY k.user_id, k.note_id ORDER BY min(k.n)  -- each note once (DO UPDATE), in the given order
    ON CONFLICT (user_id, note_id, kind) WHERE status IN ('queued', 'running')
    DO UPDATE SET run_again = true, updated_at = now() WHERE evolution_jobs.status = 'running'
    RETURNING run_again
)
SELECT count(*) FILTER (WHERE NOT run_again) AS n FROM new_jobs
"""

# Jobs whose worker died too often: give up on them (the take below skips them afterwards).
REAP = """
UPDATE cortex.evolution_jobs
SET status = CASE WHEN run_again THEN 'queued' ELSE 'failed' END,
    max_attempts = CASE WHEN run_again THEN attempts + max_attempts ELSE max_attempts END,
    run_after = CASE WHEN run_again THEN now() ELSE run_after END,
    run_again = false, locked_by = NULL, updated_at = now(),
    error = coalesce(error || E'\\n', '')
            || format('lock of worker %s expired (older than %s s) on attempt %s of %s',
                      locked_by, :lock_timeout, attempts, max_attempts)
WHERE status = 'running' AND locked_at < now() - make_interval(secs => :lock_timeout)
  AND attempts >= max_attempts
"""

TAKE = """
WITH picked AS (
    SELECT j.user_id, j.id
    FROM cortex.evolution_jobs j
    WHERE ((j.status = 'queued' AND j.run_after <= now())
        OR (j.status = 'running' AND j.locked_at < now() - make_interval(secs => :lock_timeout)))
      AND (CAST(:kinds AS text[]) IS NULL OR j.kind = ANY(CAST(:kinds AS text[])))
      AND (CAST(:note_ids AS uuid[]) IS NULL OR j.note_id = ANY(CAST(:note_ids AS uuid[])))
      AND (CAST(:user_id AS text) IS NULL OR j.user_id = :user_id)
    ORDER BY j.run_after, j.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE cortex.evolution_jobs j
SET status = 'running', locked_by = :worker, locked_at = now(), attempts = j.attempts + 1,
    updated_at = now()
FROM picked
WHERE j.user_id = picked.user_id AND j.id = picked.id
RETURNING j.user_id, j.id, j.note_id, j.kind, j.attempts, j.max_attempts, j.locked_at, j.collection_path
"""

# done, or queued again when it was asked for again while it ran: its attempts keep counting (a
# lease is a worker and an attempt number, which must not come back), and its budget grows by
# the attempts used, so the new run has max_attempts of its own
FINISH = """
UPDATE cortex.evolution_jobs
SET status = CASE WHEN run_again THEN 'queued' ELSE 'done' END,
    max_attempts = CASE WHEN run_again THEN attempts + max_attempts ELSE max_attempts END,
    run_after = CASE WHEN run_again THEN now() ELSE run_after END,
    run_again = false, locked_by = NULL, locked_at = NULL, error = NULL,
    result = CAST(:result AS jsonb), updated_at = now()
WHERE user_id = :user_id AND id = :id AND status = 'running' AND locked_by = :worker AND attempts = :attempts
RETURNING status
"""

# whether this attempt still holds the job: 1 held, 0 taken over, no row gone (deleted with its note)
LEASE = """
SELECT (status = 'running' AND locked_by = :worker AND attempts = :attempts)::int
FROM cortex.evolution_jobs WHERE user_id = :user_id AND id = :id
"""

# Back to the queue with run_after = now() + backoff, or failed for good after max_attempts.
FAIL = """
UPDATE cortex.evolution_jobs
SET status = CASE WHEN attempts >= max_attempts AND NOT run_again THEN 'failed' ELSE 'queued' END,
    run_after = CASE WHEN run_again THEN now()
                     WHEN attempts >= max_attempts THEN run_after
                     ELSE now() + make_interval(secs => :backoff) END,
    max_attempts = CASE WHEN run_again THEN attempts + max_attempts ELSE max_attempts END,
    run_again = false, locked_by = NULL, locked_at = NULL, error = :error, updated_at = now()
WHERE user_id = :user_id AND id = :id AND status = 'running' AND locked_by = :worker AND attempts = :attempts
RETURNING status
"""

RETRY_FAILED = """
UPDATE cortex.evolution_jobs
SET status = 'queued', attempts = 0, run_after = now(), locked_by = NULL, locked_at = NULL,
    updated_at = now()
WHERE status = 'failed' AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)
  AND NOT EXISTS (
      SELECT 1 FROM cortex.evolution_jobs a
      WHERE a.user_id = evolution_jobs.user_id AND a.note_id IS NOT DISTINCT FROM evolution_jobs.note_id
        AND a.collection_path IS NOT DISTINCT FROM evolution_jobs.collection_path
        AND a.kind = evolution_jobs.kind AND a.status IN ('queued', 'running'))
  AND id = (
      SELECT max(f.id) FROM cortex.evolution_jobs f
      WHERE f.user_id = evolution_jobs.user_id AND f.note_id IS NOT DISTINCT FROM evolution_jobs.note_id
        AND f.collection_path IS NOT DISTINCT FROM evolution_jobs.collection_path
        AND f.kind = evolution_jobs.kind AND f.status = 'failed')
RETURNING id
"""

COUNTS = """
SELECT s.status, count(j.id) AS n
FROM unnest(ARRAY['queued', 'running', 'done', 'failed']) AS s(status)
LEFT JOIN cortex.evolution_jobs j
  ON j.status = s.status AND (CAST(:user_id AS text) IS NULL OR j.user_id = :user_id)
GROUP BY s.status
UNION ALL
SELECT 'run_again', count(*) FROM cortex.evolution_jobs j
WHERE j.status = 'running' AND j.run_again AND (CAST(:user_id AS text) IS NULL OR j.user_id = :user_id)
UNION ALL
SELECT 'prem_queued', count(*) FROM cortex.evolution_jobs j
WHERE j.status = 'queued' AND j.kind = 'prem' AND (CAST(:user_id AS text) IS NULL OR j.user_id = :user_id)
"""


@dataclass(frozen=True, slots=True)
class Job:
    """A job taken by a worker (its lease).

    Attributes:
        note_id: the note of an ``evolve`` job; None for a ``collection`` job.
        attempts: this attempt's number, 1-based (incremented when taken).
        locked_at: when the lease started (aware UTC).
        collection_path: the category prefix of a ``collection`` job, else None.
    """

    user_id: str
    id: int
    note_id: uuid.UUID | None
    kind: str
    attempts: int
    max_attempts: int
    locked_at: datetime
    worker: str
    collection_path: str | None = None


def enqueue(
    conn: Connection,
    user_ids: Sequence[str],
    note_ids: Sequence[uuid.UUID | str],
    *,
    kind: str = DEFAULT_KIND,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> int:
    """Queue one job per note in the caller's transaction, and notify :data:`CHANNEL` at commit.

    A note that already has a queued job of this kind gets no second one (that job reads the
    note when it runs). One whose job is running marks it ``run_again``: the job read the note
    before this change, so its end queues it again instead of ending it (:func:`finish`,
    :func:`fail`).

    Args:
        conn: a connection inside the transaction that inserted the notes.
        user_ids, note_ids: parallel sequences, one entry per note.
        kind: job kind (``"evolve"``).
        max_attempts: attempts before the job stays ``failed``, >= 1.

    Returns:
        The number of jobs created.
    """
    if len(user_ids) != len(note_ids):
        raise ValueError("user_ids and note_ids must have the same length")
    if not note_ids:
        return 0
    row = conn.execute(
        text(ENQUEUE),
        {
            "users": list(user_ids),
            "ids": [str(i) for i in note_ids],
            "kind": kind,
            "max_attempts": max_attempts,
        },
    ).one()
    if row.n:
        _notify(conn)
    return int(row.n)


def _notify(conn: Connection) -> None:
    """Wake idle workers at commit (``NOTIFY`` :data:`CHANNEL`)."""
    conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})


def take(
    conn: Connection,
    worker: str,
    *,
    limit: int = 1,
    lock_timeout: float = 300.0,
    kinds: Sequence[str] | None = None,
    note_ids: Sequence[uuid.UUID | str] | None = None,
    user_id: str | None = None,
) -> list[Job]:
    """Take up to ``limit`` ready jobs for ``worker``; commit right after so the lease is visible.

    Ready: queued with ``run_after <= now()``, or running with a lock older than
    ``lock_timeout`` seconds (a dead worker's). Jobs locked by another transaction are
    skipped (``FOR UPDATE SKIP LOCKED``), so concurrent takers never get the same job.
    Expired jobs that used all their attempts are marked failed first.

    Args:
        worker: the taker's id (stored in ``locked_by``).
        lock_timeout: seconds after which a running job's lock counts as abandoned.
        kinds / note_ids / user_id: restrict to jobs of these kinds / notes / this user (None =
            any); inline processing takes the jobs of the notes it has just added.

    Returns:
        The jobs taken, oldest ``run_after`` first.
    """
    conn.execute(text(REAP), {"lock_timeout": lock_timeout})
    rows = conn.execute(
        text(TAKE),
        {
            "worker": worker,
            "limit": limit,
            "lock_timeout": lock_timeout,
            "kinds": list(kinds) if kinds is not None else None,
            "note_ids": [str(i) for i in note_ids] if note_ids is not None else None,
            "user_id": user_id,
        },
    ).all()
    return [
        Job(
            r.user_id,
            r.id,
            r.note_id,
            r.kind,
            r.attempts,
            r.max_attempts,
            r.locked_at,
            worker,
            r.collection_path,
        )
        for r in rows
    ]


def finish(conn: Connection, job: Job, result: dict[str, Any]) -> bool:
    """Mark ``job`` done inside the transaction that wrote its effects (queued again, with
    a fresh budget of attempts, when it was asked for again while it ran: see :func:`enqueue`).

    Returns:
        False when the lease was lost (the job was taken over after the lock timeout); the
        caller must then roll the transaction back so the effects are not written twice.
    """
    row = conn.execute(
        text(FINISH),
        {
            "user_id": job.user_id,
            "id": job.id,
            "worker": job.worker,
            "attempts": job.attempts,
            "result": json.dumps(result),
        },
    ).first()
    if row is not None and row.status == "queued":  # asked for again while it ran
        _notify(conn)
    return row is not None


def lease(conn: Connection, job: Job) -> str:
    """Whether this attempt still holds ``job``: ``"held"``, ``"lost"`` (taken over after the
    lock timeout, or finished by another worker) or ``"gone"`` (the row is deleted: a job goes
    with its note)."""
    held = conn.execute(
        text(LEASE),
        {"user_id": job.user_id, "id": job.id, "worker": job.worker, "attempts": job.attempts},
    ).scalar_one_or_none()
    return "gone" if held is None else "held" if held else "lost"


def backoff_seconds(attempts: int, base: float = 2.0, cap: float = 600.0) -> float:
    """Delay before attempt ``attempts + 1``: ``min(cap, base * 2 ** (attempts - 1))`` seconds."""
    return float(min(cap, base * 2 ** max(0, attempts - 1)))


def fail(conn: Connection, job: Job, error: str, *, backoff: float) -> str | None:
    """Record a failed attempt: back to ``queued`` after ``backoff`` seconds, or ``failed``
    (back to ``queued`` at once, with a fresh budget of attempts, when it was asked for again while it ran).

    Returns:
        The new status, or None when the lease was lost (nothing changed).
    """
    row = conn.execute(
        text(FAIL),
        {
            "user_id": job.user_id,
            "id": job.id,
            "worker": job.worker,
            "attempts": job.attempts,
            "error": error[:10_000],
            "backoff": backoff,
        },
    ).first()
    return None if row is None else row.status


def retry_failed(conn: Connection, *, user_id: str | None = None) -> int:
    """Queue failed jobs again (attempts reset to 0); returns how many were re-queued."""
    return len(conn.execute(text(RETRY_FAILED), {"user_id": user_id}).all())


def counts(conn: Connection, *, user_id: str | None = None) -> dict[str, int]:
    """Jobs per status (``queued``, ``running``, ``done``, ``failed``; zeros included), and
    ``run_again``: how many of the running jobs were asked for again while they run (each goes
    back to the queue when its run ends), and ``prem_queued``: how many queued jobs are of kind
    ``prem`` (a worker that runs the Prem Cortex analysis takes them)."""
    return {r.status: int(r.n) for r in conn.execute(text(COUNTS), {"user_id": user_id})}
