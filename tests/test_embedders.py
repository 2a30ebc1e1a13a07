"""Embedders: hashing (unit), OpenAI against a local HTTP stub, MiniLM end to end."""

from __future__ import annotations

import math

import pytest

from cortex_pg import ValidationError
from cortex_pg.embeddings import HashingEmbedder, OpenAIEmbedder, embedder_from_name
from cortex_pg.store import MemoryStore
from tests.helpers.openai_stub import OpenAIStub


def test_hashing_embedder_is_deterministic_and_normalised():
    e = HashingEmbedder(64)
    a, b = e.embed(["the quick brown fox", "the quick brown fox"])
    assert a == b and len(a) == 64
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-5)
    c = e.embed(["completely unrelated words"])[0]
    near = e.embed(["a quick brown fox"])[0]
    dot = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert dot(a, near) > dot(a, c)


def test_embedder_from_name():
    assert embedder_from_name("hashing").dim == 384
    with pytest.raises(ValidationError):
        embedder_from_name("word2vec")


def test_openai_embedder_over_http(db_url):
    with OpenAIStub() as stub:
        emb = OpenAIEmbedder(
            "text-embedding-3-small", api_key="sk-test", base_url=stub.base_url, batch_size=2
        )
        assert emb.dim == 1536
        store = MemoryStore.open(db_url, embedder=emb, auto_migrate=False)
        try:
            ids = store.add_many([{"content": t} for t in ("red apples", "green pears", "blue boats")])
            assert store.search("blue boats", limit=1)[0].id == ids[2]
        finally:
            store.close()
        bodies = [r["body"] for r in stub.requests]
        assert bodies[0]["model"] == "text-embedding-3-small"
        assert [len(b["input"]) for b in bodies[:2]] == [2, 1]  # batched
        assert stub.requests[0]["auth"] == "Bearer sk-test"


@pytest.mark.model
def test_minilm_end_to_end(db_url, minilm):
    store = MemoryStore.open(db_url, embedder=minilm, auto_migrate=False)
    try:
        assert minilm.dim == 384 and minilm.name == "all-MiniLM-L6-v2"
        store.add("Caroline went to the LGBTQ support group on Sunday.", user_id="c")
        store.add("Melanie painted a sunrise over the lake.", user_id="c")
        top = store.search("What did Melanie paint?", user_id="c")[0]
        assert "painted a sunrise" in top.content
        assert 0.3 < top.semantic_score <= 1.0
    finally:
        store.close()
