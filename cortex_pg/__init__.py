"""cortex-pg: long-term memory for AI agents in which PostgreSQL does the work.

Public names only; see :class:`MemoryStore` for the repository API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cortex_pg.errors import (
    ConflictError,
    CortexPGError,
    CortexPGWarning,
    DatabaseError,
    DatabaseUnavailableError,
    EmbeddingDimensionError,
    EmbeddingModelError,
    ImmutableFieldError,
    MergedNoteError,
    NotFoundError,
    SchemaError,
    ServerError,
    STMLostWarning,
    ValidationError,
)

# The facades import SQLAlchemy, Alembic and the store (about a second): loaded on first use
# of their name, so `import cortex_pg.embeddings` or the CLI's argument parsing stays fast.
_LAZY = {
    "ContextualMemory": "cortex_pg.compat.calute",
    "CortexMemory": "cortex_pg.compat.calute",
    "EntityMemory": "cortex_pg.compat.calute",
    "LongTermMemory": "cortex_pg.compat.calute",
    "MemoryItem": "cortex_pg.compat.calute",
    "ShortTermMemory": "cortex_pg.compat.calute",
    "UserMemory": "cortex_pg.compat.calute",
    "AgenticMemorySystem": "cortex_pg.compat.prem",
    "Chunk": "cortex_pg.documents",
    "chunk_text": "cortex_pg.documents",
    "AsyncMemoryStore": "cortex_pg.store.async_store",
    "MemoryNote": "cortex_pg.compat.prem",
}

if TYPE_CHECKING:
    from cortex_pg.compat.calute import (
        ContextualMemory,
        CortexMemory,
        EntityMemory,
        LongTermMemory,
        MemoryItem,
        ShortTermMemory,
        UserMemory,
    )
    from cortex_pg.compat.prem import AgenticMemorySystem, MemoryNote
    from cortex_pg.documents import Chunk, chunk_text
    from cortex_pg.store.async_store import AsyncMemoryStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cortex_pg' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AgenticMemorySystem",
    "Chunk",
    "chunk_text",
    "AsyncMemoryStore",
    "MemoryNote",
    "ContextualMemory",
    "CortexMemory",
    "EntityMemory",
    "LongTermMemory",
    "MemoryItem",
    "ShortTermMemory",
    "UserMemory",
    "ConflictError",
    "CortexPGError",
    "CortexPGWarning",
    "DatabaseError",
    "DatabaseUnavailableError",
    "EmbeddingDimensionError",
    "EmbeddingModelError",
    "ImmutableFieldError",
    "MergedNoteError",
    "NotFoundError",
    "SchemaError",
    "ServerError",
    "STMLostWarning",
    "ValidationError",
]

__version__ = "0.1.0"
