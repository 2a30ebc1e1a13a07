"""The windows of a long text: what an embedder is given so that the whole text is embedded.

An embedder reads a bounded prefix of its input (all-MiniLM-L6-v2: 256 word pieces, about
1,000 characters of English; OpenAI's models: 8,191 tokens). A note longer than that is
embedded as overlapping windows over its whole text, each stored as one ``cortex.embeddings``
row (``kind = 'text'``, ``window_no`` 0, 1, ...); search scores a note by its best window.

The window size of an embedder is its ``window_chars`` attribute when it has one, capped at
:data:`MAX_WINDOW_CHARS` (4,096 characters, within 8,191 tokens in every script), else that
cap. Consecutive windows overlap by a fifth of the size, so a sentence cut by one window's
end is read whole by the next as long as it is shorter than the overlap; window ends are
moved back to the last whitespace in their final fifth, so words are not cut.
"""

from __future__ import annotations

from typing import Any

#: the most characters any embedder is given at once (every offered model reads at least this much)
MAX_WINDOW_CHARS = 4096


def window_chars(embedder: Any) -> int:
    """Characters per window for ``embedder``: ``embedder.window_chars`` (when set) capped at
    :data:`MAX_WINDOW_CHARS`; at least 16."""
    own = getattr(embedder, "window_chars", None)
    size = own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else MAX_WINDOW_CHARS
    return max(16, min(size, MAX_WINDOW_CHARS))


def text_windows(text: str, size: int) -> list[str]:
    """The overlapping windows of ``text`` for a window of ``size`` characters.

    Returns:
        ``[text]`` when ``len(text) <= size`` (a short note has one window, its whole text);
        else windows of at most ``size`` characters covering the text from its first to its
        last character, each starting ``size // 5`` characters (moved to a word start) before
        the previous one ends. Deterministic.
    """
    if len(text) <= size:
        return [text]
    overlap = size // 5
    out: list[str] = []
    start = 0
    while True:
        end = start + size
        if end >= len(text):
            out.append(text[start:])
            return out
        cut = text.rfind(" ", end - size // 5, end)
        cut = max(text.rfind("\n", end - size // 5, end), cut)
        end = cut if cut > start else end
        out.append(text[start:end])
        nxt = max(end - overlap, start + 1)
        space = text.find(" ", nxt, end)
        start = space + 1 if space != -1 else nxt
