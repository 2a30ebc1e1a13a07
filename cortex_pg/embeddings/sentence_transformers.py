"""sentence-transformers (PyTorch) embedders: the optional ``torch`` path.

The default MiniLM embedder runs on ONNX Runtime (:mod:`cortex_pg.embeddings.minilm`);
:class:`MiniLMTorchEmbedder` is the same model through sentence-transformers, for callers
that have torch installed (``pip install 'cortex-pg[torch]'``) and for the test that checks
both give the same vectors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from cortex_pg.errors import CortexPGError


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily on the first ``embed`` call.

    Args:
        model_path: directory (or hub id, when a hub is reachable) of the model.
        name: stored model name.
        dim: the model's output dimension (known up front so the store can check it
            without loading the model).
        batch_size: texts per forward pass.
    """

    def __init__(self, model_path: str, name: str, dim: int, batch_size: int = 64) -> None:
        self.model_path = model_path
        self.name = name
        self.dim = dim
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                try:  # no "Loading weights" bar on every CLI call
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()
                except ImportError:  # pragma: no cover
                    pass
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:  # pragma: no cover - depends on the install
                    raise CortexPGError(
                        "sentence-transformers is not installed; pip install 'cortex-pg[torch]'"
                    ) from exc
                self._model = SentenceTransformer(self.model_path, device="cpu")
                _limit_torch_threads()
            return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; returns ``len(texts)`` unit vectors of length ``dim``."""
        if not texts:
            return []
        model = self._load()
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return vectors.tolist()


class MiniLMTorchEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2 (384 dimensions) through sentence-transformers and torch; no download."""

    MODEL_NAME = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 64) -> None:
        from cortex_pg.embeddings.minilm import WINDOW_CHARS, model_dir

        self.window_chars = WINDOW_CHARS

        super().__init__(str(model_dir()), name=self.MODEL_NAME, dim=384, batch_size=batch_size)


def _limit_torch_threads() -> None:
    """Intra-op threads of torch: :func:`cortex_pg.embeddings.base.embed_threads`."""
    import torch

    from cortex_pg.embeddings.base import embed_threads

    torch.set_num_threads(embed_threads())
