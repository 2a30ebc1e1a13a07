"""API keys of the HTTP service: create, list, revoke, and resolve a bearer key to its user.

A key is ``cpk_`` followed by 43 URL-safe characters (32 random bytes from :mod:`secrets`).
``cortex.api_keys`` stores its SHA-256 (64 hex digits) and a display prefix (``cpk_`` and the
next 6 characters), never the key: it is shown once, by :func:`create_key`. Each key is bound
to one ``user_id`` for ever; revoking it (``revoked_at``) is final.

Creating, listing and revoking need the owner role (the CLI's connection): the table has
Row-Level Security with no policy. The service resolves keys with :func:`user_for_key`, which
calls ``cortex.api_key_user(hash)`` (SECURITY DEFINER), so it works from the non-owner role of
an ``isolation="rls"`` store. Only the hash travels to the database.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, text

from cortex_pg.errors import ValidationError, translate_db_errors
from cortex_pg.store import validation

KEY_PREFIX = "cpk_"
KEY_BYTES = 32
DISPLAY_CHARS = 6  # characters of the random part kept as the display prefix
MAX_NAME_LENGTH = 200
_KEY_SHAPE = re.compile(r"cpk_[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A stored key, without its secret.

    Attributes:
        id: UUID string (what :func:`revoke_key` takes).
        prefix: ``cpk_`` and the first 6 characters of the key, to recognise it.
        created_at / revoked_at: aware UTC; ``revoked_at`` None while the key works.
    """

    id: str
    user_id: str
    name: str | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created: ``key`` is the only copy of the secret (not in ``repr``)."""

    info: KeyInfo
    key: str = field(repr=False)


def generate_key() -> str:
    """A new random key: ``cpk_`` + 43 URL-safe characters (32 bytes of entropy)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def key_hash(key: str) -> str:
    """SHA-256 of the key's UTF-8 bytes, 64 lower-case hex digits (what the table stores)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def looks_like_key(key: str) -> bool:
    """True when ``key`` has the shape of a key this module creates (checked before any query)."""
    return bool(_KEY_SHAPE.fullmatch(key))


def create_key(engine: Engine, user_id: str, *, name: str | None = None) -> NewKey:
    """Create a key bound to ``user_id``; its secret is returned here and never again.

    Args:
        user_id: the tenant the key acts for (1-255 characters, as for notes).
        name: an optional label (at most 200 characters, no control characters).

    Raises:
        ValidationError: bad ``user_id`` or ``name``.
        DatabaseError: e.g. a connection without the owner role (RLS refuses the insert).
    """
    uid = validation.scope_id(user_id, "user_id")
    label = _name(name)
    key = generate_key()
    with translate_db_errors(), engine.begin() as conn:
        row = (
            conn.execute(
                text(
                    "INSERT INTO cortex.api_keys (user_id, name, prefix, key_hash) "
                    "VALUES (:u, :n, :p, :h) RETURNING id, user_id, name, prefix, created_at, revoked_at"
                ),
                {"u": uid, "n": label, "p": key[: len(KEY_PREFIX) + DISPLAY_CHARS], "h": key_hash(key)},
            )
            .mappings()
            .one()
        )
    return NewKey(_info(row), key)


def list_keys(engine: Engine, *, user_id: str | None = None) -> list[KeyInfo]:
    """Keys of one user (or of every user), oldest first, revoked ones included."""
    uid = validation.optional_scope_id(user_id, "user_id")
    with translate_db_errors(), engine.connect() as conn:
        rows = (
            conn.execute(
                text(
                    "SELECT id, user_id, name, prefix, created_at, revoked_at FROM cortex.api_keys "
                    "WHERE CAST(:u AS text) IS NULL OR user_id = :u ORDER BY created_at, id"
                ),
                {"u": uid},
            )
            .mappings()
            .all()
        )
    return [_info(r) for r in rows]


def revoke_key(engine: Engine, key_id: str | uuid.UUID) -> bool:
    """Revoke a key by id; True when a working key was revoked, False when none (or already).

    Raises:
        ValidationError: ``key_id`` is not a UUID (field ``key_id``).
    """
    kid = validation.note_id(key_id, "key_id", kind="API key")
    with translate_db_errors(), engine.begin() as conn:
        done = conn.execute(
            text("UPDATE cortex.api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL"),
            {"id": kid},
        ).rowcount
    return done > 0


def user_for_key(engine: Engine, key: str) -> str | None:
    """The user_id a working key is bound to, None for an unknown, revoked or malformed key.

    Sends only the key's hash (``cortex.api_key_user``); a malformed key is refused without a
    query.
    """
    if not isinstance(key, str) or not looks_like_key(key):
        return None
    with translate_db_errors(), engine.connect() as conn:
        return conn.execute(text("SELECT cortex.api_key_user(:h)"), {"h": key_hash(key)}).scalar()


def _name(name: str | None) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or validation.invisible(name):
        # (no visible character, by the store's rule: whitespace, zero-width, Hangul fillers, ...)
        raise ValidationError("name", "must be a non-blank string")
    validation.short_text(name, "name")  # (NUL, a lone surrogate)
    if len(name) > MAX_NAME_LENGTH or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValidationError("name", f"at most {MAX_NAME_LENGTH} characters, no control characters")
    return name.strip()


def _info(row) -> KeyInfo:  # noqa: ANN001
    return KeyInfo(
        id=str(row["id"]),
        user_id=row["user_id"],
        name=row["name"],
        prefix=row["prefix"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )
