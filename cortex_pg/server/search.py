"""``POST /search``: ``MemoryStore.search`` over the key's user's notes, every score part returned."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from cortex_pg.server.auth import Service, current_user, service
from cortex_pg.server.errors import documented
from cortex_pg.server.params import no_unknown_query
from cortex_pg.server.schemas import SearchIn, SearchOut, SearchResultOut

router = APIRouter(
    tags=["search"], responses=documented(401, 422, 503), dependencies=[Depends(no_unknown_query)]
)


@router.post("/search", response_model=SearchOut, responses=documented(400))
def search(body: SearchIn, user: str = Depends(current_user), svc: Service = Depends(service)) -> SearchOut:
    """Hybrid search (vector + BM25, recency, date window, filter, context; one SQL statement).

    Results come best first, each with its score parts: ``semantic_score`` (vector),
    ``text_score`` (BM25), ``recency_score``, ``context_score``, the fused
    ``relevance_score`` and the final ``score``. ``touch: false`` leaves access counts alone
    (the inspector page searches so).
    """
    results = svc.store.search(user_id=user, **body.model_dump())
    return SearchOut(results=[SearchResultOut.model_validate(r, from_attributes=True) for r in results])
