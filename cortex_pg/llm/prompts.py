"""Prompts as data: each is a function from its context to chat messages, with its JSON schema."""

from __future__ import annotations

from typing import Any

SYSTEM_JSON = "You must respond with a JSON object that follows the given schema."

ANALYSIS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keywords": {"type": "array", "items": {"type": "string"}},
        "context": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["keywords", "context", "tags"],
    "additionalProperties": False,
}


def analysis_schema(with_category: bool) -> dict[str, Any]:
    """The analysis answer's schema; ``category`` (a dot path) is required when asked for."""
    if not with_category:
        return ANALYSIS_SCHEMA
    schema = {
        **ANALYSIS_SCHEMA,
        "properties": {**ANALYSIS_SCHEMA["properties"], "category": {"type": "string"}},
    }
    schema["required"] = [*ANALYSIS_SCHEMA["required"], "category"]
    return schema


def analysis_messages(
    content: str, *, with_category: bool = False, existing_categories: str = ""
) -> list[dict]:
    """Messages asking for keywords, a one-sentence context, tags (and a dot-path category)."""
    steps = [
        "1. Identify the most salient keywords (nouns, verbs, key concepts), most important first, "
        "at least three; no speaker names or times.",
        "2. Summarise the main topic, key points and purpose in one sentence (the context).",
        "3. Create at least three broad categorical tags (domain, format, type).",
    ]
    if with_category:
        steps.append(
            "4. Give a hierarchical category in lowercase dot notation, 2-4 levels, no spaces, "
            "e.g. work.programming.python or personal.health.fitness; never 'general' or 'uncategorized'."
            + (
                "\nExisting categories (with their note counts): reuse one when it fits, or extend "
                "one by a level, and only otherwise make a new path:\n" + existing_categories
                if existing_categories
                else ""
            )
        )
    user = "Analyse the content below.\n" + "\n".join(steps) + "\n\nContent for analysis:\n" + content
    return [{"role": "system", "content": SYSTEM_JSON}, {"role": "user", "content": user}]


EVOLUTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "should_evolve": {"type": "boolean"},
        "actions": {
            "type": "array",
            "items": {"type": "string", "enum": ["strengthen", "update_neighbor", "merge_memories"]},
        },
        "suggested_connections": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string"},
                    "strength": {"type": "number"},
                    "reason": {"type": "string"},
                },
                "required": ["id", "type", "strength", "reason"],
                "additionalProperties": False,
            },
        },
        "tags_to_update": {"type": "array", "items": {"type": "string"}},
        "new_context_neighborhood": {"type": "array", "items": {"type": "string"}},
        "new_tags_neighborhood": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "merge_candidates": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "merge_strategy": {"type": "string", "enum": ["combine", "augment", "replace"]},
                    "reasoning": {"type": "string"},
                },
                "required": ["id", "merge_strategy", "reasoning"],
                "additionalProperties": False,
            },
        },
    },
    "required": [
        "should_evolve",
        "actions",
        "suggested_connections",
        "tags_to_update",
        "new_context_neighborhood",
        "new_tags_neighborhood",
        "merge_candidates",
    ],
    "additionalProperties": False,
}


def evolution_messages(prompt: str) -> list[dict]:
    """Messages for an evolution decision; ``prompt`` from ``cortex_pg.evolution.decide.build_prompt``."""
    return [{"role": "system", "content": SYSTEM_JSON}, {"role": "user", "content": prompt}]


COLLECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"description": {"type": "string"}, "query_helper": {"type": "string"}},
    "required": ["description", "query_helper"],
    "additionalProperties": False,
}


def collection_messages(path: str, samples: list[str] | tuple[str, ...] | Any) -> list[dict]:
    """Messages asking for a collection's one-sentence description and a query helper (a few
    space-separated keywords that, appended to a search query, find its notes), from up to 20
    of its notes."""
    notes = "\n".join(f"- {s[:500]}" for s in list(samples)[:20])
    user = (
        f"These notes form the category {path!r}.\n"
        "1. Describe what the category holds in one sentence (the description).\n"
        "2. Give 3-6 lowercase keywords, separated by spaces, that a search query about this "
        "category should include (the query_helper).\n\nNotes:\n" + notes
    )
    return [{"role": "system", "content": SYSTEM_JSON}, {"role": "user", "content": user}]


ENHANCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"relevant": {"type": "boolean"}, "enhanced_query": {"type": "string"}},
    "required": ["relevant", "enhanced_query"],
    "additionalProperties": False,
}


def enhance_messages(query: str, path: str, description: str, query_helper: str) -> list[dict]:
    """Messages asking whether a collection is relevant to a query, and the query rewritten for
    searching inside it (``{relevant, enhanced_query}``)."""
    user = (
        f"Search query: {query}\n"
        f"Collection: {path}\nDescription: {description}\nTypical keywords: {query_helper}\n\n"
        "Is this collection relevant to the query? If it is, rewrite the query so that it finds the "
        "collection's notes best (keep its meaning; add the collection's vocabulary); if not, "
        "return the query unchanged."
    )
    return [{"role": "system", "content": SYSTEM_JSON}, {"role": "user", "content": user}]
