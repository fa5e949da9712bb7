"""The token picker: a query row or key column picked by index, and where it is drawn.

A token is picked from a list or by a click on a cell of the large map (its row or its
column: ``pick_from_cell``; Streamlit 1.67 passes no clicks on heatmap cells, so the figure
carries an invisible point on each, ``core.figures.attention.clickable``); the pick travels
in the URL as ``ViewState.token`` and indexes the tokens before <bos>/<eos> columns are hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.attention.head_stats import hide_special


@dataclass
class Highlight:
    """A picked token as drawn: a query row or a key column of the shown map."""

    axis: str  # "query" (a row) or "key" (a column)
    index: int  # the row or column as drawn (after hidden columns are dropped); -1: not drawn
    label: str  # e.g. "query 2 (chez)"
    problem: str = ""  # why nothing is drawn ("" = drawn)


def parse_pick(token: str) -> tuple[str, int] | None:
    """ "q3" -> ("query", 3), "k0" -> ("key", 0); anything else -> None."""
    text = str(token or "")
    digits = text[1:]
    if text[:1] not in ("q", "k") or not (digits.isascii() and digits.isdigit()) or len(digits) > 6:
        return None
    return ("query" if text[0] == "q" else "key"), int(text[1:])


CLICK_AXES = ("query", "key")  # what a click on a map's cell outlines: its row or its column


def pick_from_cell(axis: str, row: int, column: int, key_tokens: Sequence[str], hide: bool) -> str:
    """The pick ("q<i>"/"k<j>", indices before hiding) of a clicked cell of the map as drawn:
    its query row, or its key column counted past the hidden <bos>/<eos> columns."""
    if axis not in CLICK_AXES:
        raise ValueError(f"a click outlines a query or a key, not {axis!r}")
    if axis == "query":
        return f"q{row}"
    kept = hide_special(np.zeros((1, len(key_tokens)), np.float32), key_tokens)[1] if hide else None
    return f"k{kept[column] if kept is not None else column}"


def pick_options(query_tokens: Sequence[str], key_tokens: Sequence[str]) -> list[str]:
    """Choices of the token picker: "" (none), "q0".."q<Tq-1>", "k0".."k<Tk-1>"."""
    return ["", *(f"q{i}" for i in range(len(query_tokens)))] + [
        f"k{j}" for j in range(len(key_tokens))
    ]


def pick_label(token: str, query_tokens: Sequence[str], key_tokens: Sequence[str]) -> str:
    """A picker entry in words: "query: chez (2)", "key: home (1)", "none"."""
    parsed = parse_pick(token)
    if parsed is None:
        return "none"
    axis, i = parsed
    tokens = query_tokens if axis == "query" else key_tokens
    return f"{axis}: {tokens[i]} ({i})" if i < len(tokens) else f"{axis} {i}"


def resolve_pick(
    token: str, query_tokens: Sequence[str], key_tokens: Sequence[str], hide: bool
) -> Highlight | None:
    """Where a picked token ("q<i>"/"k<j>", indices before hiding) is drawn; None if none.

    A key column moves left past hidden <bos>/<eos> columns; a hidden key or an index
    outside the map gives a Highlight with a ``problem`` and nothing to draw.
    """
    parsed = parse_pick(token)
    if parsed is None:
        return None
    axis, i = parsed
    tokens = query_tokens if axis == "query" else key_tokens
    if i >= len(tokens):
        return Highlight(
            axis, -1, f"{axis} {i}", f"{axis} {i} is outside this map (0–{len(tokens) - 1})"
        )
    label = f"{axis} {i} ({tokens[i]})"
    if axis == "query" or not hide:
        return Highlight(axis, i, label)
    kept = hide_special(np.zeros((1, len(tokens)), np.float32), tokens)[1]
    if i not in kept:
        return Highlight(axis, -1, label, f"{label} is hidden (Hide <bos>/<eos> is on)")
    return Highlight(axis, kept.index(i), label)
