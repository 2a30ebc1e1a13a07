"""Argument models of the agent tools (pydantic), shared by the LangChain tools and the MCP
server: one definition per tool, so both publish the same JSON schema.

``AddNoteArgs`` and ``SearchArgs`` follow the Prem Cortex documentation's LangChain tools
(content, user_id, session_id, time, context, tags, metadata; query, limit 1-50,
memory_source, temporal_weight 0-1, date_range, where_filter, user_id, session_id).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

UserId = Field(None, description="The tenant whose memory is used (default 'default').")
SessionId = Field(None, description="A session within the user's memory (default 'default').")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddNoteArgs(_Args):
    """Store a note in the agent's memory (short- and long-term)."""

    content: str = Field(description="The text to remember.")
    user_id: str | None = UserId
    session_id: str | None = SessionId
    time: str | None = Field(
        None, description="When it happened, RFC 3339 (e.g. 2024-03-20T14:00:00Z); default now."
    )
    context: str | None = Field(None, description="Free-text context of the note (e.g. 'Project planning').")
    tags: list[str] | None = Field(None, description="Labels for filtering, e.g. ['preferences'].")
    metadata: dict[str, Any] | None = Field(None, description="JSON object kept with the note.")


class SearchArgs(_Args):
    """Search the agent's memory: hybrid vector + full-text, with recency, date window and filters."""

    query: str = Field(description="What to look for.")
    limit: int = Field(5, ge=1, le=50, description="Results wanted, 1-50.")
    memory_source: Literal["all", "stm", "ltm"] = Field(
        "all", description="'all' (both tiers), 'stm' (short-term) or 'ltm' (long-term)."
    )
    temporal_weight: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Weight of recency in [0, 1]: score = (1 - w) * relevance + w * exp(-days_ago / 7); "
        "null: 0.7 when the query names a time ('yesterday', 'recent', ...) or a date_range is given, else 0.",
    )
    date_range: str | dict[str, str] | None = Field(
        None,
        description="Only notes in this window: 'today', 'yesterday', 'last week', 'last month', "
        "'2024-03', '2024', 'START/END', {'start': ..., 'end': ...} or a phrase such as '3 days ago'.",
    )
    where_filter: dict[str, Any] | None = Field(
        None,
        description="Filter on fields and metadata keys: {field: value} or operators $eq $ne $gt $gte $lt "
        "$lte $in $nin $contains $and $or $not, e.g. {'tags': {'$contains': 'work'}}.",
    )
    user_id: str | None = UserId
    session_id: str | None = Field(None, description="Only this session (default: all the user's sessions).")


class BuildContextArgs(_Args):
    """The context text for a task from the calute memory of (user_id, scope) (recent items,
    relevant knowledge, known entities, related memories) and the user's notes written with
    add_note (relevant notes)."""

    task_description: str = Field(description="The task the agent is about to do.")
    agent_role: str | None = Field(None, description="Only knowledge saved by this agent role.")
    additional_context: str | None = Field(None, description="Background placed first.")
    max_items: int = Field(10, ge=1, le=50, description="Contextual items considered, 1-50.")
    user_id: str | None = UserId
    scope: str | None = Field(None, description="The calute memory's scope (default 'default').")


class NoteIdArgs(_Args):
    """A note by id."""

    memory_id: str = Field(description="The note's id (a UUID).")
    user_id: str | None = Field(None, description="The note's tenant (default 'default').")


class UpdateArgs(NoteIdArgs):
    """Change fields of a note; fields left out stay as they are."""

    content: str | None = Field(None, description="New text (re-embedded).")
    context: str | None = None
    tags: list[str] | None = None
    keywords: list[str] | None = None
    metadata: dict[str, Any] | None = Field(
        None, description="Merged into the stored metadata; a key set to null is removed."
    )
    importance: float | None = Field(None, ge=0, le=1, description="In [0, 1].")
    time: str | None = Field(None, description="The memory's own time, RFC 3339.")


class EntityArgs(_Args):
    """An entity of the user's knowledge graph, by name (any case)."""

    name: str = Field(min_length=1, max_length=200, description="The entity's name, e.g. 'Alice'.")
    user_id: str | None = UserId


class RelatedEntitiesArgs(EntityArgs):
    """Entities within max_depth relationships of an entity."""

    max_depth: int = Field(2, ge=1, le=10, description="Hops from the entity, 1-10.")


class LinkedNotesArgs(NoteIdArgs):
    """Notes reachable from a note along its links (evolution or hand-made)."""

    depth: int = Field(2, ge=1, le=10, description="Links followed, 1-10.")
    min_strength: float = Field(0.0, ge=0, le=1, description="Least product of link strengths on the path.")


def signature_of(model: type[BaseModel]) -> inspect.Signature:
    """A keyword-only signature with one ``Annotated[type, FieldInfo]`` parameter per field of
    ``model`` (how the MCP SDK reads a tool's JSON schema from a function)."""
    params = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if info.is_required() else info.default,
            annotation=Annotated[info.annotation, info],
        )
        for name, info in model.model_fields.items()
    ]
    return inspect.Signature(params, return_annotation=dict[str, Any])
