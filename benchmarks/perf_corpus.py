"""The speed benchmark's corpus: realistic notes, tenants with a skew, MiniLM vectors cached on disk.

Texts: the LoCoMo turns of a conversation file (``"speaker: text"``, see
``cortex_pg.ingest.read_locomo``) when one is given, then notes written from templates with a
fixed seed (preferences, meetings, task results, personal facts, errands) until the size is
reached. Tenants: 100, with a skew: ``t000`` holds 20 % of the notes, ``t001`` 10 %, the
other 98 share the remaining 70 % by Zipf weights (so the corpus has a 10 %-tenant and,
among the rest, tenants near 1 %). Queries: 500 held out (never stored): LoCoMo questions and
template questions, each aimed at one tenant.

Vectors: all-MiniLM-L6-v2, computed once per text and cached in
``$CORTEX_PG_BENCH_CACHE`` (default ``~/.cache/cortex-pg-bench``) as ``.npy`` files keyed by a
hash of the texts, so later runs only load them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

SEED = 20261130
N_TENANTS = 100


def _words(text: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(text.split(sep))


NAMES = _words(
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent "
    "Victor Walter Yusuf Zara Maya Leo Priya Tomas Ines Kenji Amara Lucas Sofia Omar Hana Mateo Elena "
    "Noah Chloe Ravi Nadia Felix Greta"
)
LANGS = _words("Python TypeScript Rust Go Java Kotlin Elixir Haskell Scala Ruby C++ Swift")
TOPICS = _words(
    "quarterly budget|hiring plan|database migration|onboarding flow|pricing page|search latency|"
    "incident review|mobile release|security audit|data retention policy|customer churn|API rate limits|"
    "caching layer|design system|billing export|holiday schedule|offsite agenda|vendor contract|"
    "load testing|feature flags|dark mode|accessibility fixes|log retention|backup strategy",
    "|",
)
CITIES = _words(
    "Lisbon Berlin Toronto Osaka Nairobi Austin Madrid Oslo Seoul Denver Dublin Prague Lima Cairo "
    "Sydney Zurich Montreal Helsinki Porto Krakow"
)
THINGS = _words(
    "a golden retriever puppy|a used bicycle|a sourdough starter|a vintage camera|a standing desk|"
    "a pottery class|a marathon plan|a guitar|a garden plot|a new laptop|a kayak|a chess set|"
    "a watercolor set|a telescope|a sewing machine|a language course",
    "|",
)
ACTIONS = _words(
    "ship it behind a flag|postpone it a week|split it into two tickets|ask legal first|"
    "run an A/B test|write a design doc|pair on it|drop the feature|hire a contractor|automate the check",
    "|",
)
METRICS = _words(
    "p95 latency|error rate|conversion|signup rate|CPU usage|memory use|test coverage|build time", "|"
)
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
MONTHS = _words("January February March April May June July August September October November December")

TEMPLATES = (
    "{a} prefers {lang} over {lang2} for new {topic} work.",
    "Meeting with {a} about the {topic}: we decided to {action} by {day}.",
    "Task result: the {topic} task is done; {metric} improved by {pct}%.",
    "{a} said their sister is moving to {city} in {month}.",
    "{a} bought {thing} last {day} and loves it.",
    "Reminder: call {a} about the {topic} before {day}.",
    "{a} and {b} disagreed on the {topic}; {b} wants to {action}.",
    "Trip to {city} with {a} planned for {month}; book the hotel early.",
    "{a} is allergic to peanuts and avoids {thing2} shops.",
    "Decision: for the {topic} we use {lang} and {action}.",
    "{a} finished reading a book about {city} history and recommended it to {b}.",
    "The {metric} of the {topic} regressed after Tuesday's deploy; {a} is on it.",
)
QUESTIONS = (
    "What does {a} prefer for {topic} work?",
    "What did we decide about the {topic}?",
    "How much did the {metric} improve?",
    "Where is {a}'s sister moving?",
    "What did {a} buy recently?",
    "Who disagreed about the {topic}?",
    "When is the trip to {city}?",
    "What is {a} allergic to?",
    "Which language do we use for the {topic}?",
    "What book did {a} recommend?",
)


@dataclass(frozen=True)
class Corpus:
    """Texts with their tenants and times, and held-out queries aimed at tenants."""

    texts: list[str]
    tenants: list[str]
    times: list[datetime]
    queries: list[str]
    query_tenants: list[str]


def _fill(rng: random.Random, template: str) -> str:
    a, b = rng.sample(NAMES, 2)
    lang, lang2 = rng.sample(LANGS, 2)
    thing, thing2 = rng.sample(THINGS, 2)
    return template.format(
        a=a,
        b=b,
        lang=lang,
        lang2=lang2,
        topic=rng.choice(TOPICS),
        action=rng.choice(ACTIONS),
        day=rng.choice(WEEKDAYS),
        metric=rng.choice(METRICS),
        pct=rng.randint(2, 60),
        city=rng.choice(CITIES),
        month=rng.choice(MONTHS),
        thing=thing,
        thing2=thing2.split(" ", 1)[1],
    )


def tenant_sizes(total: int) -> list[int]:
    """Notes per tenant: 20 %, 10 %, then Zipf weights over the other 98 (sums to ``total``)."""
    big, second = round(total * 0.20), round(total * 0.10)
    rest = total - big - second
    weights = [1.0 / (i + 1) ** 0.8 for i in range(N_TENANTS - 2)]
    scale = rest / sum(weights)
    sizes = [max(1, int(w * scale)) for w in weights]
    sizes[0] += rest - sum(sizes)
    return [big, second, *sizes]


def build(size: int, locomo: Path | None = None) -> Corpus:
    """A corpus of ``size`` notes (deterministic for a given size and LoCoMo file)."""
    rng = random.Random(SEED)
    texts: list[str] = []
    locomo_questions: list[str] = []
    if locomo is not None and locomo.exists():
        data = json.loads(locomo.read_text())
        for conv in data:
            c = conv["conversation"]
            for key in sorted(k for k in c if k.startswith("session_") and not k.endswith("date_time")):
                for turn in c[key]:
                    texts.append(f"{turn['speaker']}: {turn['text']}")
            locomo_questions += [q["question"] for q in conv["qa"] if q.get("question")]
    texts = texts[:size]
    while len(texts) < size:
        texts.append(_fill(rng, rng.choice(TEMPLATES)))
    order = list(range(size))
    rng.shuffle(order)
    texts = [texts[i] for i in order]
    tenants: list[str] = []
    for t, n in enumerate(tenant_sizes(size)):
        tenants += [f"t{t:03d}"] * n
    rng.shuffle(tenants)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    times = [start + timedelta(minutes=37 * i + rng.randint(0, 30)) for i in range(size)]
    qrng = random.Random(SEED + 1)
    queries = qrng.sample(locomo_questions, min(250, len(locomo_questions)))
    while len(queries) < 500:
        queries.append(_fill(qrng, qrng.choice(QUESTIONS)))
    query_tenants = [f"t{qrng.choice([0, 1, 1, 2, 5, 10, 30]):03d}" for _ in queries]
    return Corpus(texts, tenants, times, queries, query_tenants)


def cache_dir() -> Path:
    d = Path(os.environ.get("CORTEX_PG_BENCH_CACHE", Path.home() / ".cache" / "cortex-pg-bench"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def vectors(texts: list[str], embedder, label: str, progress=None) -> np.ndarray:  # noqa: ANN001
    """MiniLM vectors of ``texts`` (float32, shape (n, dim)), from the disk cache when present."""
    key = hashlib.sha256(("\x1f".join(texts) + embedder.name).encode()).hexdigest()[:16]
    path = cache_dir() / f"{label}-{len(texts)}-{key}.npy"
    if path.exists():
        return np.load(path)
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    step = 512
    for i in range(0, len(texts), step):
        out[i : i + step] = np.asarray(embedder.embed(texts[i : i + step]), dtype=np.float32)
        if progress:
            progress(min(i + step, len(texts)))
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, out)
    tmp.rename(path)
    return out
