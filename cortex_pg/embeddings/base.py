"""The Embedder protocol and a factory by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from cortex_pg.errors import ValidationError


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to fixed-length vectors.

    Attributes:
        name: model name stored beside every embedding (``embeddings.model``); two embedders
            with the same name must produce the same vectors.
        dim: length of every vector ``embed`` returns.
    """

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; returns ``len(texts)`` vectors of length ``dim``, L2-normalised."""
        ...


def embedder_from_name(name: str, **kwargs: object) -> Embedder:
    """Build an embedder from a short or model name.

    Args:
        name: ``"minilm"`` / ``"all-MiniLM-L6-v2"`` (offline, ONNX Runtime), ``"minilm-torch"``
            (the same model and vectors through sentence-transformers; needs the torch extra),
            ``"openai"`` / ``"text-embedding-3-small"`` / ``"text-embedding-3-large"``,
            or ``"hashing"`` (deterministic, for tests).
        **kwargs: passed to the embedder's constructor.

    Raises:
        ValidationError: unknown name.
    """
    key = name.strip()
    lower = key.lower()
    if lower in ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"):
        from cortex_pg.embeddings.minilm import MiniLMEmbedder

        return MiniLMEmbedder(**kwargs)  # type: ignore[arg-type]
    if lower == "minilm-torch":
        from cortex_pg.embeddings.sentence_transformers import MiniLMTorchEmbedder

        return MiniLMTorchEmbedder(**kwargs)  # type: ignore[arg-type]
    if lower == "openai" or lower.startswith("text-embedding-"):
        from cortex_pg.embeddings.openai import OpenAIEmbedder

        model = "text-embedding-3-small" if lower == "openai" else key
        return OpenAIEmbedder(model=model, **kwargs)  # type: ignore[arg-type]
    if lower.startswith("hashing"):
        from cortex_pg.embeddings.hashing import HashingEmbedder

        return HashingEmbedder(**kwargs)  # type: ignore[arg-type]
    raise ValidationError(
        "embedder", f"unknown embedder {name!r}; use minilm, minilm-torch, openai or hashing"
    )


def embed_threads() -> int:
    """Compute threads for a local embedding model: ``CORTEX_PG_EMBED_THREADS``, else half the
    CPUs (at least 1). One thread per CPU in each of several writer processes oversubscribes
    the machine (on 2 CPUs, 2 processes x 50 ``add`` took 151 s with one per CPU and 44 s with
    one each, ``benchmarks/writers.py``); half leaves room for a second process and PostgreSQL.
    """
    import os

    configured = os.environ.get("CORTEX_PG_EMBED_THREADS", "")
    return (
        int(configured)
        if configured.isdigit() and int(configured) > 0
        else max(1, (os.cpu_count() or 2) // 2)
    )
