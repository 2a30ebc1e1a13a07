"""A note's category (a dot path) when its caller gave none.

In order: the LLM's suggestion when it follows the rule (:func:`rules.clean_llm_category`);
else the nearest collection, when the cosine of the note's text embedding with that
collection's centroid is >= 0.5 (:data:`rules.CATEGORY_MIN_SIMILARITY`; the deepest of equally
near collections); else a path built
from the note's keywords (:func:`rules.keyword_path`: the slugs of its first two keywords).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection

from cortex_pg.collections import repository
from cortex_pg.collections.rules import CATEGORY_MIN_SIMILARITY, clean_llm_category, keyword_path
from cortex_pg.errors import translate_db_errors

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cortex_pg.store.memory_store import MemoryStore


def existing_categories_text(conn: Connection, user_id: str, limit: int = 30) -> str:
    """The user's category prefixes as prompt lines ``"work.programming (12 notes)"``, most
    notes first (at most ``limit``); ``""`` when there are none."""
    return "\n".join(f"{path} ({n} notes)" for path, n in repository.category_counts(conn, user_id, limit))


def note_category(
    store: MemoryStore,
    user_id: str,
    note_id: str,
    keywords: Sequence[str],
    llm_category: object = None,
) -> tuple[str, str]:
    """The category of a stored note that has none, and where it came from.

    Args:
        user_id, note_id: the note (its text embedding of the store's model is read).
        keywords: the note's keywords, for the keyword path.
        llm_category: the LLM's suggestion, if any.

    Returns:
        ``(path, source)`` with source ``"llm"``, ``"collection"`` or ``"keywords"``.
    """
    suggested = clean_llm_category(llm_category)
    if suggested is not None:
        return suggested, "llm"
    with translate_db_errors(), store.engine.connect() as conn:
        nearest = repository.nearest_to_note(conn, user_id, note_id, store.embedder.name)
    if nearest is not None and nearest[1] >= CATEGORY_MIN_SIMILARITY:
        return nearest[0], "collection"
    return keyword_path(keywords), "keywords"
