"""One sentence's attention maps as numpy arrays, and the views and playback steps cut from them.

Shape key: L layers, H heads, S source tokens (with <eos>), T output steps, K keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from core import head_stats
from core.attention_kinds import KINDS, check_tokens, kind_labels
from core.checkpoint import LoadedModel
from core.data import Vocab, tokenize
from core.decode import Translation, TranslationError, prepare_source, teacher_forced

HEAD_AGGREGATES = ("mean", "max", "rollout")  # besides a head number; rollout: encoder only
HIDDEN_NOTE = "<bos>/<eos> columns hidden, rows renormalised"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # spreadsheets treat such a cell as a formula


@dataclass
class SentenceMaps:
    """Attention of one sentence as numpy arrays, with the tokens of each axis."""

    encoder: np.ndarray  # (L, H, S, S)
    decoder_self: np.ndarray  # (L, H, T, T)
    cross: np.ndarray  # (L, H, T, S)
    src_tokens: list[str]  # S source tokens, with <eos>
    output_tokens: list[str]  # T tokens each decoder step produced
    decoder_inputs: list[str]  # T tokens each decoder step read: <bos> + output[:-1]

    @classmethod
    def from_translation(cls, t: Translation) -> SentenceMaps:
        """The maps of a Translation (as the decoder actually generated it)."""
        a = t.attention
        arrays = (np.asarray(m, dtype=np.float32) for m in (a.encoder, a.decoder_self, a.cross))
        return cls(*arrays, list(t.src_tokens), list(t.output_tokens), list(t.decoder_inputs))

    @classmethod
    def from_probe(cls, probe: Mapping) -> SentenceMaps:
        """The maps of one probe sentence stored in a training snapshot."""
        arrays = (
            probe[k].float().numpy()
            if isinstance(probe[k], torch.Tensor)
            else np.asarray(probe[k], dtype=np.float32)
            for k in KINDS
        )
        return cls(
            *arrays,
            list(probe["src_tokens"]),
            list(probe["output_tokens"]),
            list(probe["decoder_inputs"]),
        )

    def weights(self, kind: str) -> np.ndarray:
        """(L, H, Tq, Tk) maps of one kind."""
        kind_labels(kind)  # raises for an unknown kind
        return getattr(self, kind)

    def tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of one kind."""
        return {
            "encoder": (self.src_tokens, self.src_tokens),
            "decoder_self": (self.output_tokens, self.decoder_inputs),
            "cross": (self.output_tokens, self.src_tokens),
        }[kind]

    def layers(self, kind: str) -> int:
        """Number of layers of one kind."""
        return self.weights(kind).shape[0]

    @property
    def heads(self) -> int:
        """Heads per layer."""
        return self.encoder.shape[1]


def head_options(kind: str, n_heads: int) -> list[str]:
    """Choices for the head picker: "0".."H-1", then the aggregates that apply to ``kind``."""
    aggs = [a for a in HEAD_AGGREGATES if a != "rollout" or kind == "encoder"]
    return [str(h) for h in range(n_heads)] + aggs


@dataclass
class View:
    """One 2-D attention map ready to draw or download."""

    kind: str
    weights: np.ndarray  # (Tq, Tk)
    query_tokens: list[str]
    key_tokens: list[str]
    title: str
    note: str = ""  # what was done to the map ("" = raw weights)


def hide_columns(weights: np.ndarray, keys: list[str], hide: bool):
    """Weights and key tokens with <bos>/<eos> columns hidden (rows renormalised) if asked."""
    if not hide:
        return weights, keys, ""
    shown, kept = head_stats.hide_special(weights, keys)
    return shown.astype(np.float32), [keys[i] for i in kept], HIDDEN_NOTE


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
    shown, keys, note = hide_columns(np.asarray(chosen, dtype=np.float32), keys, hide)
    return View(kind, shown, list(queries), keys, f"{title} — layer {layer}, {what}", note)


def csv_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: a leading ' before a formula start (OWASP)."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def weights_frame(
    weights2d: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str]
) -> pd.DataFrame:
    """Long table (query_index, query_token, key_index, key_token, weight) for CSV.

    Tokens go through csv_cell, so a spreadsheet never runs one as a formula.
    """
    check_tokens(weights2d.shape, query_tokens, key_tokens)
    tq, tk = weights2d.shape
    q_idx = np.repeat(np.arange(tq), tk)
    k_idx = np.tile(np.arange(tk), tq)
    return pd.DataFrame(
        {
            "query_index": q_idx,
            "query_token": np.asarray([csv_cell(t) for t in query_tokens], dtype=object)[q_idx],
            "key_index": k_idx,
            "key_token": np.asarray([csv_cell(t) for t in key_tokens], dtype=object)[k_idx],
            "weight": np.asarray(weights2d, dtype=np.float64).ravel(),
        }
    )


def view_csv(view: View) -> bytes:
    """The weights of a view as CSV (one row per query/key pair; RFC 4180 CRLF line ends)."""
    return (
        weights_frame(view.weights, view.query_tokens, view.key_tokens)
        .to_csv(index=False, lineterminator="\r\n")  # so a CR inside a cell gets quoted
        .encode("utf-8")
    )


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


def teacher_forced_maps(lm: LoadedModel, sentence: str, reference: str) -> SentenceMaps:
    """Maps of one teacher-forced pass that feeds the reference instead of the model's output."""
    ref = tokenize(reference or "")
    if not ref:
        raise TranslationError("The reference is empty: type the French translation to force.")
    ids, src_tokens, _, _ = prepare_source(sentence, lm.src_vocab, lm.model.cfg.max_positions)
    limit = lm.model.cfg.max_positions - 1
    out_ids = (lm.tgt_vocab.encode(ref) + [Vocab.eos_id])[:limit]
    device = next(lm.model.parameters()).device
    _, maps = teacher_forced(lm.model, torch.tensor([ids], device=device), out_ids)
    arrays = (m[:, 0].float().cpu().numpy() for m in (maps.encoder, maps.decoder_self, maps.cross))
    outputs = (ref + ["<eos>"])[: len(out_ids)]
    return SentenceMaps(*arrays, src_tokens, outputs, ["<bos>"] + outputs[:-1])
