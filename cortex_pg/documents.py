"""Documents as memory: :func:`chunk_text` cuts a document into notes a reader would accept.

The splitting itself is semantic-text-splitter's ``MarkdownSplitter`` (sections, then
paragraphs, then lines, sentences and words; neighbouring small blocks merged up to the
target size); Markdown headings are read with markdown-it-py (CommonMark, ATX and setext).
Two rules are added on top, on the chunks' character spans:

1. **A heading stays with the text that follows it.** A chunk that ends in one or more
   headings with no text after them gives them to the next chunk (a heading alone is never
   a chunk, unless the document is nothing but headings).
2. **No chunk below** ``min_size`` **characters** unless the whole document is that small:
   a short chunk is joined to its neighbour (the previous one when it continues the same
   section, else the next one). A joined chunk may exceed ``size`` by up to ``min_size``.

Each chunk's ``context`` is the heading path in force where it starts ("Guide > Install"),
or None in a document without headings. The output is a pure function of the arguments
(deterministic), so storing the same file twice stores nothing new: the store deduplicates
notes by content within a user and session.

Default size: all-MiniLM-L6-v2 (the offline embedder) reads 256 word pieces, about 1,000
characters of English text, so :data:`DEFAULT_CHUNK_SIZE` is 1,000 characters; a chunk of
that size is embedded whole. Longer notes are embedded window by window (see
:mod:`cortex_pg.embeddings.windows`), so a larger size loses nothing to vector search, it
only makes results longer.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cortex_pg.errors import ValidationError

#: characters per chunk; all-MiniLM-L6-v2's 256 word pieces are about 1,000 characters of English
DEFAULT_CHUNK_SIZE = 1000
#: characters repeated from the end of one chunk at the start of the next (0: none)
DEFAULT_OVERLAP = 0
#: the Prem Cortex test CLI's chunking: sections split on three blank lines, 2,000 characters, 200 overlap
PREM_SECTION_SEPARATOR = "\n\n\n\n"
PREM_CHUNK_SIZE = 2000
PREM_CHUNK_OVERLAP = 200


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document.

    Attributes:
        text: the chunk, a slice of the (newline-normalised) document, whitespace-trimmed.
        context: the heading path where the chunk starts, ``" > "``-joined, or None.
        start, end: the slice's character offsets in the newline-normalised document.
    """

    text: str
    context: str | None
    start: int
    end: int


@dataclass(frozen=True)
class _Heading:
    start: int  # offset of the heading's first line
    end: int  # offset just past its last line
    level: int
    title: str


