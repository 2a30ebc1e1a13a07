"""Request and response bodies of the HTTP service (pydantic; they make the OpenAPI spec).

Requests are strict: unknown fields are refused (``user_id`` among them: the tenant is the
API key's), and JSON types are not coerced (``"5"`` is not an integer). Ranges stated here are
the store's; the store checks the rest (blank text, NUL characters, filter grammar) and its
errors name the same fields. Times are RFC 3339 strings (a time without offset is UTC);
responses give them in UTC.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cortex_pg.store.validation import (
    MAX_CONTENT_LENGTH,
    MAX_CONTEXT_LENGTH,
    MAX_ID_LENGTH,
    MAX_LINK_REASON_LENGTH,
    MAX_LIST_ITEM_LENGTH,
    MAX_LIST_ITEMS,
    MAX_MEMORY_TYPE_LENGTH,
    MAX_QUERY_LENGTH,
)

_REQUEST = ConfigDict(extra="forbid", strict=True)
_TIME = {"format": "date-time"}
# (checked by the store, which strips the strings first and counts distinct ones)
_LIST = (
    f"At most {MAX_LIST_ITEMS:,} distinct strings (stripped; blanks dropped), "
    f"each at most {MAX_LIST_ITEM_LENGTH} characters."
)
_MEMORY_TYPE = f"At most {MAX_MEMORY_TYPE_LENGTH} characters (stripped)."


def _unchanged(*, format: str | None = None, **kwargs: Any) -> Any:
    """A PATCH field: left out = unchanged (no default in the schema; null only where typed)."""

    def extra(schema: dict[str, Any]) -> None:
        schema.pop("default", None)
        if format:
            schema["format"] = format

    return Field(None, json_schema_extra=extra, **kwargs)


# ---------------------------------------------------------------------- requests
class NoteIn(BaseModel):
    """A note to store (``POST /notes``); the user is the API key's."""

    model_config = _REQUEST

    content: str = Field(min_length=1, max_length=MAX_CONTENT_LENGTH, description="The text; not blank.")
    session_id: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, description='Scope; default "default".'
    )
    time: str | None = Field(
        None, json_schema_extra=_TIME, description="The memory's own time (RFC 3339); default now."
    )
    keywords: list[str] | None = Field(None, description=_LIST)
    tags: list[str] | None = Field(None, description=_LIST)
    context: str | None = Field(None, max_length=MAX_CONTEXT_LENGTH)
    category: str | None = Field(None, description="A dot path, e.g. work.programming.python.")
    metadata: dict[str, Any] | None = Field(None, description="Any JSON object.")
    importance: float = Field(0.5, ge=0, le=1)
    memory_type: str = Field("note", description=_MEMORY_TYPE)
    to_stm: bool = Field(True, description="Also put the note in short-term memory.")


class LinkIn(BaseModel):
    """One outgoing link of a note (``PATCH /notes/{id}``'s ``links``)."""

    model_config = _REQUEST

    type: str = Field("related", min_length=1, max_length=64, description="supports, extends, related, ...")
    strength: float = Field(0.5, ge=0, le=1)
    reason: str | None = Field(None, max_length=MAX_LINK_REASON_LENGTH)


class NotePatch(BaseModel):
    """Fields to change (``PATCH /notes/{id}``); fields left out stay as they are."""

    model_config = _REQUEST

    content: str = _unchanged(min_length=1, max_length=MAX_CONTENT_LENGTH, description="Re-embedded.")
    time: str = _unchanged(format="date-time", description="The memory's own time (RFC 3339).")
    keywords: list[str] = _unchanged(description=_LIST)
    tags: list[str] = _unchanged(description=_LIST)
    context: str | None = _unchanged(max_length=MAX_CONTEXT_LENGTH, description="null clears it.")
    category: str | None = _unchanged(description="null clears it.")
    metadata: dict[str, Any] = _unchanged(
        description="Merged into the stored object: keys given replace, a null value deletes the key."
    )
    importance: float = _unchanged(ge=0, le=1)
    memory_type: str = _unchanged(description=_MEMORY_TYPE)
    links: dict[str, LinkIn] = _unchanged(
        description="{target note id: link}: the note's outgoing links become exactly these "
        "(each with its reciprocal); {} removes them.",
    )


