"""Document retrieval: R@5 and nDCG@5 of the passages that answer questions about long texts.

Usage:
    python benchmarks/doc_recall.py [--modes paragraph chunk prem] [--embedder minilm|hashing]
        [--embedding-cache FILE.npz] [--database-url URL]

The documents are texts every machine with Python has: the GNU GPL version 3
(``/usr/share/common-licenses/GPL-3``) and topics of the Python language reference
(``pydoc_data.topics``). ``benchmarks/data/doc_recall.json`` holds the questions, each with its
answer marked by a substring of the answering passage (unique in its document; compared after
collapsing whitespace). Every document is stored through the public API
(``MemoryStore.add_many``; one user per mode, one session per document), in three modes:

* ``paragraph``: one note per blank-line block (how ``cortex-pg ingest`` stored text before
  chunking);
* ``chunk``: ``cortex_pg.chunk_text`` with its defaults (1,000 characters, no overlap);
* ``prem``: the ``cortex-pg cortex`` command's chunks (its section separator, 2,000 / 200).

A result is relevant when it contains the answer substring. Per mode: notes stored, their
median length, R@5 (a relevant note among the top 5), nDCG@5 (binary gain, one ideal hit:
1 / log2(1 + rank of the first relevant note)), and the share of top-5 results under 100
characters. Questions whose answer is not in this machine's copy of a document are skipped
(and counted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "doc_recall.json"
MODES = ("paragraph", "chunk", "prem")
SHORT = 100  # characters: a "short" result


def _chunk_text() -> Callable[..., Any]:
    try:
        from cortex_pg import chunk_text
    except ImportError:  # an older cortex_pg on the path: take this checkout's module
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "_documents", HERE.parent / "cortex_pg" / "documents.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        chunk_text = module.chunk_text
    return chunk_text


def norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def load(path: Path = DATA) -> tuple[dict[str, str], list[dict[str, str]], int]:
    """The documents (name -> text), the answerable questions, and how many were skipped."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    docs: dict[str, str] = {}
    for name, where in spec["documents"].items():
        if "path" in where:
            p = Path(where["path"])
            if p.exists():
                docs[name] = p.read_text(encoding="utf-8")
        else:
            from pydoc_data.topics import topics

            if where["pydoc_topic"] in topics:
                docs[name] = topics[where["pydoc_topic"]]
    questions = [
        q for q in spec["questions"] if q["doc"] in docs and norm(q["answer"]) in norm(docs[q["doc"]])
    ]
    return docs, questions, len(spec["questions"]) - len(questions)


def items(mode: str, text: str) -> list[dict[str, Any]]:
    """The note items of one document in ``mode``."""
    if mode == "paragraph":
        return [{"content": p.strip()} for p in re.split(r"\n\s*\n", text) if p.strip()]
    chunk_text = _chunk_text()
    if mode == "chunk":
        chunks = chunk_text(text)
    elif mode == "prem":
        chunks = chunk_text(text, size=2000, overlap=200, section_separator="\n\n\n\n")
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return [{"content": c.text, **({"context": c.context} if c.context else {})} for c in chunks]


def ingest(store: Any, mode: str, docs: dict[str, str]) -> dict[str, Any]:
    """Store every document in ``mode`` for user ``doc-<mode>``; returns counts and timing."""
    user = f"doc-{mode}"
    lengths: list[int] = []
    started = time.perf_counter()
    for name, text in docs.items():
        batch = items(mode, text)
        lengths += [len(i["content"]) for i in batch]
        store.add_many(batch, user_id=user, session_id=name, to_stm=False, enqueue_evolution=False)
    return {
        "user": user,
        "notes": len(lengths),
        "median_chars": statistics.median(lengths),
        "seconds": time.perf_counter() - started,
    }


Rescore = Callable[[str, list[Any]], list[Any]]


def evaluate(
    store: Any,
    user: str,
    questions: list[dict[str, str]],
    *,
    k: int = 5,
    pool: int | None = None,
    rescore: Rescore | None = None,
) -> dict[str, float]:
    """R@k, nDCG@k and the share of top-k results under 100 characters over ``questions``.

    ``rescore`` (query, results of a search with limit ``pool``) -> re-ordered results lets a
    caller try another ranking of the same candidates.
    """
    hits = ndcg = short = shown = 0.0
    for q in questions:
        results = store.search(q["q"], user_id=user, limit=pool or k, touch=False)
        if rescore is not None:
            results = rescore(q["q"], results)
        top = results[:k]
        answer = norm(q["answer"])
        rank = next((i for i, r in enumerate(top, 1) if answer in norm(r.content)), None)
        hits += rank is not None
        ndcg += 1 / math.log2(1 + rank) if rank else 0.0
        short += sum(len(r.content) < SHORT for r in top)
        shown += len(top)
    n = len(questions)
    return {f"R@{k}": hits / n, f"nDCG@{k}": ndcg / n, "short_share": short / shown if shown else 0.0}


def open_store(args: argparse.Namespace) -> tuple[Any, Callable[[], None]]:
    """A store on ``--database-url`` / ``DATABASE_URL`` or a temporary embedded server, and its closer."""
    import os

    from cortex_pg.embeddings.base import embedder_from_name
    from cortex_pg.store import MemoryStore

    sys.path.insert(0, str(HERE))
    from _database import database_url
    from locomo_recall import DiskCachedEmbedder

    with contextlib.ExitStack() as opened:
        url = opened.enter_context(
            database_url(args.database_url or os.environ.get("DATABASE_URL"), prefix="cortex-pg-docs-")
        )
        embedder: Any = embedder_from_name(args.embedder)
        if args.embedding_cache is not None:
            embedder = DiskCachedEmbedder(embedder, args.embedding_cache)
        store = opened.enter_context(
            MemoryStore.open(
                url, embedder=embedder, auto_migrate=True, extract_entities=False, enqueue_evolution=False
            )
        )
        return store, opened.pop_all().close  # the store closes, then the server (if one was started)


def arguments(argv: list[str] | None = None, doc: str = __doc__) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        help="a .npz file of vectors by text hash, reused and extended (see locomo_recall.py)",
    )
    ap.add_argument("--database-url", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    docs, questions, skipped = load()
    print(
        f"{len(docs)} documents ({sum(map(len, docs.values()))} characters), {len(questions)} questions"
        f" ({skipped} skipped: answer not in this machine's copy)"
    )
    store, close = open_store(args)
    try:
        store.embedder.embed(["warm up"])
        print(
            f"{'mode':<10} {'notes':>6} {'median':>7} {'R@5':>6} {'nDCG@5':>7} {'short@5':>8} {'ingest s':>9}"
        )
        for mode in args.modes:
            info = ingest(store, mode, docs)
            m = evaluate(store, info["user"], questions)
            print(
                f"{mode:<10} {info['notes']:>6} {info['median_chars']:>7.0f} {m['R@5']:>6.3f} "
                f"{m['nDCG@5']:>7.3f} {m['short_share']:>8.3f} {info['seconds']:>9.1f}"
            )
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
