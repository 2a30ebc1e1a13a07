"""Creating and refreshing one collection: the handler of ``collection`` jobs.

A worker (:class:`cortex_pg.evolution.Worker`) runs :func:`refresh_collection` inside the
transaction that marks the job done, so a worker killed half-way leaves the previous row
exactly as it was (nothing is committed) and the job is taken again after its lock timeout.

The row, in SQL: ``memory_count`` = current notes under the path (whole segments),
``centroid`` = ``avg()`` of their text embeddings (first window) of the store's model. The
description and query helper come from a :class:`Describer`: one LLM call over up to 20
sampled notes (:class:`LLMDescriber`), or offline from the members' most frequent keywords
(:func:`offline_describer`). A path with no notes left loses its collection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, text

from cortex_pg.collections.rules import HELPER_KEYWORDS, SAMPLE_NOTES
from cortex_pg.llm import prompts
from cortex_pg.llm.analyzer import light_keywords
from cortex_pg.llm.client import LLMClient, LLMError

log = logging.getLogger(__name__)

MEMBERS = """
SELECT n.id FROM cortex.notes n
WHERE n.user_id = :user_id AND n.merged_into IS NULL AND cortex.category_under(n.category, :path)
"""

SAMPLE = f"""
SELECT n.content FROM ({MEMBERS}) m JOIN cortex.notes n ON n.user_id = :user_id AND n.id = m.id
ORDER BY n.created_at DESC, n.id LIMIT :sample
"""

TOP_KEYWORDS = f"""
SELECT lower(k) AS keyword, count(*) AS n
FROM ({MEMBERS}) m JOIN cortex.notes n ON n.user_id = :user_id AND n.id = m.id, unnest(n.keywords) AS k
WHERE btrim(k) <> ''
GROUP BY 1 ORDER BY n DESC, keyword LIMIT :limit
"""

UPSERT = f"""
WITH members AS ({MEMBERS}),
stats AS (
    SELECT (SELECT count(*) FROM members) AS n,
           (SELECT avg(e.embedding) FROM cortex.embeddings e JOIN members m ON e.note_id = m.id
            WHERE e.user_id = :user_id AND e.model = :model AND e.kind = 'text' AND e.window_no = 0) AS centroid
)
INSERT INTO cortex.collections AS c
    (user_id, path, model, description, query_helper, centroid, memory_count, source, refreshed_at)
SELECT :user_id, :path, :model, :description, :query_helper, s.centroid, s.n, :source, now()
FROM stats s WHERE s.n > 0
ON CONFLICT (user_id, path) DO UPDATE
SET model = EXCLUDED.model, description = EXCLUDED.description, query_helper = EXCLUDED.query_helper,
    centroid = EXCLUDED.centroid, memory_count = EXCLUDED.memory_count, source = EXCLUDED.source,
    refreshed_at = now()
RETURNING c.memory_count
"""

DELETE = "DELETE FROM cortex.collections WHERE user_id = :user_id AND path = :path"

#: (path, sampled note texts, top keywords) -> (description, query_helper, source)
Describer = Callable[[str, Sequence[str], Sequence[str]], tuple[str, str, str]]


def offline_describer(path: str, samples: Sequence[str], keywords: Sequence[str]) -> tuple[str, str, str]:
    """Description ``"<path>: <top keywords>"`` and query helper = the top 5 keywords (the
    members' most frequent ``keywords``; when they have none, light keywords of the samples)."""
    words = list(keywords) or light_keywords(" ".join(samples), HELPER_KEYWORDS)
    top = words[:HELPER_KEYWORDS]
    description = f"{path}: {', '.join(top)}" if top else path
    return description, " ".join(top), "offline"


class LLMDescriber:
    """Description and query helper from one LLM call (``prompts.collection_messages``); the
    offline describer when the call fails.

    Args:
        llm: the client.
    """

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm

    def __call__(self, path: str, samples: Sequence[str], keywords: Sequence[str]) -> tuple[str, str, str]:
        try:
            data = self.llm.complete_json(
                prompts.collection_messages(path, samples), prompts.COLLECTION_SCHEMA, "collection_summary"
            )
        except LLMError as exc:
            log.warning("collection %s is described offline: %s", path, exc)
            return offline_describer(path, samples, keywords)
        return data["description"].strip() or path, data["query_helper"].strip(), "llm"


def refresh_collection(
    conn: Connection, user_id: str, path: str, model: str, describer: Describer | None = None
) -> dict[str, Any]:
    """Create or refresh the collection ``path`` of ``user_id`` in the caller's transaction.

    Args:
        model: the embedding model whose text embeddings make the centroid.
        describer: see :class:`Describer` (default :func:`offline_describer`).

    Returns:
        ``{"collection": path, "memory_count": n}``; n = 0 when the path has no notes left
        (its collection, if any, is deleted).
    """
    params = {"user_id": user_id, "path": path}
    samples = list(conn.execute(text(SAMPLE), {**params, "sample": SAMPLE_NOTES}).scalars())
    if not samples:
        conn.execute(text(DELETE), params)
        return {"collection": path, "memory_count": 0}
    keywords = list(conn.execute(text(TOP_KEYWORDS), {**params, "limit": HELPER_KEYWORDS * 2}).scalars())
    description, helper, source = (describer or offline_describer)(path, samples, keywords)
    count = conn.execute(
        text(UPSERT),
        {**params, "model": model, "description": description, "query_helper": helper, "source": source},
    ).scalar_one()
    return {"collection": path, "memory_count": int(count)}
