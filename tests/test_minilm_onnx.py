"""The ONNX Runtime MiniLM gives the vectors of the sentence-transformers (torch) path.

Reference vectors in ``tests/data/minilm_reference.json`` were computed once with
sentence-transformers on the same packaged weights; the live comparison runs where torch is
installed (``scripts/setup --torch``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cortex_pg.embeddings import MiniLMEmbedder, embedder_from_name
from cortex_pg.embeddings.minilm import ensure_onnx, model_dir, onnx_path

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())


def _cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    x, y = np.asarray(a), np.asarray(b)
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


@pytest.mark.model
def test_onnx_vectors_match_the_sentence_transformers_reference(minilm):
    assert minilm.name == REFERENCE["model"] == "all-MiniLM-L6-v2" and minilm.dim == 384
    got = minilm.embed(REFERENCE["texts"])
    assert len(got) == len(REFERENCE["texts"]) and all(len(v) == 384 for v in got)
    assert np.all(1.0 - _cosines(got, REFERENCE["vectors"]) < 1e-4)
    assert np.allclose(np.linalg.norm(np.asarray(got), axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_onnx_order_and_batching_do_not_change_vectors(minilm):
    texts = REFERENCE["texts"]
    one_by_one = [minilm.embed([t])[0] for t in texts]
    small_batches = MiniLMEmbedder(batch_size=2).embed(texts[::-1])[::-1]
    assert np.all(1.0 - _cosines(one_by_one, small_batches) < 1e-5)


@pytest.mark.model
def test_onnx_matches_the_torch_path_live(minilm):
    pytest.importorskip("sentence_transformers")
    texts = ["How do we deploy the service?", "Leo is working on a robot arm.", *REFERENCE["texts"][:3]]
    torch_vectors = embedder_from_name("minilm-torch").embed(texts)
    assert np.all(1.0 - _cosines(minilm.embed(texts), torch_vectors) < 1e-4)


@pytest.mark.model
def test_the_onnx_file_is_written_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_PG_CACHE_DIR", str(tmp_path))
    path = ensure_onnx()
    assert (
        path == onnx_path(model_dir()) and path.parent == tmp_path / "models" and path.stat().st_size > 80e6
    )
    stamp = path.stat().st_mtime_ns
    assert ensure_onnx() == path and path.stat().st_mtime_ns == stamp  # not rewritten
    assert list((tmp_path / "models").iterdir()) == [path]  # no temporary file left


def test_importing_the_embedders_loads_neither_torch_nor_onnxruntime():
    code = (
        "import sys, cortex_pg.embeddings, cortex_pg.cli; "
        "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime', 'sentence_transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
