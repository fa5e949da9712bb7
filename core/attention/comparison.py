"""Two attention maps compared: two models on one sentence, or two sentences on one model.

Shape key: L layers, H heads, Tq query tokens (rows), Tk key tokens (columns). A is the
page's model (or first sentence), B the compared one; every difference is B − A.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.attention.kinds import kind_labels
from core.attention.maps import (
    HIDDEN_NOTE,
    SentenceMaps,
    View,
    csv_cell,
    head_options,
    hide_columns,
    select_view,
    weights_frame,
)
from core.corpus.text import tokenize
from core.model.checked_translation import probability_text
from core.model.checkpoints import LoadedModel
from core.model.decode import Translation

DIFF_WORDS = "B − A"  # what a difference map shows
SAME_WITHIN = 1e-6  # two maps whose cells all differ by less than this are the same
CANDIDATES_SHOWN = 3  # next-token candidates per step in the side-by-side table


class CompareError(ValueError):
    """Two maps cannot be compared; the message says why and what to do."""


@dataclass
class Alignment:
    """The rows and columns of map A and map B that hold the same tokens, in order."""

    rows_a: list[int]
    rows_b: list[int]
    cols_a: list[int]
    cols_b: list[int]
    query_tokens: list[str]  # the shared query tokens, in order
    key_tokens: list[str]  # the shared key tokens, in order

    def cut(self, weights: np.ndarray, side: str) -> np.ndarray:
        """(..., Tq, Tk) weights of side "a" or "b" -> (..., Tq', Tk') on the shared tokens."""
        rows, cols = (self.rows_a, self.cols_a) if side == "a" else (self.rows_b, self.cols_b)
        return np.asarray(weights)[..., rows, :][..., cols]  # (..., Tq', Tk')


def shared_positions(a: Sequence[str], b: Sequence[str]) -> tuple[list[int], list[int]]:
    """Positions in ``a`` and in ``b`` of the tokens they share, matched in order.

    The matching blocks of difflib.SequenceMatcher: runs of equal tokens, never crossing.
    """
    matcher = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False)
    blocks = [blk for blk in matcher.get_matching_blocks() if blk.size]
    pos_a = [blk.a + k for blk in blocks for k in range(blk.size)]
    pos_b = [blk.b + k for blk in blocks for k in range(blk.size)]
    return pos_a, pos_b


def left_out(tokens: Sequence[str], kept: Sequence[int]) -> list[str]:
    """The tokens (with their position, "home (3)") that are not among the kept positions."""
    chosen = set(kept)
    return [f"{tok} ({i})" for i, tok in enumerate(tokens) if i not in chosen]


def align_tokens(a: View, b: View) -> Alignment:
    """Rows and columns of two views aligned on the tokens they share (raises when none)."""
    rows_a, rows_b = shared_positions(a.query_tokens, b.query_tokens)
    cols_a, cols_b = shared_positions(a.key_tokens, b.key_tokens)
    if not rows_a or not cols_a:
        axis = "query (row)" if not rows_a else "key (column)"
        raise CompareError(
            f"The two sentences share no {axis} token in this view, so there is nothing to "
            "align: pick sentences with words in common, or another attention kind."
        )
    queries = [a.query_tokens[i] for i in rows_a]
    return Alignment(rows_a, rows_b, cols_a, cols_b, queries, [a.key_tokens[j] for j in cols_a])


def same_tokens(a: View, b: View) -> Alignment:
    """The identity alignment of two views on the same tokens (raises when they differ)."""
    if a.query_tokens != b.query_tokens or a.key_tokens != b.key_tokens:
        raise CompareError(
            f"The two maps have different tokens ({len(a.query_tokens)} × {len(a.key_tokens)} "
            f"and {len(b.query_tokens)} × {len(b.key_tokens)}), so no cell-by-cell "
            "difference is possible: feed both decoders the same output."
        )
    rows, cols = list(range(len(a.query_tokens))), list(range(len(a.key_tokens)))
    return Alignment(rows, rows, cols, cols, list(a.query_tokens), list(a.key_tokens))


def common_size(maps_a: SentenceMaps, maps_b: SentenceMaps, kind: str) -> tuple[int, int]:
    """(layers, heads) both models have for ``kind``."""
    return min(maps_a.layers(kind), maps_b.layers(kind)), min(maps_a.heads, maps_b.heads)


def size_note(maps_a: SentenceMaps, maps_b: SentenceMaps, kind: str) -> str:
    """Words on layers and heads that only one model has ("" when both have the same)."""
    sizes = [(m.layers(kind), m.heads) for m in (maps_a, maps_b)]
    if sizes[0] == sizes[1]:
        return ""
    layers, heads = common_size(maps_a, maps_b, kind)
    what = kind_labels(kind)[0].split(" (")[0].lower()
    return (
        f"A has {sizes[0][0]} layers × {sizes[0][1]} heads of {what}, B has "
        f"{sizes[1][0]} × {sizes[1][1]}: compared are layers 0–{layers - 1} and heads "
        f"0–{heads - 1}, the ones both have; the mean and max are over each model's own heads."
    )


def common_view(maps_a: SentenceMaps, maps_b: SentenceMaps, kind: str, layer: int, head: str):
    """(layer, head) moved inside what both models have: the last layer, head 0 when out."""
    layers, heads = common_size(maps_a, maps_b, kind)
    head = head if head in head_options(kind, heads) else "0"
    return min(max(layer, 0), layers - 1), head


@dataclass
class PairView:
    """One view of two maps on shared rows and columns, and their difference B − A."""

    a: View  # (Tq', Tk') A's weights on the shared tokens
    b: View  # (Tq', Tk') B's weights on the shared tokens
    diff: np.ndarray  # (Tq', Tk') B − A; NaN where either side is blank
    only_a: dict[str, list[str]] = field(default_factory=dict)  # axis -> tokens only in A
    only_b: dict[str, list[str]] = field(default_factory=dict)  # axis -> tokens only in B

    @property
    def largest(self) -> float:
        """The largest |B − A| of the view (blank cells ignored; NaN when all are blank)."""
        values = np.abs(self.diff[~np.isnan(self.diff)])
        return float(values.max()) if values.size else float("nan")


def _cut_view(view: View, align: Alignment, side: str) -> View:
    """A view restricted to the aligned rows and columns (blank rows renumbered)."""
    rows = align.rows_a if side == "a" else align.rows_b
    blank = {new: view.blank[old] for new, old in enumerate(rows) if old in view.blank}
    weights = align.cut(view.weights, side)  # (Tq', Tk')
    return View(
        view.kind, weights, align.query_tokens, align.key_tokens, view.title, view.note, blank
    )


def pair_view(
    maps_a: SentenceMaps,
    maps_b: SentenceMaps,
    kind: str,
    layer: int,
    head: str,
    hide: bool = False,
    by_token: bool = False,
) -> PairView:
    """The view (kind, layer, head) of A and B and B − A, on the same or shared tokens.

    ``by_token``: align on shared tokens (two sentences); else the tokens must be equal.
    """
    layer, head = common_view(maps_a, maps_b, kind, layer, head)
    va = select_view(maps_a, kind, layer, head, hide)
    vb = select_view(maps_b, kind, layer, head, hide)
    align = align_tokens(va, vb) if by_token else same_tokens(va, vb)
    a, b = _cut_view(va, align, "a"), _cut_view(vb, align, "b")
    only_a = {"query": left_out(va.query_tokens, align.rows_a)}
    only_a["key"] = left_out(va.key_tokens, align.cols_a)
    only_b = {"query": left_out(vb.query_tokens, align.rows_b)}
    only_b["key"] = left_out(vb.key_tokens, align.cols_b)
    return PairView(a, b, (b.weights - a.weights).astype(np.float32), only_a, only_b)


@dataclass
class PairGrid:
    """B − A of every (layer, head) both models have, on the same or shared tokens."""

    diff: np.ndarray  # (L', H', Tq', Tk')
    query_tokens: list[str]
    key_tokens: list[str]
    layers: list[int]  # the layers shown
    note: str  # what was done to the maps ("" = raw weights)


def pair_grid(
    maps_a: SentenceMaps,
    maps_b: SentenceMaps,
    kind: str,
    hide: bool = False,
    layers: Sequence[int] | None = None,
    by_token: bool = False,
) -> PairGrid:
    """B − A of the chosen layers (default all both have) × the heads both have."""
    n_layers, n_heads = common_size(maps_a, maps_b, kind)
    chosen = [i for i in (range(n_layers) if layers is None else layers) if i < n_layers]
    cuts = []
    for m in (maps_a, maps_b):
        queries, keys = m.tokens(kind)
        w = m.weights(kind)[chosen][:, :n_heads]  # (L', H', Tq, Tk)
        cuts.append((hide_columns(w, queries, keys, hide), queries))
    (ca, qa), (cb, qb) = cuts
    va = View(kind, ca.weights, qa, ca.keys, "")
    vb = View(kind, cb.weights, qb, cb.keys, "")
    align = align_tokens(va, vb) if by_token else same_tokens(va, vb)
    diff = align.cut(cb.weights, "b") - align.cut(ca.weights, "a")  # (L', H', Tq', Tk')
    note = HIDDEN_NOTE if hide else ""
    return PairGrid(diff.astype(np.float32), align.query_tokens, align.key_tokens, chosen, note)


def cut_differently(a: LoadedModel, b: LoadedModel) -> bool:
    """Whether two models read or write a sentence as different pieces (compare in words)."""
    if not (a.subword or b.subword):
        return False  # word-level models share the words, whatever their vocabularies
    return a.src_vocab.itos != b.src_vocab.itos or a.tgt_vocab.itos != b.tgt_vocab.itos


def unknown_words(lm: LoadedModel, text: str) -> list[str]:
    """Words of ``text`` the model's French vocabulary lacks (teacher forcing feeds <unk>)."""
    return lm.tgt_vocab.unknown(tokenize(text))


