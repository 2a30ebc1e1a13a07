"""calute ``LongTermMemory.merge_similar`` / ``consolidate``: the similar-pair search at scale.

    .venv/bin/python benchmarks/consolidate.py [--sizes 2000 10000] [--pairwise-up-to 2000]

Fills one scope with short notes (12 words from a 5,000-word Zipf vocabulary, a fixed seed),
10 % of them near-duplicates of another (one word changed), and times the similar-pair
statement (prefix filtering, ``compat/calute/sql.py``) beside the pairwise join it replaced
(every pair of items compared), on a throw-away embedded database. Prints seconds and pairs.
"""

from __future__ import annotations

import argparse
import random
import time

from _database import database_url
from sqlalchemy import text

from cortex_pg.compat.calute import LongTermMemory
from cortex_pg.compat.calute import sql as calute_sql
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore

# the pairwise statement before prefix filtering (the reference)
PAIRWISE = """
WITH w AS (
    SELECT n.id, char_length(n.content) AS len,
           ARRAY(SELECT DISTINCT t FROM regexp_split_to_table(lower(btrim(n.content)), '\\s+') AS t) AS words
    FROM cortex.notes n WHERE {scope} AND n.merged_into IS NULL
)
SELECT a.id AS keep_id, b.id AS drop_id
FROM w a JOIN w b ON a.id <> b.id AND a.words && b.words
     AND (a.len > b.len OR (a.len = b.len AND a.id < b.id))
WHERE (SELECT count(*) FROM (SELECT unnest(a.words) INTERSECT SELECT unnest(b.words)) x)::float8
      / greatest(cardinality(a.words), cardinality(b.words)) >= :threshold
ORDER BY a.len DESC, a.id, b.id
"""


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(5000)]
    out: list[str] = []
    while len(out) < n:
        words = rng.choices(vocab, weights, k=12)
        out.append(" ".join(words))
        if rng.random() < 0.1 and len(out) < n:
            words[rng.randrange(12)] = rng.choice(vocab)
            out.append(" ".join(words))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000])
    ap.add_argument("--pairwise-up-to", type=int, default=2000)
    args = ap.parse_args()
    with (
        database_url(prefix="cortex-pg-consolidate-") as url,
        MemoryStore.open(url, embedder=HashingEmbedder(), auto_migrate=True) as store,
    ):
        for n in args.sizes:
            ltm = LongTermMemory(store=store, user_id="bench", session_id=f"s{n}", max_items=n)
            for t in corpus(n):
                ltm.save(t)
            params = {**ltm.shelf.params, "threshold": 0.8}
            for name, stmt in (("prefix filtering", calute_sql.SIMILAR_PAIRS), ("pairwise", PAIRWISE)):
                if name == "pairwise" and n > args.pairwise_up_to:
                    print(f"{n:>7} items  {name:17s}  skipped (above --pairwise-up-to)")
                    continue
                with store.engine.connect() as conn:
                    t0 = time.perf_counter()
                    pairs = conn.execute(text(stmt.format(scope=calute_sql.SCOPE)), params).all()
                    secs = time.perf_counter() - t0
                print(f"{n:>7} items  {name:17s}  {secs:8.2f} s  {len(pairs)} pairs")


if __name__ == "__main__":
    main()
