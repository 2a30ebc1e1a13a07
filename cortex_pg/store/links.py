"""Typed, weighted links between notes, always written with their reciprocal.

Rules (Prem Cortex ``_get_reciprocal_relationship`` and its strengthen action):

* reciprocal types: supports/supported_by, contradicts/contradicted_by, refutes/refuted_by,
  extends/extended_by, prerequisite/depends_on, example/exemplified_by, causal/effect_of;
  any other type (``similar``, ``related``, ...) is its own reciprocal;
* reciprocal strength = ``max(0.65, 0.9 * strength)``; reciprocal reason =
  ``"Reciprocal of: <reason>"``;
* no self links; both ends belong to the same user (the foreign keys include ``user_id``) and
  are current notes (not merged);
* writing a link that exists replaces its type, strength and reason (as the original's
  ``note.links[target] = ...``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from cortex_pg.db.retry import retry_transient
from cortex_pg.db.steps import Plan, on_connection, operation, plan_of
from cortex_pg.errors import NotFoundError, ValidationError
from cortex_pg.store import validation
from cortex_pg.store.rows import tenant_scoped

if TYPE_CHECKING:
    from cortex_pg.store.memory_store import MemoryStore

_PAIRS = {
    "supports": "supported_by",
    "contradicts": "contradicted_by",
    "refutes": "refuted_by",
    "extends": "extended_by",
    "prerequisite": "depends_on",
    "example": "exemplified_by",
    "causal": "effect_of",
}
RECIPROCAL: dict[str, str] = {**_PAIRS, **{v: k for k, v in _PAIRS.items()}}
RECIPROCAL_FLOOR = 0.65
RECIPROCAL_FACTOR = 0.9
DEFAULT_TYPE = "related"
DEFAULT_STRENGTH = 0.5

UPSERT = """
INSERT INTO cortex.note_links (user_id, source_id, target_id, session_id, type, strength, reason)
SELECT n.user_id, r.source_id, r.target_id, n.session_id, r.type, r.strength, r.reason
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
     AS r(source_id uuid, target_id uuid, type text, strength real, reason text)
JOIN cortex.notes n ON n.user_id = :user_id AND n.id = r.source_id
ORDER BY r.source_id, r.target_id
ON CONFLICT (user_id, source_id, target_id) DO UPDATE
SET type = EXCLUDED.type, strength = EXCLUDED.strength, reason = EXCLUDED.reason, created_at = now()
"""

# FOR SHARE: a merge (which locks both notes FOR NO KEY UPDATE) waits for this transaction,
# or, when it committed first, the merged state is what is read here ("re-check under lock")
NOTE_STATE = """
SELECT id, session_id, merged_into FROM cortex.notes
WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))
ORDER BY id
FOR SHARE
"""

# update(links=...): the note's outgoing links are exactly the given ones (as Prem Cortex's
# ``note.links = ...``): its links to notes other than :keep go, with their reciprocals (a link
# and its reciprocal are one relation: a pair is never left half, whichever note made it)
DROP_OTHER_LINKS = """
DELETE FROM cortex.note_links l
WHERE l.user_id = :user_id
  AND ((l.source_id = :id AND NOT l.target_id = ANY(CAST(:keep AS uuid[])))
       OR (l.target_id = :id AND NOT l.source_id = ANY(CAST(:keep AS uuid[]))))
"""

OUTGOING = """
SELECT target_id, type, strength, reason, created_at FROM cortex.note_links
WHERE user_id = :user_id AND source_id = :id ORDER BY strength DESC, target_id
"""


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link ``source -> target``; strength in [0, 1]."""

    source: uuid.UUID
    target: uuid.UUID
    type: str
    strength: float
    reason: str | None

    def row(self) -> dict[str, Any]:
        return {
            "source_id": str(self.source),
            "target_id": str(self.target),
            "type": self.type,
            "strength": self.strength,
            "reason": self.reason,
        }