def suggest_sentence(sentence: str, candidates: Sequence[str]) -> str:
    """The candidate sharing most tokens with ``sentence`` (not the sentence itself)."""
    mine = set(tokenize(sentence))
    others = [c for c in candidates if tokenize(c) != tokenize(sentence)]
    return max(others, key=lambda c: len(mine & set(tokenize(c))), default="")


def outputs_note(tokens_a: Sequence[str], tokens_b: Sequence[str]) -> str:
    """Whether two models' outputs are the same tokens, in words."""
    if list(tokens_a) == list(tokens_b):
        return "Both models produce the same output, so their maps have the same rows."
    return (
        "The two outputs differ, so the decoders' maps have different rows (queries). "
        "To compare them cell by cell, both decoders are fed one of the two outputs "
        "(teacher forcing): pick which."
    )


def _candidates(topk: Sequence, step: int) -> str:
    """E.g. "je 0.912 · j' 0.050" (the first CANDIDATES_SHOWN candidates of a step)."""
    if step >= len(topk):
        return ""
    return " · ".join(f"{w} {probability_text(p)}" for w, p in list(topk[step])[:CANDIDATES_SHOWN])


def topk_pair_frame(t_a: Translation, t_b: Translation) -> pd.DataFrame:
    """One row per output step: A's and B's token and candidates, and whether they agree."""
    rows = []
    for step in range(max(len(t_a.output_tokens), len(t_b.output_tokens))):
        tok_a = t_a.output_tokens[step] if step < len(t_a.output_tokens) else ""
        tok_b = t_b.output_tokens[step] if step < len(t_b.output_tokens) else ""
        rows.append(
            {
                "step": step,
                "A token": tok_a,
                "A candidates": _candidates(t_a.topk, step),
                "B token": tok_b,
                "B candidates": _candidates(t_b.topk, step),
                "same": tok_a == tok_b,
            }
        )
    return pd.DataFrame(rows)


