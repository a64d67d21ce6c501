"""A reply quoted in a review line: whole when it fits, else cut at word boundaries with an ellipsis where cut, the
part that matters kept in view (issue 49: the summary cut a quote at 90 characters mid-word, and the part that made a
built reply wrong, its last words, was the part cut off)."""

from __future__ import annotations

import os

ELLIPSIS = "…"


def excerpt(text: str, limit: int, key: int | None = None) -> str:
    """`text` whole when it has at most `limit` characters; else a window of about `limit` characters that holds
    `key` (an index into `text`: where the part that matters starts; None: the start), widened or narrowed to whole
    words, with an ellipsis on each side that was cut."""
    if len(text) <= limit:
        return text
    key = 0 if key is None else min(max(key, 0), len(text) - 1)
    start = max(0, min(key - limit // 3, len(text) - limit))
    end = min(len(text), start + limit)
    if start > 0:  # begin at a word: after the first space in the window's first third (not past the key)
        space = text.find(" ", start - 1, min(key, start + limit // 3) + 1)
        start = space + 1 if space >= 0 else start
    if end < len(text):  # end at a word: before the last space in the window's last third (not before the key)
        space = text.rfind(" ", max(key + 1, end - limit // 3), end + 1)
        end = space if space > start else end
    return (ELLIPSIS if start > 0 else "") + text[start:end].strip() + (ELLIPSIS if end < len(text) else "")


def where_apart(text: str, other: str) -> int:
    """The index where `text` first differs from `other` (a wrong reply and its right twin): the part that matters."""
    return len(os.path.commonprefix([text, other]))
