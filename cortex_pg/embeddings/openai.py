"""OpenAI (or any OpenAI-compatible server's) embeddings, e.g. ``text-embedding-3-small``."""

from __future__ import annotations

from collections.abc import Sequence

from cortex_pg.errors import CortexPGError, ValidationError

_KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


class OpenAIEmbedder:
    """Embeddings from the OpenAI API.

    Args:
        model: embedding model name (stored as ``embeddings.model``).
        api_key: defaults to ``OPENAI_API_KEY``.
        base_url: an OpenAI-compatible endpoint (defaults to ``OPENAI_BASE_URL`` / the OpenAI API).
        dim: output dimension; required for models not in the built-in table.
        batch_size: texts per request.
        timeout: seconds per request.

    Raises:
        CortexPGError: the ``openai`` package is missing or the dimension is unknown.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        api_key: str | None = None,
        base_url: str | None = None,
        dim: int | None = None,
        batch_size: int = 256,
        timeout: float = 30.0,
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise CortexPGError(
                "the openai package is not installed; pip install 'cortex-pg[openai]'"
            ) from exc
        resolved_dim = dim or _KNOWN_DIMS.get(model)
        if resolved_dim is None:
            raise CortexPGError(f"unknown dimension for embedding model {model!r}; pass dim=")
        self.name = model
        self.dim = resolved_dim
        self.batch_size = batch_size
        try:
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=2)
        except openai.OpenAIError as exc:  # e.g. no api_key and no OPENAI_API_KEY
            raise ValidationError("api_key", f"OpenAI embeddings need a key: {exc}") from None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in batches; returns ``len(texts)`` vectors of length ``dim``."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            resp = self._client.embeddings.create(model=self.name, input=batch)
            rows = sorted(resp.data, key=lambda d: d.index)
            for row in rows:
                if len(row.embedding) != self.dim:
                    raise CortexPGError(
                        f"{self.name} returned {len(row.embedding)} dimensions, expected {self.dim}"
                    )
                out.append(list(row.embedding))
        return out
