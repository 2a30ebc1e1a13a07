"""LLM access (any OpenAI-compatible endpoint) and the offline fallbacks used without one."""

from cortex_pg.llm.analyzer import ContentAnalyzer, light_keywords
from cortex_pg.llm.client import LLMClient, LLMError, llm_from_settings

__all__ = ["ContentAnalyzer", "LLMClient", "LLMError", "light_keywords", "llm_from_settings"]
