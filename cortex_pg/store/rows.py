"""Row conversions and the tenant-scope decorator shared by the store's modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache, wraps
from typing import Any

from cortex_pg.db import tenancy
from cortex_pg.store import validation
from cortex_pg.store.records import Note, SearchResult


def tenant_scoped(fn):  # noqa: ANN001, ANN202
    """Under ``isolation="rls"``, run the method's transactions as its ``user_id`` (default tenant)."""

    @wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.isolation != "rls":
            return fn(self, *args, **kwargs)
        uid = validation.scope_id(kwargs.get("user_id"), "user_id")
        with tenancy.tenant_scope(uid):
            return fn(self, *args, **kwargs)

    return wrapper


@cache
def _vector_format(dim: int) -> str:
    return "[" + ",".join(["%.9g"] * dim) + "]"


def vector_literal(vec: Sequence[float]) -> str:
    """pgvector text form, ``[x1,x2,...]``: 9 significant digits, which carry a float32 (what
    pgvector stores) exactly; one ``%`` formatting per vector (about 3 times faster than
    formatting each number on its own, which mattered at ingest)."""
    return _vector_format(len(vec)) % tuple(float(x) for x in vec)


def note_from_row(row: Mapping[str, Any]) -> Note:
    merged = row.get("merged_into")
    return Note(
        id=str(row["id"]),
        user_id=row["user_id"],
        session_id=row["session_id"],
        content=row["content"],
        keywords=list(row["keywords"] or []),
        tags=list(row["tags"] or []),
        context=row["context"],
        category=row["category"],
        memory_type=row["memory_type"],
        metadata=dict(row["metadata"] or {}),
        importance=float(row["importance"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_accessed_at=row["last_accessed_at"],
        access_count=int(row["access_count"]),
        memory_tier=row.get("memory_tier", "ltm"),
        merged_into=str(merged) if merged else None,
        evolution_history=list(row.get("evolution_history") or []),
    )


def result_from_row(row: Mapping[str, Any]) -> SearchResult:
    return SearchResult(
        note=note_from_row(row),
        score=float(row["score"]),
        relevance_score=float(row["relevance_score"]),
        semantic_score=None if row["semantic_score"] is None else float(row["semantic_score"]),
        distance=None if row["distance"] is None else float(row["distance"]),
        text_score=float(row["text_score"]),
        recency_score=float(row["recency_score"]),
        vector_rank=row["vector_rank"],
        text_rank=row["text_rank"],
        context_score=None if row.get("context_score") is None else float(row["context_score"]),
        entity_score=None if row.get("entity_score") is None else float(row["entity_score"]),
        entity_rank=row.get("entity_rank"),
    )
