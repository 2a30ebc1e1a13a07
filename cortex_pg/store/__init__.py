"""The repository layer."""

from cortex_pg.store.memory_store import MemoryStore
from cortex_pg.store.records import Note, SearchResult

__all__ = ["MemoryStore", "Note", "SearchResult"]