def reciprocal_type(link_type: str) -> str:
    """The type of the reverse link (``supports`` -> ``supported_by``; symmetric types map to themselves)."""
    return RECIPROCAL.get(link_type, link_type)


def reciprocal_strength(strength: float) -> float:
    """``max(0.65, 0.9 * strength)`` (Prem Cortex strengthen action)."""
    return max(RECIPROCAL_FLOOR, RECIPROCAL_FACTOR * strength)


def reciprocal(link: Link) -> Link:
    """The reverse link of ``link`` by the rules above."""
    reason = f"Reciprocal of: {link.reason}" if link.reason else "Reciprocal link"
    return Link(
        link.target, link.source, reciprocal_type(link.type), reciprocal_strength(link.strength), reason
    )


def parse_links(source: uuid.UUID, links: Mapping[Any, Any], field: str = "links") -> list[Link]:
    """Validate ``{target_id: {"type", "strength", "reason"}}`` into forward links from ``source``.

    Missing keys (or None) default to type ``"related"``, strength 0.5, no reason. Types are
    lower-cased ("Supports" is "supports").

    Raises:
        ValidationError: not a mapping, a target is not a UUID or is ``source`` itself, a type is
            blank or longer than 64 characters, a strength is outside [0, 1].
    """
    if not isinstance(links, Mapping):
        raise ValidationError(field, "must be a mapping {target_id: {type, strength, reason}}")
    out: list[Link] = []
    for key, spec in links.items():
        target = validation.note_id(key, f"{field}[{key!r}]")
        name = f"{field}[{str(target)!r}]"
        if target == source:
            raise ValidationError(name, "a note cannot link to itself")
        if not isinstance(spec, Mapping):
            raise ValidationError(name, "must be a mapping with type, strength and reason")
        unknown = set(spec) - {"type", "strength", "reason"}
        if unknown:
            raise ValidationError(f"{name}.{sorted(unknown)[0]}", "unknown link field")
        link_type = spec.get("type")
        if link_type is None:  # missing or None: the default; "" or 0 are errors, not the default
            link_type = DEFAULT_TYPE
        # (64 characters as stored: lower-cased, "İ" is two)
        if not isinstance(link_type, str) or not link_type.strip() or len(link_type.strip().lower()) > 64:
            raise ValidationError(f"{name}.type", "must be a non-blank string of at most 64 characters")
        validation.short_text(link_type, f"{name}.type")  # no NUL, encodable
        strength = validation.unit_interval(spec.get("strength", DEFAULT_STRENGTH), f"{name}.strength")
        reason = validation.link_reason(spec.get("reason"), f"{name}.reason")
        out.append(Link(source, target, link_type.strip().lower(), strength, reason))
    return out


def write_links(
    conn: Connection,
    user_id: str,
    links: Sequence[Link],
    *,
    with_reciprocals: bool = True,
    repoint_merged: bool = False,
) -> int:
    """Upsert ``links`` (and their reciprocals) in the caller's transaction.

    Self links are skipped. Every end must be a current note of ``user_id``; the ends are
    locked (``FOR SHARE``) before they are checked, so a merge running meanwhile either waits
    for this transaction (and then moves the links it wrote) or is seen here as done.

    Args:
        repoint_merged: an end that was merged into another note is replaced by the note it
            was merged into (the evolution worker: a neighbour merged away by a concurrent
            job); else it is refused.

    Returns:
        The number of directed links written (forward + reciprocal).

    Raises:
        NotFoundError: a source (the note whose links these are) is not a note of ``user_id``.
        ValidationError: a target is not a note of ``user_id`` (field ``links['<id>']``), or
            an end was merged into another note (link to that one instead) and
            ``repoint_merged`` is off.
    """
    sources = {k.source for k in links}
    for _ in range(16):  # merge chains are short; each round follows one step
        rows = _with_reciprocals(links, with_reciprocals)
        if not rows:
            return 0
        ends = {end for pair in rows for end in pair}
        state = {
            r.id: r
            for r in conn.execute(text(NOTE_STATE), {"user_id": user_id, "ids": [str(i) for i in ends]})
        }
        merged: dict[uuid.UUID, uuid.UUID] = {}
        for end in sorted(ends, key=str):
            if end not in state:
                if end in sources:
                    raise NotFoundError("note", str(end))
                raise ValidationError(f"links[{str(end)!r}]", "no such note of this user")
            if state[end].merged_into is not None:
                if not repoint_merged:
                    raise ValidationError(
                        f"links[{str(end)!r}]" if end not in sources else "links",
                        f"note {end} was merged into {state[end].merged_into}; link to that note",
                    )
                merged[end] = state[end].merged_into
        if not merged:
            break
        links = [
            Link(merged.get(k.source, k.source), merged.get(k.target, k.target), k.type, k.strength, k.reason)
            for k in links
        ]
    else:
        raise ValidationError("links", "a chain of merged notes is too long to follow")
    payload = json.dumps([rows[k].row() for k in sorted(rows, key=lambda k: (str(k[0]), str(k[1])))])
    conn.execute(text(UPSERT), {"user_id": user_id, "rows": payload})
    return len(rows)


