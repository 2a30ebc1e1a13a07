"""Embedders: turn texts into vectors. See :class:`Embedder` for the protocol."""

from cortex_pg.embeddings.base import Embedder, embedder_from_name
from cortex_pg.embeddings.hashing import HashingEmbedder
from cortex_pg.embeddings.openai import OpenAIEmbedder
from cortex_pg.embeddings.sentence_transformers import MiniLMEmbedder, SentenceTransformerEmbedder

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "embedder_from_name",
]
