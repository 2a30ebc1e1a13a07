"""The calute memory API on PostgreSQL.

``from cortex_pg.compat.calute import CortexMemory`` (or ``from cortex_pg import ...``)
replaces ``from calute.cortex.memory_integration import CortexMemory`` and
``from calute.memory import ...``. Differences from calute are listed in the README.
"""

from cortex_pg.compat.calute.contextual import ContextualMemory
from cortex_pg.compat.calute.cortex import CortexMemory
from cortex_pg.compat.calute.long_term import CleanupReport, LongTermMemory
from cortex_pg.compat.calute.short_term import ShortTermMemory
from cortex_pg.compat.calute.user import DEFAULT_PREFERENCES, UserMemory
from cortex_pg.compat.memory_item import MemoryItem
from cortex_pg.entities import EntityMemory

MemoryEntry = MemoryItem  # calute.memory's alias

__all__ = [
    "DEFAULT_PREFERENCES",
    "CleanupReport",
    "ContextualMemory",
    "CortexMemory",
    "EntityMemory",
    "LongTermMemory",
    "MemoryEntry",
    "MemoryItem",
    "ShortTermMemory",
    "UserMemory",
]
