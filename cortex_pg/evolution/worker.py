"""Evolution workers: threads in the process, or a standalone blocking worker.

Jobs of kind ``evolve`` evolve one note; jobs of kind ``collection`` create or refresh one smart
collection (:func:`cortex_pg.collections.refresh.refresh_collection`), queued by the category
count triggers.

Each thread loops: take one job (short transaction, committed lease), run it in a second
transaction that writes its effects and marks it done (:func:`queue.finish`, guarded by the
lease), or on error roll that back and record the failure with exponential backoff
(``min(backoff_cap, backoff_base * 2 ** (attempts - 1))`` seconds).

An ``evolve`` job asks a slow decider (an LLM call; any decider without a true ``instant``
attribute) before that transaction, on the note's neighbourhood read in a short one of its own,
so it holds no row lock that searches touching those notes would wait for; the job applies the
decision if the notes it was shown are unchanged once locked, else reads and decides again;
after :data:`STALE_DECISIONS` dropped answers the next is asked with the note and the notes
shown locked (see :func:`~cortex_pg.evolution.evolve.evolve_note`). Before each answer the
lease is checked: a job taken over is not asked about again, a job deleted with its note ends.
An instant decider (the offline heuristic) is asked inside the job's transaction, which saves a
transaction per job.

When no job is ready a thread sleeps until ``NOTIFY cortex_evolution`` (one ``LISTEN``
connection per worker) or ``poll_interval`` seconds, whichever comes first; with LISTEN
unavailable it just polls.

Nothing lives only in memory: a killed worker leaves its job ``running`` with an old
``locked_at`` and no effects (its transaction never committed); after ``lock_timeout``
seconds another worker takes it again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cortex_pg.collections.refresh import Describer, refresh_collection
from cortex_pg.db.retry import call_retrying
from cortex_pg.errors import translate_db_errors
from cortex_pg.evolution.decide import Decider, heuristic_decider
from cortex_pg.evolution.evolve import (
    DEFAULT_K,
    Decided,
    StaleDecision,
    decide,
    evolve_note,
    read_neighbourhood,
)
from cortex_pg.store import jobs as queue

if TYPE_CHECKING:
    from cortex_pg.store.memory_store import MemoryStore

log = logging.getLogger(__name__)

#: answers of a slow decider, asked outside the job's transaction, that an ``evolve`` job may
#: drop because a note it was shown changed before the job locked it; the next answer is asked
#: with the note and the notes shown locked
STALE_DECISIONS = 3


class LeaseLost(Exception):
    """The job's lock expired and another worker took it; this attempt's effects are rolled back."""


@dataclass
class WorkerStats:
    """Counters of one :class:`Worker` (all threads)."""

    done: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0


class Worker:
    """Runs evolution jobs from ``cortex.evolution_jobs`` for a store.

    Args:
        store: the store (its engine, and its embedder for re-embedding merge targets; it must
            be the model the notes were embedded with).
        decider: decision function (default: the offline heuristic, cosine >= 0.95 merge,
            0.7..0.95 link).
        concurrency: threads started by :meth:`start` / :meth:`run`, >= 1.
        lock_timeout: seconds after which a running job's lock counts as abandoned.
        poll_interval: seconds an idle thread waits when no notification arrives.
        backoff_base, backoff_cap: retry delay in seconds, see the module doc.
        k: neighbours per decision.
        listen: use LISTEN/NOTIFY to wake idle threads (polling stays the fallback).
        before_commit: called with the job after its effects are written and before the
            commit (a hook for tests and tracing; raising fails the attempt).
        describer: writes a collection's description and query helper for ``collection`` jobs
            (default: offline, from the members' keywords; see :mod:`cortex_pg.collections.refresh`).
        preprocess: called with the job before its evolution transaction, e.g. the Prem Cortex
            deep analysis (it commits its own changes; it must be idempotent, since a job can
            be retried; raising fails the attempt).
        name: worker id prefix stored in ``locked_by`` (default ``host:pid:random``).
        kinds: the kinds of job it takes (default ``evolve`` and ``collection``; a ``prem``
            job needs the Prem Cortex analysis as its ``preprocess``, see
            ``AgenticMemorySystem.job_worker``).
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        decider: Decider | None = None,
        concurrency: int = 1,
        lock_timeout: float = 300.0,
        poll_interval: float = 2.0,
        backoff_base: float = 2.0,
        backoff_cap: float = 600.0,
        k: int = DEFAULT_K,
        listen: bool = True,
        before_commit: Callable[[queue.Job], None] | None = None,
        preprocess: Callable[[queue.Job], None] | None = None,
        name: str | None = None,
        describer: Describer | None = None,
        kinds: Sequence[str] = (queue.DEFAULT_KIND, queue.COLLECTION_KIND),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        known = (*queue.NOTE_KINDS, queue.COLLECTION_KIND)
        given = kinds  # (a string is one kind, not a sequence of them: refused, as anything not iterable)
        kinds = tuple(kinds) if isinstance(kinds, Iterable) and not isinstance(kinds, str) else (None,)
        if not all(k in known for k in kinds):
            raise ValueError(f"kinds must be a sequence of job kinds ({', '.join(known)}), got {given!r}")
        if queue.PREM_KIND in kinds and preprocess is None:
            raise ValueError(
                "a worker of prem jobs needs the Prem Cortex analysis as its preprocess "
                "(AgenticMemorySystem.job_worker)"
            )
        self.kinds = tuple(kinds)
        self.store = store
        self.decider = decider or heuristic_decider()
        self.concurrency = concurrency
        self.lock_timeout = lock_timeout
        self.poll_interval = poll_interval
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.k = k
        self.listen = listen
        self.before_commit = before_commit
        self.preprocess = preprocess
        self.describer = describer
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ one job
    def run_one(
        self,
        *,
        worker_id: str | None = None,
        note_ids: Sequence[uuid.UUID | str] | None = None,
        kinds: Sequence[str] | None = None,
        user_id: str | None = None,
    ) -> bool:
        """Take and run one ready job (of these notes / kinds / user when given; only kinds this
        worker takes) in the calling thread; False when none was ready."""
        wid = worker_id or f"{self.name}/main"
        with translate_db_errors(), self.store.engine.begin() as conn:
            jobs = queue.take(
                conn,
                wid,
                limit=1,
                lock_timeout=self.lock_timeout,
                note_ids=note_ids,
                kinds=self.kinds if kinds is None else [k for k in kinds if k in self.kinds],
                user_id=user_id,
            )
        if not jobs:
            return False
        self._run(jobs[0])
        return True

    def _run(self, job: queue.Job) -> None:
        try:
            if self.preprocess is not None:
                self.preprocess(job)
            self._attempt(job)
        except LeaseLost as exc:
            log.warning("%s", exc)
            self._count("lost")
            return
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the job
            log.warning("evolution job %s (note %s) failed: %s", job.id, job.note_id, exc)
            delay = queue.backoff_seconds(job.attempts, self.backoff_base, self.backoff_cap)
            with translate_db_errors(), self.store.engine.begin() as conn:
                status = queue.fail(conn, job, f"{type(exc).__name__}: {exc}", backoff=delay)
            self._count("failed" if status == "failed" else "retried" if status else "lost")
            return
        self._count("done")

    def _attempt(self, job: queue.Job) -> None:
        """Run ``job`` to its end; a slow decider is asked outside its transaction (see the
        module doc).

        Raises:
            LeaseLost: another worker took the job over after the lock timeout.
        """
        if job.kind not in queue.NOTE_KINDS or job.note_id is None or getattr(self.decider, "instant", False):
            call_retrying(self._commit, job, None, False)  # one transaction: read, decide, write
            return
        for _ in range(STALE_DECISIONS):
            with translate_db_errors(), self.store.engine.begin() as conn:
                if self._lease(conn, job) == "gone":
                    return
                seen = read_neighbourhood(conn, job.user_id, job.note_id, self.store.embedder.name, k=self.k)
            decided = decide(self.decider, seen)  # no transaction open: no lock held
            try:
                call_retrying(self._commit, job, decided, False)
                return
            except StaleDecision as exc:
                log.info("evolution job %s: %s; deciding again", job.id, exc)
        with translate_db_errors(), self.store.engine.begin() as conn:
            if self._lease(conn, job) == "gone":
                return
        call_retrying(self._commit, job, None, True)

    @staticmethod
    def _lease(conn: Any, job: queue.Job) -> str:
        """:func:`queue.lease`, raising :class:`LeaseLost` when another worker holds the job."""
        state = queue.lease(conn, job)
        if state == "lost":
            raise LeaseLost(f"job {job.id} was taken over after the lock timeout")
        return state

    def _commit(self, job: queue.Job, decided: Decided | None, locked: bool) -> None:
        """Handle ``job`` and record its result, in one transaction (run again by ``_attempt``
        when it lost a deadlock to a concurrent writer of the session: it left nothing behind).
        A job whose row is gone (deleted with its note) ends with nothing written.

        Raises:
            LeaseLost: another worker took the job over after the lock timeout.
            StaleDecision: ``decided`` was made on notes that have changed since.
        """
        with translate_db_errors(), self.store.engine.begin() as conn:
            result = self._handle(conn, job, decided, locked)
            if self.before_commit is not None:
                self.before_commit(job)
            if not queue.finish(conn, job, result):
                if queue.lease(conn, job) != "gone":
                    raise LeaseLost(f"job {job.id} was taken over after the lock timeout")
                log.info("evolution job %s: gone with its note %s", job.id, job.note_id)

    def _handle(self, conn: Any, job: queue.Job, decided: Decided | None, locked: bool) -> dict[str, Any]:
        if job.kind == queue.COLLECTION_KIND and job.collection_path is not None:
            return refresh_collection(
                conn, job.user_id, job.collection_path, self.store.embedder.name, self.describer
            )
        if job.kind not in queue.NOTE_KINDS or job.note_id is None:
            raise ValueError(f"unknown job kind {job.kind!r}")
        return evolve_note(
            conn,
            self.store.embedder,
            self.decider,
            job.user_id,
            job.note_id,
            k=self.k,
            decided=decided,
            on_stale="decide" if decided is None else "raise",
            locked=locked,
        )

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def process_available(
        self,
        *,
        note_ids: Sequence[uuid.UUID | str] | None = None,
        max_jobs: int | None = None,
        kinds: Sequence[str] | None = None,
        user_id: str | None = None,
    ) -> int:
        """Run ready jobs in the calling thread until none is left (or ``max_jobs``).

        With ``note_ids`` only those notes' jobs: the inline mode (``enable_background_processing
        =False``) adds a note and evolves it before returning; ``kinds`` / ``user_id`` restrict
        to jobs of those kinds / that user (e.g. the user's ``collection`` jobs).

        Returns:
            The number of jobs run (done, retried or failed).
        """
        n = 0
        while (max_jobs is None or n < max_jobs) and self.run_one(
            note_ids=note_ids, kinds=kinds, user_id=user_id
        ):
            n += 1
        return n

    # ------------------------------------------------------------------ threads
    def start(self, *, exit_when_idle: bool = False) -> Worker:
        """Start ``concurrency`` worker threads (daemons) and the LISTEN thread; returns self."""
        self._stop.clear()
        if self.listen:
            t = threading.Thread(target=self._listen_loop, name=f"{self.name}/listen", daemon=True)
            t.start()
            self._threads.append(t)
        for i in range(self.concurrency):
            t = threading.Thread(
                target=self._loop,
                args=(f"{self.name}/{i}", exit_when_idle),
                name=f"{self.name}/{i}",
                daemon=True,
            )
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask every thread to stop after its current job and wait up to ``timeout`` seconds each."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def join(self) -> None:
        """Wait for the worker threads (e.g. started with ``exit_when_idle``) to end."""
        for t in self._threads:
            if not t.name.endswith("/listen"):
                t.join()
        self.stop()

    def run(self, *, exit_when_idle: bool = False, stop: threading.Event | None = None) -> WorkerStats:
        """Blocking standalone worker: start the threads and wait until ``stop`` is set (or idle)."""
        self.start(exit_when_idle=exit_when_idle)
        try:
            while any(t.is_alive() for t in self._threads if not t.name.endswith("/listen")):
                if stop is not None and stop.wait(0.2):
                    break
                if stop is None:
                    time.sleep(0.2)
        finally:
            self.stop()
        return self.stats

    def _loop(self, worker_id: str, exit_when_idle: bool) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                if self.run_one(worker_id=worker_id):
                    continue
            except Exception:  # noqa: BLE001 - e.g. the database restarting; keep polling
                log.exception("evolution worker %s could not take a job", worker_id)
            if exit_when_idle:
                return
            self._wake.wait(self.poll_interval)

    def _listen_loop(self) -> None:
        try:
            import psycopg

            url = self.store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
            pg = psycopg.connect(url, autocommit=True)
            pg.execute(f"LISTEN {queue.CHANNEL}")
            raw = pg
        except Exception as exc:  # noqa: BLE001 - polling is the fallback
            log.info("LISTEN unavailable (%s); polling every %s s", exc, self.poll_interval)
            return
        try:
            while not self._stop.is_set():
                for _ in pg.notifies(timeout=min(self.poll_interval, 1.0), stop_after=1):
                    self._wake.set()
        except Exception as exc:  # noqa: BLE001
            log.info("LISTEN connection lost (%s); polling every %s s", exc, self.poll_interval)
        finally:
            raw.close()
