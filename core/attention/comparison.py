"""Two attention maps compared: two models on one sentence, or two sentences on one model.

Shape key: L layers, H heads, Tq query tokens (rows), Tk key tokens (columns). A is the
page's model (or first sentence), B the compared one; every difference is B − A.
"""

from __future__ import annotations

import difflib
from collections import Counter
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
from core.model.interface import TranslationModel
from core.model.parts import Translation

DIFF_WORDS = "B − A"  # what a difference map shows
SAME_WITHIN = 1e-6  # two maps whose cells all differ by less than this are the same
CANDIDATES_SHOWN = 3  # next-token candidates per step in the side-by-side table


class CompareError(ValueError):
    """Two maps cannot be compared; the message says why and what to do."""


@dataclass
class TokenMatch:
    """Which row and column of map A and of map B each compared row and column holds.

    ``None``: that side has no such row or column (the other sentence's word): NaN there.
    """

    rows_a: list[int | None]
    rows_b: list[int | None]
    cols_a: list[int | None]
    cols_b: list[int | None]
    query_tokens: list[str]  # the label of each compared row
    key_tokens: list[str]  # the label of each compared column

    def cut(self, weights: np.ndarray, side: str) -> np.ndarray:
        """(..., Tq, Tk) weights of side "a" or "b" -> (..., Tq', Tk'), NaN where it has none."""
        rows, cols = (self.rows_a, self.cols_a) if side == "a" else (self.rows_b, self.cols_b)
        w = np.asarray(weights, dtype=np.float32)  # (..., Tq, Tk)
        w = np.concatenate([w, np.full_like(w[..., :1, :], np.nan)], axis=-2)  # (..., Tq+1, Tk)
        w = w[..., [-1 if r is None else r for r in rows], :]  # (..., Tq', Tk); -1: NaN row
        w = np.concatenate([w, np.full_like(w[..., :1], np.nan)], axis=-1)  # (..., Tq', Tk+1)
        return w[..., [-1 if c is None else c for c in cols]]  # (..., Tq', Tk'); -1: NaN column


def merged_label(tok_a: str | None, tok_b: str | None) -> str:
    """The label of a compared row or column: "home", "home ≠ cold", "at (B only)"."""
    if tok_b is None:
        return f"{tok_a} (A only)"
    if tok_a is None:
        return f"{tok_b} (B only)"
    return tok_a if tok_a == tok_b else f"{tok_a} ≠ {tok_b}"


def merged_positions(
    a: Sequence[str], b: Sequence[str]
) -> tuple[list[int | None], list[int | None], list[str]]:
    """Every position of ``a`` and of ``b`` on one axis, in order, and each one's label.

    Runs of equal tokens are matched (difflib.SequenceMatcher, never crossing); between
    them, runs of differing tokens of the same length are word-for-word substitutions, paired
    place by place ("home ≠ cold"); runs of different lengths are not paired (pairing them by
    place matched "grand" with "très" in "il est grand" / "il est très fatigué"): A's tokens
    stand alone, then B's (None on the other side). No token of either is left out.
    """
    matcher = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False)
    pos_a: list[int | None] = []
    pos_b: list[int | None] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "replace" and i2 - i1 != j2 - j1:
            pos_a += [*range(i1, i2), *[None] * (j2 - j1)]
            pos_b += [*[None] * (i2 - i1), *range(j1, j2)]
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            pos_a.append(i1 + k if i1 + k < i2 else None)
            pos_b.append(j1 + k if j1 + k < j2 else None)
    labels = [
        merged_label(None if i is None else a[i], None if j is None else b[j])
        for i, j in zip(pos_a, pos_b)
    ]
    return pos_a, pos_b, labels


def unmatched(
    mine: Sequence[str], theirs: Sequence[str], pos_mine: Sequence, pos_theirs: Sequence
) -> list[str]:
    """My tokens (with their position, "home (3)") that the other side lacks at that place."""
    return [
        f"{mine[i]} ({i})"
        for i, j in zip(pos_mine, pos_theirs)
        if i is not None and (j is None or mine[i] != theirs[j])
    ]


def align_tokens(a: View, b: View) -> TokenMatch:
    """Rows and columns of two views on one merged axis each: every token of both."""
    rows_a, rows_b, queries = merged_positions(a.query_tokens, b.query_tokens)
    cols_a, cols_b, keys = merged_positions(a.key_tokens, b.key_tokens)
    return TokenMatch(rows_a, rows_b, cols_a, cols_b, queries, keys)


