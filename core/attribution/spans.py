"""Span aggregation: several source or output tokens a user names read as one (inseq's
``ContiguousSpanAggregator``).

Spans are written ``a:b`` (tokens a .. b-1, 0-based, as Python slices), several separated by
commas: ``0:2,3:5``. A source span merges columns of the source part; an output span merges
the rows of those output tokens and the prefix columns that read the same tokens (decoder
input j + 1 is output token j). Merged as ``in_words`` merges a word's pieces: a span's
column is the **sum** of its columns (rows still sum to 1), a span's row the **mean** of its
rows. inseq's span aggregator takes the largest absolute value of a span by default
(``absmax``); the sum and mean here keep a row's total, which the source share needs.
Tokens outside every span stay as they are; spans may not overlap or leave the sentence.

Shape key: S source tokens, T output tokens; S', T' after merging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from core.attribution.methods import AttributionError

Shown = TypeVar("Shown")  # an Explained (explain imports this module: no import back)
MAX_SPANS = 200  # more spans than any sentence has tokens is a mistake, said in one line


def parse_spans(text: str, length: int, side: str) -> list[tuple[int, int]]:
    """``"0:2,3:5"`` -> [(0, 2), (3, 5)] over ``length`` tokens of ``side`` ("source" or
    "output"); AttributionError naming a span that cannot be read, is empty, leaves the
    sentence or overlaps another."""
    spans = []
    parts = [p.strip() for p in (text or "").replace(" ", ",").split(",") if p.strip()]
    if len(parts) > MAX_SPANS:
        raise AttributionError(f"at most {MAX_SPANS} {side} spans (got {len(parts)})")
    for part in parts:
        left, colon, right = part.partition(":")
        if not (colon and left.isdigit() and right.isdigit() and len(left + right) < 12):
            raise AttributionError(f"{side} span {part!r} is not a:b (tokens a to b-1), e.g. 0:2")
        a, b = int(left), int(right)
        if not a < b <= length:
            raise AttributionError(
                f"{side} span {part} is out of range: a < b <= {length} (the {side} has "
                f"{length} tokens, 0..{length - 1})"
            )
        spans.append((a, b))
    spans.sort()
    for (a, b), (c, d) in zip(spans, spans[1:]):
        if c < b:
            raise AttributionError(f"{side} spans {a}:{b} and {c}:{d} overlap")
    return spans


def partition(spans: Sequence[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """Every token of ``length`` in one group: the ``spans``, and each other token alone."""
    groups, i = [], 0
    for a, b in sorted(spans):
        groups += [(j, j + 1) for j in range(i, a)] + [(a, b)]
        i = b
    return groups + [(j, j + 1) for j in range(i, length)]


def merge(matrix: np.ndarray, rows: list[tuple[int, int]], cols: list[tuple[int, int]]):
    """(N, M) -> (N', M'): the mean of each row group, the sum of each column group."""
    by_row = np.stack([matrix[a:b].mean(axis=0) for a, b in rows])  # (N', M)
    return np.stack([by_row[:, a:b].sum(axis=1) for a, b in cols], axis=1).astype(matrix.dtype)


def joined(tokens: Sequence[str], groups: list[tuple[int, int]]) -> list[str]:
    """A label per group: its tokens separated by spaces."""
    return [" ".join(tokens[a:b]) for a, b in groups]


def prefix_groups(out_groups: list[tuple[int, int]], T: int) -> list[tuple[int, int]]:
    """The prefix columns of output groups: decoder input j + 1 reads output token j, so an
    output span a:b merges prefix columns a + 1 .. b (the start token stays alone)."""
    inside = [(a + 1, min(b + 1, T)) for a, b in out_groups if a + 1 < T and b - a > 1]
    return partition(inside, T)


def in_spans(
    e: Shown, source: Sequence[tuple[int, int]] = (), output: Sequence[tuple[int, int]] = ()
) -> Shown:
    """The explanation (``core.attribution.explain.Explained``) with the ``source`` and
    ``output`` spans each read as one token (spans over ``e``'s own tokens, as ``parse_spans``
    checks them)."""
    a, S, T = e.attribution, len(e.source), len(e.output)
    src_groups, out_groups = partition(source, S), partition(output, T)
    pre_groups = prefix_groups(out_groups, len(e.prefix))
    parts = []
    for matrix in (a.contributions, a.raw):
        if matrix is None:
            parts.append(None)
            continue
        src = merge(matrix[:, :S], out_groups, src_groups)  # (T', S')
        pre = merge(matrix[:, S:], out_groups, pre_groups)  # (T', P')
        parts.append(np.concatenate([src, pre], axis=1))
    merged = replace(a, contributions=parts[0], raw=parts[1], source_length=len(src_groups))
    out = replace(
        e,
        attribution=merged,
        source=joined(e.source, src_groups),
        prefix=joined(e.prefix, pre_groups),
        output=joined(e.output, out_groups),
        contrast=None if e.contrast is None else joined(e.contrast, out_groups),
    )
    if e.probabilities is not None:  # a span: the product of its tokens', its worst rank
        out.probabilities = [float(np.prod(e.probabilities[x:y])) for x, y in out_groups]
        out.ranks = [max(e.ranks[x:y]) for x, y in out_groups]
    return out


def visible_in_spans(output: Sequence[tuple[int, int]], T: int) -> np.ndarray:
    """(T', P') True where a merged output row can read a merged prefix column (some of its
    tokens may read some of the column's: merged like the weights)."""
    causal = np.tril(np.ones((T, T), dtype=np.float32))  # (T, T)
    rows = partition(output, T)
    return merge(causal, rows, prefix_groups(rows, T)) > 0  # (T', P')
