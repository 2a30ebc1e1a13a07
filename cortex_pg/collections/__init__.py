"""Smart collections: categories as dot paths, collections of notes per category prefix, and
search through them (see ``sql/functions/collections/v1.sql`` for the counts and jobs)."""

from cortex_pg.collections.categorize import existing_categories_text, note_category
from cortex_pg.collections.refresh import LLMDescriber, offline_describer, refresh_collection
from cortex_pg.collections.repository import (
    CollectionHit,
    CollectionInfo,
    category_counts,
    enqueue_job,
    list_collections,
)
from cortex_pg.collections.rules import clean_llm_category, keyword_path
from cortex_pg.collections.search import LLMEnhancer, offline_enhancer, search_with_collections

__all__ = [
    "CollectionHit",
    "CollectionInfo",
    "LLMDescriber",
    "LLMEnhancer",
    "category_counts",
    "clean_llm_category",
    "enqueue_job",
    "existing_categories_text",
    "keyword_path",
    "list_collections",
    "note_category",
    "offline_describer",
    "offline_enhancer",
    "refresh_collection",
    "search_with_collections",
]