class SearchIn(BaseModel):
    """A search (``POST /search``): the fields of ``MemoryStore.search``; the user is the key's."""

    model_config = _REQUEST

    query: str = Field(min_length=1, max_length=MAX_QUERY_LENGTH)
    session_id: str | None = Field(None, min_length=1, max_length=MAX_ID_LENGTH)
    limit: int = Field(10, ge=1, le=1000)
    temporal_weight: float = Field(0.0, ge=0, le=1, description="Recency weight.")
    date_from: str | None = Field(None, json_schema_extra=_TIME, description="date_from <= time.")
    date_to: str | None = Field(None, json_schema_extra=_TIME, description="time < date_to.")
    now: str | None = Field(None, json_schema_extra=_TIME, description="Ages are measured from here.")
    memory_source: Literal["all", "ltm", "stm"] = "all"
    where_filter: dict[str, Any] | None = Field(
        None, description="$eq $ne $gt $gte $lt $lte $in $nin $contains $and $or $not on fields and metadata."
    )
    context: str | None = Field(
        None, max_length=MAX_QUERY_LENGTH, description="Re-ranks by cos(context, note)."
    )
    touch: bool = Field(True, description="Count returned notes as accessed.")
    include_links: bool = False
    link_depth: int = Field(1, ge=1, le=10)
    entities: bool = False
    expand_entities: bool = False
    entity_weight: float = Field(0.5, ge=0, le=10)
    ranking: dict[str, Any] | None = Field(
        None,
        description="The ranking's constants (fusion, vector_weight, context_weight, length_prior, "
        "smoothing_prev, smoothing_next, expansion, rrf_k, answer_weight, speaker_weight, date_weight, "
        "unnamed_query_weight), "
        "each optional; none = the defaults.",
    )


# ---------------------------------------------------------------------- responses
class NoteOut(BaseModel):
    """A stored note (no embedding)."""

    id: uuid.UUID
    user_id: str
    session_id: str
    content: str
    keywords: list[str]
    tags: list[str]
    context: str | None
    category: str | None
    memory_type: str
    metadata: dict[str, Any]
    importance: float
    created_at: datetime = Field(description="The memory's own time.")
    updated_at: datetime
    last_accessed_at: datetime
    access_count: int
    memory_tier: Literal["ltm", "stm"]
    merged_into: uuid.UUID | None
    evolution_history: list[Any]


class NotePage(BaseModel):
    """One page of ``GET /notes``, oldest first."""

    items: list[NoteOut]
    total: int = Field(description="Notes of the user (and session) in the tier.")
    limit: int
    offset: int
    next_offset: int | None = Field(description="The offset of the next page; null on the last.")


class HistoryEntry(BaseModel):
    """One change of a note (``cortex.note_history``): op insert/update/delete/merge, old and
    new values of the fields that changed."""

    op: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    changed_at: datetime


class LinkedNoteOut(BaseModel):
    """A note reached along links: ``via`` -> this note is the last link of the path."""

    note: NoteOut
    hops: int
    path_strength: float = Field(description="Product of the strengths along the path, in [0, 1].")
    via: uuid.UUID
    link_type: str
    link_strength: float
    link_reason: str | None
    path: list[uuid.UUID]


class NoteLinks(BaseModel):
    """A note and the notes reachable from it (``GET /notes/{id}/links``), nearest first."""

    note: NoteOut
    links: list[LinkedNoteOut]


class SearchResultOut(BaseModel):
    """A search result: the note and every part of its score (see ``MemoryStore.search``)."""

    note: NoteOut
    score: float = Field(description="Final score, best first.")
    relevance_score: float = Field(description="Fused vector + BM25 relevance, in [0, 1].")
    semantic_score: float | None = Field(description="Vector part: cosine, in [-1, 1].")
    distance: float | None
    text_score: float = Field(description="BM25 part (0 when no query term matched).")
    recency_score: float = Field(description="exp(-age_days / 7), in [0, 1] (0 beyond 4,900 days).")
    vector_rank: int | None
    text_rank: int | None
    context_score: float | None = Field(description="cos(context, note) when a context was given.")
    entity_score: float | None
    entity_rank: int | None
    is_linked: bool
    linked_from: uuid.UUID | None
    relationship_type: str | None
    relationship_strength: float | None
    relationship_reason: str | None


class SearchOut(BaseModel):
    results: list[SearchResultOut]


class EntityOut(BaseModel):
    name: str
    kind: str
    first_seen: datetime
    last_seen: datetime
    frequency: int = Field(description="Notes that mention it.")
    contexts: list[str] = Field(description="Snippets of the last mentions, oldest first.")


class FactOut(BaseModel):
    """A relationship ``source --relation--> target``, valid in [valid_from, valid_to)."""

    source: str
    relation: str
    target: str
    weight: float
    valid_from: datetime
    valid_to: datetime | None
    source_note_id: uuid.UUID | None


class EntityDetail(EntityOut):
    """An entity, the notes that mention it and its facts valid now (``GET /entities/{name}``)."""

    mentions: list[uuid.UUID]
    facts: list[FactOut]


class RelatedOut(BaseModel):
    name: str
    kind: str
    depth: int = Field(description="Hops from the entity asked about.")


class Neighbourhood(BaseModel):
    """An entity's neighbours within ``depth`` hops and the facts among them (valid now)."""

    entity: EntityOut
    related: list[RelatedOut]
    facts: list[FactOut]


class Health(BaseModel):
    status: Literal["ok"]
    database: Literal["ok"]
    version: str


class ErrorDetail(BaseModel):
    field: str | None
    reason: str


class ErrorInfo(BaseModel):
    type: str = Field(description="validation_error, unauthorized, not_found, conflict, unavailable, ...")
    field: str | None = Field(description="The request's field that is wrong, when one is.")
    reason: str
    message: str
    details: list[ErrorDetail]


class ErrorBody(BaseModel):
    """Every error response (see ``cortex_pg.server.errors``)."""

    error: ErrorInfo
