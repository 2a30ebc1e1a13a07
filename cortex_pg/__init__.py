"""cortex-pg: long-term memory for AI agents in which PostgreSQL does the work.

Public names only; see :class:`MemoryStore` for the repository API.
"""

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
from cortex_pg.errors import (
    ConflictError,
    CortexPGError,
    DatabaseError,
    DatabaseUnavailableError,
    EmbeddingDimensionError,
    EmbeddingModelError,
    ImmutableFieldError,
    MergedNoteError,
    NotFoundError,
    SchemaError,
    ServerError,
    ValidationError,
)

__all__ = [
    "AgenticMemorySystem",
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
    "DatabaseError",
    "DatabaseUnavailableError",
    "EmbeddingDimensionError",
    "EmbeddingModelError",
    "ImmutableFieldError",
    "MergedNoteError",
    "NotFoundError",
    "SchemaError",
    "ServerError",
    "ValidationError",
]

__version__ = "0.1.0"
