"""One sentence's attention maps as numpy arrays, and the views and playback steps cut from them.

Shape key: L layers, H heads, S source tokens (with <eos>), T output steps, K keys.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.attention import head_stats
from core.attention.kinds import check_tokens, kind_labels
from core.attention.sentence_maps import SentenceMaps
from core.model.checked_translation import translate_sentence
from core.model.interface import TranslationModel
from core.model.parts import DecodeSettings, TranslationError

HEAD_AGGREGATES = ("mean", "max", "rollout")  # besides a head number; rollout: encoder only
HIDDEN_NOTE = "<bos>/<eos> columns hidden, rows renormalised"
NAMED_ROWS = 6  # a note names at most this many blank rows
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # spreadsheets treat such a cell as a formula
EXPORT_NAME_CHARS = 80  # longest download file name, without its extension
MODEL_NAME_CHARS = 30  # of which the model's part takes at most this many
WHAT_CHARS = 30  # and the words saying which chart (e.g. "grid-training-step-150")
KIND_SLUGS = {"encoder": "encoder", "decoder_self": "decoder-self", "cross": "cross"}


def head_options(kind: str, n_heads: int) -> list[str]:
    """Choices for the head picker: "0".."H-1", then the aggregates that apply to ``kind``."""
    aggs = [a for a in HEAD_AGGREGATES if a != "rollout" or kind == "encoder"]
    return [str(h) for h in range(n_heads)] + aggs


@dataclass
class View:
    """One 2-D attention map ready to draw or download."""

    kind: str
    weights: np.ndarray  # (Tq, Tk); NaN rows: all their weight was on hidden keys
    query_tokens: list[str]
    key_tokens: list[str]
    title: str
    note: str = ""  # what was done to the map ("" = raw weights)
    blank: dict[int, str] = field(default_factory=dict)  # query row -> why it is blank


@dataclass
class ShownColumns:
    """Weights with some key columns hidden: what is left, and which rows had nothing left."""

    weights: np.ndarray  # (..., Tq, Tk') rows renormalised; NaN rows: blank
    keys: list[str]  # the Tk' key tokens still shown
    note: str  # "" when nothing was hidden
    blank: dict[int, str]  # query row -> the hidden tokens that held all its weight


def hide_columns(
    weights: np.ndarray, queries: Sequence[str], keys: Sequence[str], hide: bool
) -> ShownColumns:
    """Weights (..., Tq, Tk) with <bos>/<eos> columns hidden and rows renormalised if asked.

    A row whose whole weight was on hidden columns is left out of the renormalisation: it
    stays NaN (drawn blank, written with an empty weight) and the note names it.
    """
    if not hide:
        return ShownColumns(weights, list(keys), "", {})
    shown, kept = head_stats.hide_special(weights, keys)  # (..., Tq, Tk')
    blank = blank_rows(weights, shown, keys, kept)
    note = "; ".join(x for x in (HIDDEN_NOTE, blank_note(blank, queries, shown)) if x)
    return ShownColumns(shown.astype(np.float32), [keys[i] for i in kept], note, blank)


def blank_rows(
    weights: np.ndarray, shown: np.ndarray, keys: Sequence[str], kept: list[int]
) -> dict[int, str]:
    """Rows that are NaN in some map, each with the hidden tokens that held its weight."""
    empty = np.isnan(shown).all(axis=-1).reshape(-1, shown.shape[-2])  # (maps, Tq)
    hidden = [i for i in range(len(keys)) if i not in kept]
    flat = np.asarray(weights).reshape(-1, *weights.shape[-2:])  # (maps, Tq, Tk)
    out = {}
    for row in np.flatnonzero(empty.any(axis=0)):
        held = flat[:, row, hidden].max(axis=0) > 0 if hidden else []  # (hidden,)
        tokens = "/".join(dict.fromkeys(keys[i] for i, h in zip(hidden, held) if h))
        out[int(row)] = tokens or "hidden keys"
    return out


def blank_note(blank: dict[int, str], queries: Sequence[str], shown: np.ndarray) -> str:
    """E.g. "row 0 (je) attends only to <bos>: left blank" (rows grouped by token)."""
    every = np.isnan(shown).all(axis=-1).reshape(-1, shown.shape[-2]).all(axis=0)  # (Tq,)
    parts = []
    for tokens in dict.fromkeys(blank.values()):
        rows = [r for r, t in blank.items() if t == tokens]
        names = ", ".join(f"{r} ({queries[r]})" for r in rows[:NAMED_ROWS])
        names += f" and {len(rows) - NAMED_ROWS} more" if len(rows) > NAMED_ROWS else ""
        verb = "row {} attends" if len(rows) == 1 else "rows {} attend"
        some = "" if all(every[r] for r in rows) else " in some heads"
        parts.append(f"{verb.format(names)} only to {tokens}{some}: left blank")
    return "; ".join(parts)


def decoder_view(maps: SentenceMaps, kind: str, layer: int, head: str) -> tuple[str, int, str]:
    """(kind, layer, head) of the decoder closest to the one asked for: cross attention
    for the encoder, the mean of the heads for one this kind lacks, the layer clamped."""
    kind = kind if kind != "encoder" else "cross"
    head = head if head in head_options(kind, maps.heads) else "mean"
    return kind, min(layer, maps.layers(kind) - 1), head


def select_view(
    maps: SentenceMaps, kind: str, layer: int, head: str | int, hide: bool = False
) -> View:
    """The map of one layer and head (or mean/max over heads, or encoder rollout)."""
    w = maps.weights(kind)  # (L, H, Tq, Tk)
    queries, keys = maps.tokens(kind)
    if not 0 <= layer < w.shape[0]:
        raise IndexError(f"Layer {layer} does not exist (0..{w.shape[0] - 1}).")
    head = str(head)
    title = kind_labels(kind)[0]
    if head in ("mean", "max"):
        chosen = head_stats.aggregate(w[layer : layer + 1], head)[0, 0]  # (Tq, Tk)
        what = f"{head} over {w.shape[1]} heads"
    elif head == "rollout":
        if kind != "encoder":
            raise ValueError("Attention rollout is defined for the encoder only.")
        chosen = head_stats.rollout(w)[layer]  # (S, S)
        what = f"rollout through layers 0–{layer}"
    elif head.isdigit() and int(head) < w.shape[1]:
        chosen = w[layer, int(head)]  # (Tq, Tk)
        what = f"head {head}"
    else:
        raise IndexError(f"Head {head!r} does not exist (0..{w.shape[1] - 1}, mean, max).")
    cut = hide_columns(np.asarray(chosen, dtype=np.float32), queries, keys, hide)
    name = f"{title} — layer {layer}, {what}"
    return View(kind, cut.weights, list(queries), cut.keys, name, cut.note, cut.blank)


def csv_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: a leading ' before a formula start (OWASP)."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def weights_frame(
    weights2d: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    blank: Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """Long table (query_index, query_token, key_index, key_token, weight, note) for CSV.

    A blank row (``blank``: query index -> the hidden tokens that held its weight) has an
    empty weight and a note saying why. Tokens go through csv_cell, so a spreadsheet never
    runs one as a formula.
    """
    check_tokens(weights2d.shape, query_tokens, key_tokens)
    tq, tk = weights2d.shape
    q_idx = np.repeat(np.arange(tq), tk)
    k_idx = np.tile(np.arange(tk), tq)
    notes = [csv_cell(blank_csv_note(blank[q])) if q in (blank or {}) else "" for q in range(tq)]
    return pd.DataFrame(
        {
            "query_index": q_idx,
            "query_token": np.asarray([csv_cell(t) for t in query_tokens], dtype=object)[q_idx],
            "key_index": k_idx,
            "key_token": np.asarray([csv_cell(t) for t in key_tokens], dtype=object)[k_idx],
            "weight": np.asarray(weights2d, dtype=np.float64).ravel(),
            "note": np.asarray(notes, dtype=object)[q_idx],
        }
    )


def blank_csv_note(tokens: str) -> str:
    """The CSV note of a blank row: why its weights are empty."""
    return f"all weight on hidden {tokens}; nothing left to renormalise"


def view_csv(view: View) -> bytes:
    """The weights of a view as CSV (one row per query/key pair; RFC 4180 CRLF line ends).

    Weights of blank rows (all weight on hidden columns) are empty, with a note.
    """
    return (
        weights_frame(view.weights, view.query_tokens, view.key_tokens, view.blank)
        .to_csv(index=False, lineterminator="\r\n")  # so a CR inside a cell gets quoted
        .encode("utf-8")
    )


def slug_words(text: str) -> list[str]:
    """The ASCII words of ``text``, lower case: accents dropped, apostrophes joined ("im")."""
    plain = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    return re.findall(r"[a-z0-9]+", plain.lower().replace("'", ""))


def _fit_words(words: list[str], budget: int, sep: str = "-") -> str:
    """The first words joined by ``sep``, as many whole words as fit in ``budget`` characters."""
    out = ""
    for word in words:
        longer = f"{out}{sep}{word}" if out else word
        if len(longer) > budget:
            break
        out = longer
    return out


def _model_words(model_key: str) -> list[str]:
    """Words naming a model key: "checkpoints/fra-eng-small.pt" -> fra, eng, small."""
    parts = [p for p in re.sub(r"\.pt$", "", str(model_key)).replace("\\", "/").split("/") if p]
    return [w for part in parts[1:] or parts for w in slug_words(part)]


def _view_words(kind: str | None, layer: int | None, head: str | int | None) -> list[str]:
    """The kind, layer and head of a file name: "cross", "layer1", "head2" (or "mean")."""
    words = [KIND_SLUGS[kind]] if kind in KIND_SLUGS else []
    words += [f"layer{int(layer)}"] if layer is not None else []
    if head is not None:
        words += [f"head{head}" if str(head).isdigit() else _fit_words(slug_words(head), 12)]
    return [w for w in words if w]


def export_name(
    model_key: str,
    sentence: str,
    kind: str | None = None,
    layer: int | None = None,
    head: str | int | None = None,
    what: str = "",
) -> str:
    """A download's file name, no extension: "fra-eng-small_im-home_cross_layer1_head2".

    Only [a-z0-9_-]; at most EXPORT_NAME_CHARS long, by dropping whole words (never cut
    mid-word): the sentence's last words go first.
    """
    view = [*_view_words(kind, layer, head), _fit_words(slug_words(what), WHAT_CHARS)]
    tail = _fit_words([w for w in view if w], EXPORT_NAME_CHARS - 6, "_")
    budget = min(MODEL_NAME_CHARS, EXPORT_NAME_CHARS - len(tail) - 1)
    model = _fit_words(_model_words(model_key), budget) or "model"
    room = EXPORT_NAME_CHARS - len(model) - len(tail) - 2
    return "_".join(p for p in (model, _fit_words(slug_words(sentence), room), tail) if p)


@dataclass
class PlaybackStep:
    """What the decoder saw and produced at one output step, for one layer."""

    step: int
    read: str  # the token fed in at this step
    produced: str  # the token chosen at this step
    prefix: list[str]  # output tokens up to and including this step
    cross: np.ndarray  # (H, S) cross attention of this step's query
    self_row: np.ndarray  # (H, step + 1) decoder self-attention over the tokens read so far
    self_keys: list[str]  # the step + 1 tokens read so far
    src_tokens: list[str]
    topk: list[tuple[str, float]]  # candidates for this step's token


def playback_rows(
    decoder_self: np.ndarray, cross: np.ndarray, step: int
) -> tuple[np.ndarray, np.ndarray]:
    """Attention of the output token generated at `step`, as seen at that step.

    Args:
        decoder_self: (L, H, T, T) decoder self-attention of the generated output.
        cross: (L, H, T, S) cross attention of the generated output.
        step: query index 0 <= step < T.

    Returns:
        (self_row (L, H, T) with zeros for keys after `step`, cross_row (L, H, S)).
    """
    n_steps = decoder_self.shape[2]
    if not 0 <= step < n_steps:
        raise IndexError(f"Step {step} is outside the generated output (0..{n_steps - 1}).")
    self_row = decoder_self[:, :, step, :].copy()  # (L, H, T)
    self_row[..., step + 1 :] = 0.0
    return self_row, cross[:, :, step, :].copy()  # (L, H, T), (L, H, S)


def playback_step(maps: SentenceMaps, topk: Sequence, step: int, layer: int) -> PlaybackStep:
    """One step of the free-running decoder: its attention rows and next-token candidates."""
    self_rows, cross_rows = playback_rows(maps.decoder_self, maps.cross, step)
    if not 0 <= layer < self_rows.shape[0]:
        raise IndexError(f"Layer {layer} does not exist (0..{self_rows.shape[0] - 1}).")
    return PlaybackStep(
        step,
        maps.decoder_inputs[step],
        maps.output_tokens[step],
        maps.output_tokens[: step + 1],
        cross_rows[layer],
        self_rows[layer, :, : step + 1],
        maps.decoder_inputs[: step + 1],
        maps.src_tokens,
        list(topk[step]) if step < len(topk) else [],
    )


def teacher_forced_maps(
    lm: TranslationModel, sentence: str, reference: str, target_lang: str | None = None
) -> SentenceMaps:
    """Maps of one teacher-forced pass that feeds the reference instead of the model's output
    (a Hugging Face model's reference read by its own tokenizer): the forced translation's,
    checked as a typed translation is (TranslationError for an over-long one)."""
    if not (reference or "").strip():
        raise TranslationError("The reference is empty: type the translation to force.")
    settings = DecodeSettings(target_lang=target_lang or "")
    return SentenceMaps.from_translation(translate_sentence(lm, sentence, settings, reference))
