"""Embedders: turn texts into vectors. See :class:`Embedder` for the protocol.

Importing this package is light: onnxruntime, tokenizers, torch and openai are imported
when a model is first loaded, never here.
"""

from cortex_pg.embeddings.base import Embedder, embedder_from_name
from cortex_pg.embeddings.hashing import HashingEmbedder
from cortex_pg.embeddings.minilm import MiniLMEmbedder
from cortex_pg.embeddings.openai import OpenAIEmbedder
from cortex_pg.embeddings.sentence_transformers import MiniLMTorchEmbedder, SentenceTransformerEmbedder

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "MiniLMTorchEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "embedder_from_name",
]
