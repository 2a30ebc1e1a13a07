"""Entities and relationships as a graph in PostgreSQL (calute's EntityMemory on the store)."""

from cortex_pg.entities.extract import Extraction, Mention, Relation, extract, extract_entities
from cortex_pg.entities.memory import EntityMemory, MemoryItem
from cortex_pg.entities.repository import EntityRecord, EntityStore, RelatedEntity, RelationshipRecord

__all__ = [
    "EntityMemory",
    "EntityRecord",
    "EntityStore",
    "Extraction",
    "MemoryItem",
    "Mention",
    "RelatedEntity",
    "Relation",
    "RelationshipRecord",
    "extract",
    "extract_entities",
]
