"""The standing program: run the worker processes (:mod:`tests.helpers.program_worker`) on one
database, then check the database against what they were acknowledged.

:func:`run` returns the workers' records; :func:`check` returns the figures and the list of
problems (empty when every invariant holds):

* every operation of the table ran, and no exception escaped any of them;
* counts add up exactly: the LTM notes are those acknowledged and not deleted, each in its
  tenant (nothing lost, nothing extra), registered to it in ``cortex.note_ids``, and the
  BM25 note count of every user is its number of notes;
* entity frequencies equal the notes that mention them, and some notes do;
* STM never holds more than the capacity per (user, session), every STM scope has its
  crash-loss mark, and no loss is reported (no crash happened);
* every context stack holds its pushes minus its pops, with depths 1..n.

Used by ``tests/test_program.py`` (a small run) and ``benchmarks/program.py`` (the full
program, with wall time).
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from typing import Any

from sqlalchemy import create_engine, text

from cortex_pg.db.engine import normalize_url
from tests.helpers import program_worker

CHECKS = {
    "stm_over_capacity": (
        "SELECT user_id, session_id, count(*) FROM cortex.stm_notes GROUP BY 1, 2 HAVING count(*) > :capacity"
    ),
    "stm_scopes_without_mark": (
        "SELECT DISTINCT s.user_id, s.session_id FROM cortex.stm_notes s LEFT JOIN cortex.stm_marks m "
        "ON m.user_id = s.user_id AND m.session_id = s.session_id WHERE m.user_id IS NULL"
    ),
    "stm_losses_without_a_crash": "SELECT user_id, session_id FROM cortex.stm_losses()",
    "entity_frequency_not_mentions": (
        "SELECT e.user_id, e.name, e.frequency, count(DISTINCT m.note_id) FROM cortex.entities e "
        "LEFT JOIN cortex.entity_mentions m ON m.user_id = e.user_id AND m.entity_id = e.id "
        "GROUP BY e.user_id, e.id HAVING e.frequency <> count(DISTINCT m.note_id)"
    ),
    "notes_not_registered_to_their_tenant": (
        "SELECT n.id, n.user_id FROM cortex.notes n LEFT JOIN cortex.note_ids i ON i.id = n.id "
        "WHERE i.user_id IS DISTINCT FROM n.user_id"
    ),
    "stack_depths_with_gaps": (
        "SELECT user_id, scope FROM cortex.context_frames GROUP BY 1, 2 "
        "HAVING min(depth) <> 1 OR max(depth) <> count(*)"
    ),
}


def run(url: str, processes: int, ops: int, seed: int = 1000) -> list[dict[str, Any]]:
    """Run ``processes`` worker processes of ``ops`` operations each (spawned, seeded
    ``seed + worker``) on the migrated database ``url``; returns their records."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes) as pool:
        return pool.starmap(program_worker.run, [(url, w, ops, seed + w) for w in range(processes)])


def check(url: str, results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Compare the database with the workers' records.

    Returns:
        ``(figures, problems)``: figures are ``operations`` (total), ``by_entry_point`` and
        ``by_operation`` (counts), ``errors``, ``retries``, ``cli_calls``, ``acknowledged``
        (notes added), ``deleted``, ``stored`` (LTM notes in the database), ``lost`` (acknowledged,
        not deleted, missing) and ``extra`` (stored, never acknowledged or deleted), ``frames``;
        problems are human-readable invariant failures (empty: all hold).
    """
    problems: list[str] = []
    ops = sum((Counter(r["ops"]) for r in results), Counter())
    errors = [e for r in results for e in r["errors"]]
    if errors:
        problems.append(f"{len(errors)} exceptions escaped, e.g. {errors[0]}")
    missing_ops = {name for _, name, _ in program_worker.TABLE} - set(ops)
    if missing_ops:
        problems.append(f"operations never run: {sorted(missing_ops)}")
    added = {nid: user for r in results for nid, user in r["added"].items()}
    deleted = {nid for r in results for nid in r["deleted"]}
    expected = {nid: user for nid, user in added.items() if nid not in deleted}
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            stored = dict(conn.execute(text("SELECT id::text, user_id FROM cortex.notes")).all())
            lost = {nid for nid in expected if nid not in stored}
            extra = {nid for nid in stored if nid not in expected}
            crossed = {nid for nid in expected.keys() & stored.keys() if stored[nid] != expected[nid]}
            for name, found in (("lost", lost), ("extra", extra), ("in another tenant", crossed)):
                if found:
                    problems.append(f"{len(found)} notes {name}, e.g. {sorted(found)[:3]}")
            docs = dict(conn.execute(text("SELECT user_id, doc_count FROM cortex.bm25_corpus")).all())
            if {u: c for u, c in docs.items() if c} != dict(Counter(stored.values())):
                problems.append(f"BM25 note counts {docs} differ from the notes {Counter(stored.values())}")
            for name, statement in CHECKS.items():
                rows = conn.execute(text(statement), {"capacity": program_worker.STM_CAPACITY}).all()
                if rows:
                    problems.append(f"{name}: {rows[:3]}")
            if not conn.execute(text("SELECT count(*) FROM cortex.entity_mentions")).scalar():
                problems.append("no entity mentions: entity extraction did not run")
            frames = Counter(
                dict(
                    conn.execute(text("SELECT user_id, count(*) FROM cortex.context_frames GROUP BY 1")).all()
                )
            )
    finally:
        engine.dispose()
    pushed = sum((Counter(r["pushed"]) for r in results), Counter())
    popped = sum((Counter(r["popped"]) for r in results), Counter())
    for user in program_worker.USERS:
        if frames[user] != pushed[user] - popped[user]:
            problems.append(f"{user}: {frames[user]} frames, {pushed[user]} pushed - {popped[user]} popped")
    by_entry = Counter()
    for name, n in ops.items():
        by_entry[program_worker.ENTRY_POINT[name]] += n
    figures = {
        "operations": sum(ops.values()),
        "by_entry_point": dict(sorted(by_entry.items())),
        "by_operation": dict(sorted(ops.items())),
        "errors": len(errors),
        "retries": sum(r["retries"] for r in results),
        "cli_calls": sum(r["cli_calls"] for r in results),
        "acknowledged": len(added),
        "deleted": len(deleted),
        "stored": len(stored),
        "lost": len(lost),
        "extra": len(extra),
        "frames": sum(frames.values()),
    }
    return figures, problems
