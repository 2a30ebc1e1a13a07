"""Evolution throughput on LoCoMo: ingest every turn with enqueueing on, then drain the queue.

    CORTEX_PG_HOME=/tmp/bench-pg python benchmarks/evolution_throughput.py \\
        --data ../shared/data/locomo-dev.json --concurrency 2 [--embedder minilm]

One user per conversation (``sample_id``), one session per conversation (so a turn's k = 4
neighbours come from the whole conversation; ``--session-scope session`` uses LoCoMo sessions).
Each turn is a note ``"<speaker>: <text>"`` at its session's time, ``metadata.dia_id`` set.
Measured: ingest notes/s (embedding + insert + enqueue), evolution jobs/s with the offline
heuristic (cosine >= 0.95 merge, 0.7..0.95 link), links and merges made; then evidence
recall@k of search with ``include_links`` off and on (with links a question gets up to k
linked notes after its k hits, so "on" reads up to 2k notes). The benchmark's users are
deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from cortex_pg.evolution import Worker
from cortex_pg.store import MemoryStore

DATE_FORMAT = "%I:%M %p on %d %B, %Y"


def _session_time(raw: str | None) -> str | None:
    if not raw:
        return None
    try:
        return datetime.strptime(raw.strip(), DATE_FORMAT).replace(tzinfo=UTC).isoformat()
    except ValueError:
        return None


def load_turns(sample: dict[str, Any], user_id: str, scope: str) -> list[dict[str, Any]]:
    """One note mapping per turn of a LoCoMo sample."""
    conv = sample["conversation"]
    items = []
    for key in sorted(conv, key=lambda k: int(k.split("_")[1]) if re.fullmatch(r"session_\d+", k) else 0):
        if not re.fullmatch(r"session_\d+", key) or not isinstance(conv[key], list):
            continue
        when = _session_time(conv.get(f"{key}_date_time"))
        for turn in conv[key]:
            items.append(
                {
                    "content": f"{turn['speaker']}: {turn['text']}",
                    "user_id": user_id,
                    "session_id": key if scope == "session" else "conversation",
                    "time": when,
                    "metadata": {"dia_id": turn["dia_id"]},
                }
            )
    return items


def evidence(qa: dict[str, Any], known: set[str]) -> set[str]:
    refs = set()
    for ref in qa.get("evidence") or []:
        refs.update(p.strip() for p in re.split(r"[;\s]+", ref) if p.strip())
    return refs & known


def recall(
    store: MemoryStore, samples: list[dict[str, Any]], users: dict[str, str], k: int, links: bool
) -> float:
    scores = []
    for sample in samples:
        uid = users[sample["sample_id"]]
        with store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT id, merged_into, metadata->>'dia_id' AS dia FROM cortex.notes WHERE user_id = :u"
                ),
                {"u": uid},
            ).all()
        dias: dict[str, set[str]] = {str(r.id): {r.dia} for r in rows}
        for r in rows:  # a merge target answers for the turns merged into it
            if r.merged_into is not None:
                dias[str(r.merged_into)].add(r.dia)
        known = {r.dia for r in rows}
        for qa in sample["qa"]:
            want = evidence(qa, known)
            if not want:
                continue
            hits = store.search(qa["question"], user_id=uid, limit=k, touch=False, include_links=links)
            found = set().union(*(dias.get(h.id, set()) for h in hits)) if hits else set()
            scores.append(len(want & found) / len(want))
    return sum(scores) / max(1, len(scores))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/work/shared/data/locomo-dev.json")
    ap.add_argument("--embedder", default="hashing", help="hashing (default) or minilm")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--session-scope", choices=("conversation", "session"), default="conversation")
    ap.add_argument("--k", type=int, nargs="*", default=[5, 10])
    ap.add_argument("--keep", action="store_true", help="keep the benchmark's notes")
    args = ap.parse_args()

    samples = json.loads(Path(args.data).read_text())
    store = MemoryStore.open(args.database_url, embedder=args.embedder)
    run = uuid.uuid4().hex[:8]
    users = {s["sample_id"]: f"bench-{run}-{s['sample_id']}" for s in samples}
    try:
        items = [it for s in samples for it in load_turns(s, users[s["sample_id"]], args.session_scope)]
        t0 = time.perf_counter()
        ids = store.add_many(items, to_stm=False, enqueue_evolution=True)
        t_ingest = time.perf_counter() - t0
        print(f"embedder {store.embedder.name}; {len(samples)} conversations, {len(ids)} turns")
        print(f"ingest (embed + insert + enqueue): {t_ingest:.2f} s, {len(ids) / t_ingest:.0f} notes/s")

        worker = Worker(store, concurrency=args.concurrency, listen=False, poll_interval=0.2)
        t0 = time.perf_counter()
        worker.start(exit_when_idle=True)
        worker.join()
        t_evolve = time.perf_counter() - t0
        s = worker.stats
        with store.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
                    " count(*) FILTER (WHERE status <> 'done') AS other,"
                    " count(*) FILTER (WHERE result->>'merged_into' IS NOT NULL) AS merges,"
                    " coalesce(sum((result->>'links')::int), 0) AS links"
                    " FROM cortex.evolution_jobs WHERE user_id = ANY(:u)"
                ),
                {"u": list(users.values())},
            ).one()
        print(
            f"evolution ({args.concurrency} threads, offline heuristic): {row.done} jobs in {t_evolve:.2f} s"
            f" = {row.done / t_evolve:.1f} jobs/s; links written {row.links} (with reciprocals),"
            f" merges {row.merges}; retried {s.retried}, failed {s.failed}, not done {row.other}"
        )
        for k in args.k:
            off = recall(store, samples, users, k, links=False)
            on = recall(store, samples, users, k, links=True)
            print(f"recall@{k}: include_links off {off:.3f}, on {on:.3f} (on reads up to {2 * k} notes)")
    finally:
        if not args.keep:
            for uid in users.values():
                store.delete_where(user_id=uid)
            with store.engine.begin() as conn:
                conn.execute(
                    text("DELETE FROM cortex.note_history WHERE user_id = ANY(:u)"),
                    {"u": list(users.values())},
                )
        store.close()


if __name__ == "__main__":
    main()