def chunk_text(
    text: str,
    *,
    size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    min_size: int | None = None,
    section_separator: str | None = None,
) -> list[Chunk]:
    """Cut ``text`` (plain text or Markdown) into chunks of about ``size`` characters.

    Args:
        text: the document; ``\\r\\n`` and ``\\r`` are read as ``\\n``.
        size: target (maximum) characters per chunk, >= 50. Default 1,000: the window of
            all-MiniLM-L6-v2 (256 word pieces).
        overlap: characters of the previous chunk a chunk may repeat, in [0, size / 2).
            Only chunks cut out of one block longer than ``size`` overlap.
        min_size: smallest chunk, in [0, size]; default ``size // 5``. A document shorter
            than it is one chunk.
        section_separator: a string that always ends a section (no chunk spans it before the
            minimum-size rule), e.g. :data:`PREM_SECTION_SEPARATOR`; None: Markdown structure only.

    Returns:
        The chunks in document order (empty for a blank document).

    Raises:
        ValidationError: ``text`` is not a string, or a size argument is out of range (the
            field is named: ``size``, ``overlap``, ``min_size``, ``section_separator``).
    """
    if not isinstance(text, str):
        raise ValidationError("text", f"must be a string, got {type(text).__name__}")
    size = _int(size, "size", 50, None)
    overlap = _int(overlap, "overlap", 0, (size - 1) // 2)
    min_size = size // 5 if min_size is None else _int(min_size, "min_size", 0, size)
    if section_separator is not None and (not isinstance(section_separator, str) or not section_separator):
        raise ValidationError("section_separator", "must be a non-empty string or None")
    body = text.replace("\r\n", "\n").replace("\r", "\n")
    headings = _headings(body)
    spans: list[tuple[int, int]] = []
    for lo, hi in _sections(body, section_separator):
        spans += [(lo + s, lo + e) for s, e in _split(body[lo:hi], size, overlap)]
    spans = _headings_forward(body, spans, headings)
    spans = _join_small(body, spans, headings, min_size)
    return [Chunk(body[s:e], _path(headings, s), s, e) for s, e in spans]


def _int(value: Any, field: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValidationError(field, f"must be {bound}, got {value}")
    return value


@lru_cache(maxsize=8)
def _splitter(size: int, overlap: int) -> Any:
    from semantic_text_splitter import MarkdownSplitter

    return MarkdownSplitter(size, overlap=overlap)


def _sections(body: str, separator: str | None) -> list[tuple[int, int]]:
    if not separator:
        return [(0, len(body))]
    bounds, start = [], 0
    for m in re.finditer(re.escape(separator), body):
        bounds.append((start, m.start()))
        start = m.end()
    bounds.append((start, len(body)))
    return bounds


def _split(part: str, size: int, overlap: int) -> list[tuple[int, int]]:
    return [(i, i + len(c)) for i, c in _splitter(size, overlap).chunk_indices(part) if c.strip()]


def _headings(body: str) -> list[_Heading]:
    """The document's Markdown headings (CommonMark), in order, with their character spans."""
    from markdown_it import MarkdownIt

    line_starts = [0] + [m.end() for m in re.finditer("\n", body)] + [len(body)]
    tokens = MarkdownIt("commonmark").parse(body)
    out: list[_Heading] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            first, last = tok.map
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            out.append(
                _Heading(
                    line_starts[first], line_starts[min(last, len(line_starts) - 1)], int(tok.tag[1:]), title
                )
            )
    return out


def _path(headings: list[_Heading], offset: int) -> str | None:
    """The heading path in force at ``offset`` (a heading starting there included)."""
    stack: list[_Heading] = []
    for h in headings[: bisect.bisect_right([h.start for h in headings], offset)]:
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
    titles = [h.title for h in stack if h.title]
    return " > ".join(titles) if titles else None


def _only_headings(body: str, start: int, end: int, headings: list[_Heading]) -> bool:
    """True when ``body[start:end]`` holds nothing but whitespace and headings."""
    rest, pos = [], start
    for h in headings:
        if h.end <= start or h.start >= end:
            continue
        rest.append(body[pos : max(pos, h.start)])
        pos = max(pos, h.end)
    rest.append(body[pos:end])
    return not "".join(rest).strip()


def _headings_forward(
    body: str, spans: list[tuple[int, int]], headings: list[_Heading]
) -> list[tuple[int, int]]:
    """Rule 1: trailing headings of a chunk move to the start of the next chunk."""
    out = list(spans)
    for i in range(len(out) - 1):
        start, end = out[i]
        trailing = [
            h for h in headings if start <= h.start < end and _only_headings(body, h.start, end, headings)
        ]
        if not trailing:
            continue
        cut = trailing[0].start
        out[i + 1] = (min(cut, out[i + 1][0]), out[i + 1][1])
        out[i] = (start, cut)
    return [(s, e) for s, e in (_trim(body, s, e) for s, e in out) if e > s]


def _join_small(
    body: str, spans: list[tuple[int, int]], headings: list[_Heading], min_size: int
) -> list[tuple[int, int]]:
    """Rule 2: join chunks under ``min_size`` characters (or made only of headings) to a neighbour."""
    out = list(spans)

    def small(k: int) -> bool:
        s, e = out[k]
        return e - s < min_size or _only_headings(body, s, e, headings)

    i = 0
    while len(out) > 1 and i < len(out):
        if not small(i):
            i += 1
            continue
        s, e = out[i]
        starts_section = any(h.start == s for h in headings)
        backward = i == len(out) - 1 or (
            i > 0 and not starts_section and _path(headings, out[i - 1][0]) == _path(headings, s)
        )
        if backward:
            out[i - 1 : i + 1] = [(out[i - 1][0], max(e, out[i - 1][1]))]
            i -= 1
        else:
            out[i : i + 2] = [(s, max(e, out[i + 1][1]))]
    return out


def _trim(body: str, start: int, end: int) -> tuple[int, int]:
    while start < end and body[start].isspace():
        start += 1
    while end > start and body[end - 1].isspace():
        end -= 1
    return start, end