def frame_csv(frame: pd.DataFrame) -> bytes:
    """A table as CSV; every text cell goes through csv_cell (never run as a formula)."""
    safe = frame.apply(lambda col: col.map(lambda v: csv_cell(v) if isinstance(v, str) else v))
    return safe.to_csv(index=False, lineterminator="\r\n").encode("utf-8")


def pair_frame(pair: PairView) -> pd.DataFrame:
    """Long table of a pair: one row per shared cell, A's and B's weight and B − A.

    Indices count the shared tokens; a blank row (all weight on hidden keys) has an empty
    weight and a note. Tokens and notes are CSV-safe (maps.weights_frame).
    """
    a = weights_frame(pair.a.weights, pair.a.query_tokens, pair.a.key_tokens, pair.a.blank)
    b = weights_frame(pair.b.weights, pair.b.query_tokens, pair.b.key_tokens, pair.b.blank)
    frame = a.drop(columns=["weight", "note"])
    frame["weight_a"], frame["weight_b"] = a["weight"], b["weight"]
    frame["b_minus_a"] = np.asarray(pair.diff, dtype=np.float64).ravel()
    notes = ("A: " + a["note"]).where(a["note"] != "", "")
    notes_b = ("B: " + b["note"]).where(b["note"] != "", "")
    frame["note"] = (notes + "; " + notes_b).str.strip("; ")
    return frame


def pair_csv(pair: PairView) -> bytes:
    """A pair's cells as CSV (indices count the shared tokens; empty weight: blank row)."""
    return frame_csv(pair_frame(pair))
