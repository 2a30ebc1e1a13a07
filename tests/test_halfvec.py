"""Models above 2,000 dimensions (e.g. text-embedding-3-large, 3,072): indexed as halfvec."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from cortex_pg import ValidationError
from cortex_pg.embeddings import HashingEmbedder
from cortex_pg.store import MemoryStore


def test_a_3072_dimension_model_is_stored_indexed_and_searched(db_url):
    embedder = HashingEmbedder(dim=3072, name="text-embedding-3-large")
    with MemoryStore.open(db_url, embedder=embedder, auto_migrate=False) as store:
        texts = [
            f"note {i} about {w}" for i, w in enumerate(["rivers", "mountains", "deserts", "oceans"] * 10)
        ]
        store.add_many([{"content": t} for t in texts], user_id="u", to_stm=False)
        with store.engine.connect() as conn:
            ddl = conn.execute(
                text(
                    "SELECT pg_get_indexdef(to_regclass('cortex.' || index_name)) FROM cortex.embedding_models "
                    "WHERE model = 'text-embedding-3-large'"
                )
            ).scalar_one()
            assert "halfvec(3072)" in ddl and "halfvec_cosine_ops" in ddl
            # the half-precision index orders like the full-precision vectors (cosine within 1e-3)
            q = embedder.embed(["note 6 about deserts"])[0]
            lit = "[" + ",".join(repr(float(x)) for x in q) + "]"
            rows = conn.execute(
                text(
                    "SELECT (embedding <=> CAST(:q AS vector)) AS full_d, "
                    "(embedding::halfvec(3072) <=> CAST(:q AS vector)::halfvec(3072)) AS half_d "
                    "FROM cortex.embeddings WHERE model = 'text-embedding-3-large'"
                ),
                {"q": lit},
            ).all()
        assert max(abs(r.full_d - r.half_d) for r in rows) < 1e-3
        results = store.search("note 6 about deserts", user_id="u", limit=5, touch=False)
        assert results[0].content == "note 6 about deserts"
        assert results[0].vector_rank == 1


def test_dimensions_past_the_halfvec_limit_are_refused(db_url):
    with pytest.raises(ValidationError):
        MemoryStore.open(db_url, embedder=HashingEmbedder(dim=4001), auto_migrate=False)


class _LargeFor:
    """A 3,072-dimension hashing embedder, except that ``odd`` embeds to ``vector(dim)``."""

    def __init__(self, odd: str, vector) -> None:  # noqa: ANN001
        self.inner, self.odd, self.vector = (
            HashingEmbedder(dim=3072, name="text-embedding-3-large"),
            odd,
            vector,
        )
        self.name, self.dim = self.inner.name, self.inner.dim

    def embed(self, texts):  # noqa: ANN001, ANN201
        return [
            self.vector(self.dim) if t == self.odd else v
            for t, v in zip(texts, self.inner.embed(texts), strict=True)
        ]


@pytest.mark.parametrize(
    "vector",
    [
        lambda dim: [70000.0] + [1.0] * (dim - 1),  # past half precision's largest, 65504
        lambda dim: [1e-9] * dim,  # each component below half precision's smallest: no direction
    ],
    ids=["overflow", "underflow"],
)
def test_a_vector_half_precision_cannot_index_is_the_embedders_error(db_url, vector):
    from cortex_pg import EmbeddingModelError

    with MemoryStore.open(db_url, embedder=_LargeFor("odd one", vector), auto_migrate=False) as store:
        kept = store.add("The boiler service is booked for Thursday", user_id="u", to_stm=False)
        with pytest.raises(EmbeddingModelError, match="half precision"):
            store.add("odd one", user_id="u", to_stm=False)
        with pytest.raises(EmbeddingModelError, match="half precision"):
            store.search("odd one", user_id="u")
        results = store.search("boiler", user_id="u", touch=False)
        assert [r.id for r in results] == [kept] and results[0].score == results[0].score  # not NaN
