"""``/notes``: store, list, read, change and delete the key's user's notes; a note's links and
history."""

from __future__ import annotations

import uuid
from typing import Literal

from fastapi import APIRouter, Depends, Path, Query, Response

from cortex_pg.db import tenancy
from cortex_pg.errors import NotFoundError
from cortex_pg.evolution.traversal import linked_notes
from cortex_pg.server.auth import Service, current_user, service
from cortex_pg.server.errors import documented
from cortex_pg.server.params import no_unknown_query
from cortex_pg.server.schemas import (
    HistoryEntry,
    LinkedNoteOut,
    NoteIn,
    NoteLinks,
    NoteOut,
    NotePage,
    NotePatch,
)
from cortex_pg.store.validation import MAX_ID_LENGTH

router = APIRouter(
    tags=["notes"], responses=documented(401, 422, 503), dependencies=[Depends(no_unknown_query)]
)
NoteId = Path(description="The note's id (a UUID).")


@router.post(
    "/notes",
    status_code=201,
    response_model=NoteOut,
    responses={
        **documented(400, 409),
        200: {
            "model": NoteOut,
            "description": "The same content is already stored in this session: that note.",
        },
    },
)
def add_note(
    body: NoteIn, response: Response, user: str = Depends(current_user), svc: Service = Depends(service)
) -> NoteOut:
    """Store a note for the key's user: 201 with the new note. The same content in the same
    session is stored once: 200 with the note already stored (a repeated POST changes nothing)."""
    fields = body.model_dump(exclude_none=True)
    fresh = str(uuid.uuid4())  # the id a new note gets: another one returned means it existed
    nid = svc.store.add(fields.pop("content"), user_id=user, id=fresh, **fields)
    if nid != fresh:
        response.status_code = 200
    return NoteOut.model_validate(svc.store.get(nid, user_id=user), from_attributes=True)


@router.get("/notes", response_model=NotePage)
def list_notes(
    session_id: str | None = Query(
        None, min_length=1, max_length=MAX_ID_LENGTH, description="Only this session."
    ),
    memory_source: Literal["ltm", "stm"] = Query("ltm", description="Long- or short-term memory."),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=1_000_000_000),
    user: str = Depends(current_user),
    svc: Service = Depends(service),
) -> NotePage:
    """The user's notes, oldest first, one page at a time (``next_offset`` asks for the next)."""
    args = {"user_id": user, "session_id": session_id, "memory_source": memory_source}
    total = svc.store.count(**args)
    items = svc.store.list_notes(**args, limit=limit, offset=offset)
    return NotePage(
        items=[NoteOut.model_validate(n, from_attributes=True) for n in items],
        total=total,
        limit=limit,
        offset=offset,
        next_offset=offset + len(items) if offset + len(items) < total else None,
    )


@router.get("/notes/{id}", response_model=NoteOut, responses=documented(404))
def get_note(
    id: uuid.UUID = NoteId, user: str = Depends(current_user), svc: Service = Depends(service)
) -> NoteOut:
    """One note of the user (its long-term row, else its short-term copy)."""
    return NoteOut.model_validate(svc.store.get(id, user_id=user), from_attributes=True)


@router.patch("/notes/{id}", response_model=NoteOut, responses=documented(400, 404, 409))
def update_note(
    body: NotePatch,
    id: uuid.UUID = NoteId,
    user: str = Depends(current_user),
    svc: Service = Depends(service),
) -> NoteOut:
    """Change fields of a note (both tiers); returns the note as now stored."""
    fields = body.model_dump(exclude_unset=True)
    note = svc.store.update(id, user_id=user, **fields)  # (a link's missing target: links['<id>'])
    return NoteOut.model_validate(note, from_attributes=True)


@router.delete("/notes/{id}", status_code=204, response_class=Response, responses=documented(404))
def delete_note(
    id: uuid.UUID = NoteId, user: str = Depends(current_user), svc: Service = Depends(service)
) -> Response:
    """Delete a note from both tiers (its embeddings and links go with it; its history stays)."""
    if not svc.store.delete(id, user_id=user):
        raise NotFoundError("note", str(id))
    return Response(status_code=204)


@router.get("/notes/{id}/links", response_model=NoteLinks, responses=documented(404))
def note_links(
    id: uuid.UUID = NoteId,
    depth: int = Query(1, ge=1, le=10, description="Links followed from the note."),
    min_strength: float = Query(0.0, ge=0, le=1, description="Drop paths weaker than this."),
    user: str = Depends(current_user),
    svc: Service = Depends(service),
) -> NoteLinks:
    """The note and the notes reachable along its links (``cortex.linked_notes``), nearest first."""
    note = svc.store.get(id, user_id=user)
    with tenancy.tenant_scope(user):
        found = linked_notes(svc.store, id, depth=depth, min_strength=min_strength, user_id=user)
    return NoteLinks(
        note=NoteOut.model_validate(note, from_attributes=True),
        links=[LinkedNoteOut.model_validate(link, from_attributes=True) for link in found],
    )


@router.get("/notes/{id}/history", response_model=list[HistoryEntry], responses=documented(404))
def note_history(
    id: uuid.UUID = NoteId, user: str = Depends(current_user), svc: Service = Depends(service)
) -> list[HistoryEntry]:
    """Every recorded change of the note, oldest first (kept after the note is deleted)."""
    rows = svc.store.history(id, user_id=user)
    if not rows:
        svc.store.get(id, user_id=user)  # 404 when there is no such note
    return [HistoryEntry.model_validate(r) for r in rows]
