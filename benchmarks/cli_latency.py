"""Wall-clock of the first hour: a cold ``cortex-pg search`` on a warm server, the library's
first embedding after import, and the end-to-end ``cortex-pg ingest`` rate.

Usage:
    python benchmarks/cli_latency.py [--data examples/conversation.json] [--user example-conv]
        [--query "What pet does Maya have?"] [--repeat 5] [--no-entities]

Everything runs in fresh processes against a temporary embedded server (stopped and removed
at the end); the first search starts the server and is not counted. Figures are medians of
``--repeat`` runs; the machine's other load shows in them, so compare runs made together.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_EMBEDDING = """
import time
t0 = time.perf_counter()
from cortex_pg.embeddings import embedder_from_name
e = embedder_from_name("minilm")
e.embed(["What pet does Maya have?"])
print(time.perf_counter() - t0)
"""


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("examples/conversation.json"))
    ap.add_argument("--user", default=None, help="user to search (default: the first sample_id)")
    ap.add_argument("--query", default="What pet does Maya have?")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-entities", action="store_true", help="ingest without entity extraction")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="cortex-pg-latency-"))
    env = {**os.environ, "CORTEX_PG_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("DATABASE_URL", None)
    cli = [sys.executable, "-m", "cortex_pg"]
    try:
        embeds = [float(_run([sys.executable, "-c", FIRST_EMBEDDING], env)[1]) for _ in range(args.repeat)]
        print(
            f"first embedding after import (in process): median {statistics.median(embeds):.2f} s  "
            f"runs {', '.join(f'{t:.2f}' for t in embeds)}"
        )
        subprocess.run([*cli, "db", "upgrade"], env=env, capture_output=True, check=True)
        ingest = [*cli, "ingest", str(args.data), "--format", "locomo"]
        if args.no_entities:
            ingest.append("--no-entities")
        wall, out = _run(ingest, env)
        read = re.search(r"(\d+) (?:read|notes)", out)
        n = int(read.group(1)) if read else 0
        print(
            f"ingest {args.data}: {n} notes in {wall:.1f} s = {n / wall:.1f} notes/s end to end "
            f"(process start and model load included; entities {'off' if args.no_entities else 'on'})"
        )
        user = args.user or re.search(r'"sample_id"\s*:\s*"([^"]+)"', args.data.read_text()).group(1)
        search = [*cli, "search", args.query, "--user", user, "--limit", "3"]
        _run(search, env)  # warm the server and the OS file cache
        walls = [_run(search, env)[0] for _ in range(args.repeat)]
        print(
            f"cortex-pg search, cold process, warm server: median {statistics.median(walls):.2f} s  "
            f"runs {', '.join(f'{t:.2f}' for t in walls)}"
        )
    finally:
        subprocess.run([*cli, "db", "stop"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
