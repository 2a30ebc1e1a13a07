"""``/entities``: the key's user's knowledge graph (entities, their facts, their neighbourhood).

Entities are recorded when notes are stored with extraction on (``cortex-pg serve`` does it
unless ``--no-entities``). Names are matched case- and whitespace-folded, and may contain ``/``
(``/entities/TCP/IP/related`` is the neighbourhood of ``TCP/IP``; the ``/related`` route is
matched first).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query

from cortex_pg.db import tenancy
from cortex_pg.entities.extract import fold
from cortex_pg.entities.repository import EntityStore, entity_name
from cortex_pg.errors import NotFoundError
from cortex_pg.server.auth import Service, current_user, service
from cortex_pg.server.errors import documented
from cortex_pg.server.params import no_unknown_query
from cortex_pg.server.schemas import EntityDetail, EntityOut, FactOut, Neighbourhood, RelatedOut

router = APIRouter(
    tags=["entities"], responses=documented(401, 422, 503), dependencies=[Depends(no_unknown_query)]
)
Name = Path(min_length=1, max_length=200, description="The entity's name (any case).")


def _graph(svc: Service) -> EntityStore:
    return EntityStore(svc.store.engine)


@router.get("/entities", response_model=list[EntityOut])
def list_entities(
    limit: int = Query(100, ge=1, le=1000), user: str = Depends(current_user), svc: Service = Depends(service)
) -> list[EntityOut]:
    """The user's entities, most frequent first."""
    with tenancy.tenant_scope(user):
        found = _graph(svc).entities(user, limit=limit)
    return [EntityOut.model_validate(e, from_attributes=True) for e in found]


@router.get("/entities/{name:path}/related", response_model=Neighbourhood, responses=documented(404))
def related_entities(
    name: str = Name,
    depth: int = Query(2, ge=1, le=10, description="Hops from the entity."),
    limit: int = Query(100, ge=1, le=1000, description="Neighbours returned, nearest first."),
    user: str = Depends(current_user),
    svc: Service = Depends(service),
) -> Neighbourhood:
    """Entities within ``depth`` hops (facts valid now, either direction) and the facts among
    them and the entity: what the inspector draws."""
    name, graph = entity_name(name, "name"), _graph(svc)
    with tenancy.tenant_scope(user):
        record = graph.entity(user, name)
        if record is None:
            raise NotFoundError("entity", name)
        related = graph.related_entities(user, record.name, depth)[:limit]
        facts = graph.relationships(user)
    inside = {fold(record.name)} | {fold(r.name) for r in related}
    return Neighbourhood(
        entity=EntityOut.model_validate(record, from_attributes=True),
        related=[RelatedOut.model_validate(r, from_attributes=True) for r in related],
        facts=[
            FactOut.model_validate(f, from_attributes=True)
            for f in facts
            if fold(f.source) in inside and fold(f.target) in inside
        ],
    )


@router.get("/entities/{name:path}", response_model=EntityDetail, responses=documented(404))
def get_entity(
    name: str = Name, user: str = Depends(current_user), svc: Service = Depends(service)
) -> EntityDetail:
    """An entity: counters, snippets, the notes that mention it and its facts valid now."""
    name, graph = entity_name(name, "name"), _graph(svc)
    with tenancy.tenant_scope(user):
        record = graph.entity(user, name)
        if record is None:
            raise NotFoundError("entity", name)
        facts = graph.relationships(user, record.name)
    return EntityDetail(
        **EntityOut.model_validate(record, from_attributes=True).model_dump(),
        mentions=record.mentions,
        facts=[FactOut.model_validate(f, from_attributes=True) for f in facts],
    )
