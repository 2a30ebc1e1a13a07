"""Write all-MiniLM-L6-v2 as an ONNX graph, from the packaged safetensors weights, without torch.

The graph is the BERT encoder of ``transformers.BertModel`` (eval mode) written out with
``onnx.helper``: embeddings (word + absolute position + token type 0, LayerNorm), then
``num_hidden_layers`` blocks of 12-head self-attention (scaled dot product, padding masked
with a large negative bias) and a GELU (erf) feed-forward, each followed by residual +
LayerNorm. Inputs ``input_ids`` and ``attention_mask`` (int64, ``[batch, tokens]``); output
``last_hidden_state`` (float32, ``[batch, tokens, hidden]``). Mean pooling and L2
normalisation (sentence-transformers' ``1_Pooling`` + ``Normalize``) are done by the caller.

The file is written once per weights file (see :func:`cortex_pg.embeddings.minilm.onnx_path`);
building it takes about a second and needs the ``onnx`` package, running it only ``onnxruntime``.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

OPSET = 17  # LayerNormalization is an ONNX op from opset 17
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file (8-byte header length, JSON header, raw little-endian data)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = array.astype(np.float32) if array.dtype == np.float16 else array
    return out


def build_bert_onnx(model_dir: Path, target: Path) -> Path:
    """Write the BERT encoder of ``model_dir`` (config.json + model.safetensors) to ``target``.

    The file is written to a temporary name and renamed, so concurrent builders never leave a
    half-written file.

    Returns:
        ``target``.

    Raises:
        ImportError: the ``onnx`` package is missing.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    weights = read_safetensors(model_dir / "model.safetensors")
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))

    inits: list[Any] = []
    nodes: list[Any] = []
    counter = iter(range(1_000_000))

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def w(key: str) -> np.ndarray:
        return weights[prefix + key]

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{op.lower()}_{next(counter)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x: str, key: str) -> str:
        weight = const(key + ".weight_t", w(key + ".weight").T.astype(np.float32))
        return node("Add", [node("MatMul", [x, weight]), const(key + ".bias", w(key + ".bias"))])

    def layer_norm(x: str, key: str) -> str:
        return node(
            "LayerNormalization",
            [x, const(key + ".weight", w(key + ".weight")), const(key + ".bias", w(key + ".bias"))],
            axis=-1,
            epsilon=eps,
        )

    # embeddings: word + position[0:L] + token_type[0]
    words = node("Gather", [const("word_embeddings", w("embeddings.word_embeddings.weight")), "input_ids"])
    seq_len = node(
        "Slice",
        [
            node("Shape", ["input_ids"]),
            const("one_1d", np.array([1], np.int64)),
            const("two_1d", np.array([2], np.int64)),
        ],
    )
    positions = node(
        "Slice",
        [
            const("position_embeddings", w("embeddings.position_embeddings.weight")),
            const("zero_1d", np.array([0], np.int64)),
            seq_len,
            const("zero_axis", np.array([0], np.int64)),
        ],
    )
    token_type = const("token_type_0", w("embeddings.token_type_embeddings.weight")[0])
    x = layer_norm(node("Add", [node("Add", [words, positions]), token_type]), "embeddings.LayerNorm")

    # attention bias: 0 where attended, a large negative number on padding; [B, 1, 1, L]
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = node("Sub", [const("one_f", np.array(1.0, np.float32)), mask])
    bias = node(
        "Unsqueeze",
        [
            node("Mul", [inverted, const("neg_big", np.array(np.finfo(np.float32).min, np.float32))]),
            const("axes_12", np.array([1, 2], np.int64)),
        ],
    )
    split_shape = const("split_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    sqrt2 = const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))
    one = const("one", np.array(1.0, np.float32))

    def split_heads(t: str) -> str:  # [B, L, H] -> [B, heads, L, d]
        return node("Transpose", [node("Reshape", [t, split_shape])], perm=[0, 2, 1, 3])

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        q = split_heads(linear(x, p + "attention.self.query"))
        k = node(
            "Transpose",
            [node("Reshape", [linear(x, p + "attention.self.key"), split_shape])],
            perm=[0, 2, 3, 1],
        )
        v = split_heads(linear(x, p + "attention.self.value"))
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge_shape])
        attended = linear(context, p + "attention.output.dense")
        x = layer_norm(node("Add", [attended, x]), p + "attention.output.LayerNorm")
        inner = linear(x, p + "intermediate.dense")
        gelu = node(
            "Mul",
            [node("Mul", [inner, half]), node("Add", [node("Erf", [node("Div", [inner, sqrt2])]), one])],
        )
        x = layer_norm(node("Add", [linear(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", hidden])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cortex-pg"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
