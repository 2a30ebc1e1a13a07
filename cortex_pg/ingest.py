"""Readers that turn files into note items for :meth:`MemoryStore.add_many`.

* plain text or Markdown: one note per chunk of :func:`cortex_pg.documents.chunk_text`
  (sections, paragraphs, sentences; small blocks merged up to the chunk size; a heading kept
  with its text; the heading path as the note's ``context``);
* LoCoMo JSON (Maharana et al., 2024): one note per dialogue turn, content
  ``"<speaker>: <text>"`` plus ``" [shares a photo: <caption>]"`` when the turn has an image
  caption, ``time`` = the session's ``date_time`` (taken as UTC) plus the turn's index in
  seconds (so turns keep their order), metadata ``speaker``, ``dia_id``, ``session``,
  ``user_id`` = the sample's ``sample_id``, ``session_id`` = ``session_<N>``. A session
  without ``date_time`` takes the time right after the previous session's last turn (or,
  for the first session, right before the next dated session), with a warning
  (:class:`LocomoTimeWarning`); a sample where no session has a time is refused.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cortex_pg.documents import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP, chunk_text
from cortex_pg.errors import ValidationError

LOCOMO_TIME_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"

log = logging.getLogger(__name__)


class LocomoTimeWarning(UserWarning):
    """A LoCoMo session has no ``date_time``; its time was taken from a neighbouring session."""


def text_items(
    path: Path, *, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_OVERLAP
) -> list[dict[str, Any]]:
    """One item per chunk of a UTF-8 text or Markdown file (:func:`~cortex_pg.documents.chunk_text`
    with ``size`` and ``overlap`` characters); a chunk under Markdown headings carries their
    path as ``context``. The same file gives the same items (so storing it again stores nothing);
    a leading byte-order mark is not part of the text.

    Raises:
        ValidationError: the file is not UTF-8 text (field ``path``), or ``size`` / ``overlap``
            is out of range (see ``chunk_text``).
    """
    try:
        body = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError("path", f"{path} is not UTF-8 text: {exc}") from None
    return [
        {"content": c.text, **({"context": c.context} if c.context else {})}
        for c in chunk_text(body, size=size, overlap=overlap)
    ]


def parse_locomo_time(value: str) -> datetime:
    """LoCoMo's ``session_N_date_time`` ("1:56 pm on 8 May, 2023") as an aware UTC datetime.

    Raises:
        ValidationError: the text is not in that format.
    """
    try:
        return datetime.strptime(value.strip(), LOCOMO_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ValidationError("date_time", f"{value!r} is not a LoCoMo date_time") from None


@dataclass(frozen=True)
class LocomoConversation:
    """One LoCoMo sample: its id, its note items, its questions and its last session time."""

    sample_id: str
    items: list[dict[str, Any]]
    qa: list[dict[str, Any]]
    last_time: datetime


def read_locomo(path: Path) -> Iterator[LocomoConversation]:
    """Conversations of a LoCoMo JSON file (a list of samples, UTF-8 with or without a
    byte-order mark), in file order."""
    try:
        samples = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError("path", f"{path} is not JSON: {exc}") from None
    if not isinstance(samples, list):
        raise ValidationError("path", f"{path}: expected a list of LoCoMo samples")
    for i, sample in enumerate(samples):
        yield _conversation(sample, f"samples[{i}]")


def _conversation(sample: Any, where: str) -> LocomoConversation:
    if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
        raise ValidationError(where, "a LoCoMo sample needs a 'conversation' object")
    conv = sample["conversation"]
    raw_id = sample.get("sample_id") or conv.get("sample_id")
    if not isinstance(raw_id, str | int) or not str(raw_id).strip():
        raise ValidationError(
            where + ".sample_id", "missing: each conversation needs a sample_id (its user_id)"
        )
    sample_id = str(raw_id)
    items: list[dict[str, Any]] = []
    last_time = datetime.min.replace(tzinfo=UTC)
    sessions = sorted(
        (int(m.group(1)), key)
        for key in conv
        if (m := re.fullmatch(r"session_(\d+)", key)) and isinstance(conv[key], list)
    )
    dated = [
        (key, parse_locomo_time(conv[f"{key}_date_time"]))
        for _, key in sessions
        if conv.get(f"{key}_date_time")
    ]
    if sessions and not dated:
        raise ValidationError(
            f"{where}.conversation.session_1_date_time", "no session of this sample has a date_time"
        )
    previous_end: datetime | None = None
    first_dated = next(i for i, (_, k) in enumerate(sessions) if k == dated[0][0]) if dated else 0
    for position, (number, key) in enumerate(sessions):
        when = conv.get(f"{key}_date_time")
        if when:
            start = parse_locomo_time(when)
        else:
            if previous_end is not None:
                start, source = previous_end + timedelta(seconds=1), "the previous session's last turn"
            else:  # the first sessions: just before the first dated one, keeping their order
                turns = sum(len(conv[k]) for _, k in sessions[position:first_dated])
                start = dated[0][1] - timedelta(seconds=turns)
                source = f"the next dated session ({dated[0][0]})"
            message = (
                f"{where}.conversation.{key} has no {key}_date_time; its turns take the time "
                f"after {source}: {start.isoformat()}"
            )
            warnings.warn(message, LocomoTimeWarning, stacklevel=3)
            log.warning("%s", message)
        previous_end = start + timedelta(seconds=max(len(conv[key]) - 1, 0))
        for index, turn in enumerate(conv[key]):
            if not isinstance(turn, dict) or not isinstance(turn.get("speaker"), str):
                raise ValidationError(
                    f"{where}.conversation.{key}[{index}]", "a turn needs a 'speaker' string"
                )
            text = (turn.get("text") or "").strip()
            caption = (turn.get("blip_caption") or "").strip()
            if not text and not caption:
                continue
            content = f"{turn['speaker']}: {text}"
            if caption:
                content += f" [shares a photo: {caption}]"
            at = start + timedelta(seconds=index)
            last_time = max(last_time, at)
            items.append(
                {
                    "content": content,
                    "user_id": sample_id,
                    "session_id": key,
                    "time": at,
                    "metadata": {"speaker": turn["speaker"], "dia_id": turn.get("dia_id"), "session": number},
                }
            )
    return LocomoConversation(sample_id, items, list(sample.get("qa") or []), last_time)