def same_tokens(a: View, b: View) -> TokenMatch:
    """The identity alignment of two views on the same tokens (raises when they differ)."""
    if a.query_tokens != b.query_tokens or a.key_tokens != b.key_tokens:
        raise CompareError(
            f"The two maps have different tokens ({len(a.query_tokens)} × {len(a.key_tokens)} "
            f"and {len(b.query_tokens)} × {len(b.key_tokens)}), so no cell-by-cell "
            "difference is possible: feed both decoders the same output."
        )
    rows, cols = list(range(len(a.query_tokens))), list(range(len(a.key_tokens)))
    return TokenMatch(rows, rows, cols, cols, list(a.query_tokens), list(a.key_tokens))


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
    """One view of two maps on the same (or merged) rows and columns, and B − A."""

    a: View  # (Tq', Tk') A's weights; NaN rows/columns: only B has that token
    b: View  # (Tq', Tk') B's weights; NaN rows/columns: only A has that token
    diff: np.ndarray  # (Tq', Tk') B − A; NaN where either side is blank or has no such token
    only_a: dict[str, list[str]] = field(default_factory=dict)  # axis -> A's tokens B lacks there
    only_b: dict[str, list[str]] = field(default_factory=dict)  # axis -> B's tokens A lacks there

    @property
    def largest(self) -> float:
        """The largest |B − A| of the view (blank cells ignored; NaN when all are blank)."""
        values = np.abs(self.diff[~np.isnan(self.diff)])
        return float(values.max()) if values.size else float("nan")


def _cut_view(view: View, align: TokenMatch, side: str) -> View:
    """A view on the aligned rows and columns (blank rows renumbered; NaN where it has none)."""
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
    """The view (kind, layer, head) of A and B and B − A, on the same or merged tokens.

    ``by_token``: every row and column of both on one merged axis (two sentences; see
    merged_positions); else the tokens must be equal.
    """
    layer, head = common_view(maps_a, maps_b, kind, layer, head)
    va = select_view(maps_a, kind, layer, head, hide)
    vb = select_view(maps_b, kind, layer, head, hide)
    align = align_tokens(va, vb) if by_token else same_tokens(va, vb)
    a, b = _cut_view(va, align, "a"), _cut_view(vb, align, "b")
    qa, qb, ka, kb = va.query_tokens, vb.query_tokens, va.key_tokens, vb.key_tokens
    only_a = {"query": unmatched(qa, qb, align.rows_a, align.rows_b)}
    only_a["key"] = unmatched(ka, kb, align.cols_a, align.cols_b)
    only_b = {"query": unmatched(qb, qa, align.rows_b, align.rows_a)}
    only_b["key"] = unmatched(kb, ka, align.cols_b, align.cols_a)
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


def cut_differently(a: TranslationModel, b: TranslationModel) -> bool:
    """Whether two models read or write a sentence as different pieces (compare in words)."""
    return a.tokens_key() != b.tokens_key()


def unknown_words(m: TranslationModel, text: str) -> list[str]:
    """Words of ``text`` the model's target vocabulary lacks (teacher forcing feeds <unk>),
    each once, in order, with how often it occurs where more than once: "kind (×3)"."""
    counts = Counter(m.unknown_target_words(text))
    return [word if n == 1 else f"{word} (×{n})" for word, n in counts.items()]


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


def fed_output(outputs: dict[str, str], chosen: str) -> tuple[str | None, str]:
    """(whose output both decoders read, a note): ``chosen`` ("A" or "B"), or the other one
    where the chosen output is empty (nothing to feed), with a note naming it; None, with a
    note, where both are empty."""
    if outputs[chosen].strip():
        return chosen, ""
    other = next(k for k in outputs if k != chosen)
    if not outputs[other].strip():
        return None, "Both models' outputs are empty: there is nothing to feed both decoders."
    return other, (
        f"Model {chosen}'s output is empty (nothing to feed): both decoders read model "
        f"{other}'s output instead."
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
    """Long table of a pair: one row per compared cell, A's and B's weight and B − A.

    Indices count the compared rows and columns; an empty weight has a note: a blank row
    (all weight on hidden keys), or a token that side's sentence does not have. Tokens and
    notes are CSV-safe (maps.weights_frame).
    """
    a = weights_frame(pair.a.weights, pair.a.query_tokens, pair.a.key_tokens, pair.a.blank)
    b = weights_frame(pair.b.weights, pair.b.query_tokens, pair.b.key_tokens, pair.b.blank)
    frame = a.drop(columns=["weight", "note"])
    frame["weight_a"], frame["weight_b"] = a["weight"], b["weight"]
    frame["b_minus_a"] = np.asarray(pair.diff, dtype=np.float64).ravel()
    frame["note"] = (_side_notes("A", a) + "; " + _side_notes("B", b)).str.strip("; ")
    return frame


def _side_notes(side: str, cells: pd.DataFrame) -> pd.Series:
    """Why each of one side's weights is empty, e.g. "B: no such row or column in sentence B"."""
    absent = cells["weight"].isna() & (cells["note"] == "")
    note = cells["note"].mask(absent, f"no such row or column in sentence {side}")
    return (f"{side}: " + note).where(note != "", "")


def pair_csv(pair: PairView) -> bytes:
    """A pair's cells as CSV (indices count the compared rows and columns; see pair_frame)."""
    return frame_csv(pair_frame(pair))
