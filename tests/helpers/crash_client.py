"""Clients the crash tests kill or cut off (run as ``python -m tests.helpers.crash_client``).

``add_many URL USER N [hold]``: one ``add_many`` of N notes (one transaction), printing
``batch`` after each batch of 50; with ``hold``, it then waits after the first batch (reading
standard input) so the test kills it mid-call, whatever the machine's speed.
``ingest URL USER ACKS``: adds notes one batch of 5 at a time with evolution jobs queued,
appending each acknowledged id to ACKS (flushed) and each error's type name as ``!Type``,
until killed or 200 batches are done.
"""

from __future__ import annotations

import sys

from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore


def main() -> None:
    mode, url, user = sys.argv[1:4]
    store = MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=False)
    if mode == "add_many":
        n = int(sys.argv[4])
        hold = sys.argv[5:] == ["hold"]
        items = [{"content": f"crash note {i} of {user}"} for i in range(n)]

        def progress(_: int) -> None:
            print("batch", flush=True)
            if hold:
                sys.stdin.readline()  # the test kills the process here, inside the transaction

        store.add_many(items, user_id=user, batch_size=50, progress=progress)
        print("done", flush=True)
    elif mode == "ingest":
        with open(sys.argv[4], "a", encoding="utf-8") as acks:
            for b in range(200):
                items = [{"content": f"ingested {b}.{k} for {user}"} for k in range(5)]
                try:
                    ids = store.add_many(items, user_id=user, enqueue_evolution=True)
                except Exception as exc:  # noqa: BLE001 - recorded for the test
                    acks.write(f"!{type(exc).__name__}\n")
                    acks.flush()
                    continue
                acks.write("".join(f"{i}\n" for i in ids))
                acks.flush()


if __name__ == "__main__":
    main()