def replace_links(conn: Connection, user_id: str, note_id: uuid.UUID, links: Sequence[Link]) -> int:
    """Make ``links`` the note's outgoing links (``update(links=...)``): its links to other
    targets are deleted with their reciprocals (every link has its reciprocal, so a link another
    note made to it goes too: the pair is one relation), then ``links`` are written with their
    reciprocals (see :func:`write_links`). ``links=[]`` clears them.

    Returns:
        The number of directed links written.
    """
    keep = [str(k.target) for k in links]
    conn.execute(text(DROP_OTHER_LINKS), {"user_id": user_id, "id": note_id, "keep": keep})
    return write_links(conn, user_id, links)


def _with_reciprocals(
    links: Sequence[Link], with_reciprocals: bool
) -> dict[tuple[uuid.UUID, uuid.UUID], Link]:
    rows: dict[tuple[uuid.UUID, uuid.UUID], Link] = {}
    for link in links:
        if link.source == link.target:
            continue
        rows[(link.source, link.target)] = link
        if with_reciprocals:
            back = reciprocal(link)
            rows.setdefault((back.source, back.target), back)
    return rows


def outgoing(conn: Connection, user_id: str, note_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    """The links of a note, ``{target_id: {type, strength, reason, created_at}}``, strongest first."""
    return {
        str(r.target_id): {
            "type": r.type,
            "strength": float(r.strength),
            "reason": r.reason,
            "created_at": r.created_at,
        }
        for r in conn.execute(text(OUTGOING), {"user_id": user_id, "id": note_id})
    }


@retry_transient
@tenant_scoped
@operation
def set_links(
    store: MemoryStore, note_id: str | uuid.UUID, links: Mapping[Any, Any], *, user_id: str | None = None
) -> Plan[int]:
    """Set links of a note by hand, with reciprocals, in one transaction.

    Args:
        note_id: the source note.
        links: ``{target_id: {"type": str, "strength": float in [0, 1], "reason": str}}``.
        user_id: the owner (None: looked up from the note).

    Returns:
        The number of directed links written.

    Raises:
        ValidationError, NotFoundError: see :func:`parse_links` and :func:`write_links`.
    """
    source = validation.note_id(note_id)
    specs = parse_links(source, links)
    owner = (yield from plan_of(store.get, source, user_id=user_id)).user_id
    return (yield on_connection(lambda conn: write_links(conn, owner, specs)))


@retry_transient
@tenant_scoped
@operation
def get_links(
    store: MemoryStore, note_id: str | uuid.UUID, *, user_id: str | None = None
) -> Plan[dict[str, Any]]:
    """The outgoing links of a note (see :func:`outgoing`)."""
    nid = validation.note_id(note_id)
    owner = (yield from plan_of(store.get, nid, user_id=user_id)).user_id
    return (yield on_connection(lambda conn: outgoing(conn, owner, nid)))
