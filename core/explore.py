"""What the Translate and Attention pages show, without any UI: the models on disk, checked
translations, the d2l check, validation sentences, per-kind attention arrays and views,
decoding playback, teacher forcing and attention snapshots over training.

Shape key: L layers, H heads, S source tokens (with <eos>), T output steps, K keys.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from core import attention_view as av
from core import jobs
from core.checkpoint import CheckpointError, LoadedModel, read_checkpoint
from core.data import (
    FRA_ENG_ENV,
    DataConfig,
    DataError,
    Vocab,
    default_cache_dir,
    load_corpus,
    tokenize,
)
from core.decode import Translation, TranslationError, prepare_source, teacher_forced, translate
from core.evaluate import corpus_bleu
from core.runs import RunDir

SHIPPED_NAME = "fra-eng-small.pt"  # the model the app ships with, under checkpoints/
KINDS = ("encoder", "decoder_self", "cross")
HEAD_AGGREGATES = ("mean", "max", "rollout")  # besides a head number; rollout: encoder only
MAX_SENTENCE_TOKENS = 60  # longer input is refused with a message
DEFAULT_SENTENCE = "i'm home ."
HIDDEN_NOTE = "<bos>/<eos> columns hidden, rows renormalised"
D2L_CHECK = [  # the sentences and references of d2l.ai chapter 11.7
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
]


def checkpoints_dir() -> Path:
    """Where shipped checkpoints live (ATTENTION_STUDIO_CHECKPOINTS or <repo>/checkpoints)."""
    return jobs.checkpoints_root()


def runs_dir() -> Path:
    """Where training runs live (ATTENTION_STUDIO_RUNS or <repo>/runs)."""
    return jobs.runs_root()


# ----------------------------------------------------------------------------- models


@dataclass
class ModelEntry:
    """One model file the app can offer, with what is known about it."""

    key: str  # stable id used in URLs: "checkpoints/<file>" or "runs/<run>/<file>"
    path: str  # the .pt file
    kind: str  # "shipped checkpoint", "run best" or "run last"
    mtime: float  # modification time (seconds since the epoch)
    data: str = ""  # where its training data came from
    d_model: int | None = None  # model width
    layers: tuple[int, int] | None = None  # (encoder, decoder) blocks
    heads: int | None = None  # attention heads per layer
    params: int | None = None  # number of parameters
    step: int | None = None  # optimiser steps trained
    val_bleu: float | None = None  # validation BLEU of this checkpoint, if measured
    run_dir: str | None = None  # the run directory with metrics and snapshots, if known
    usable: bool = True  # False when the file cannot be read
    reason: str = ""  # why it is not usable

    @property
    def size(self) -> str:
        """Width, blocks, heads and parameters in a few characters."""
        if self.d_model is None or self.layers is None:
            return "size unknown"
        enc, dec = self.layers
        return f"width {self.d_model}, {enc}+{dec} blocks, {self.heads} heads, " + (
            f"{self.params / 1e6:.1f}M params" if self.params else "? params"
        )

    @property
    def label(self) -> str:
        """One line for a picker."""
        if not self.usable:
            return f"{self.key} (unusable: {self.reason})"
        bleu = f"val BLEU {self.val_bleu:.1f}" if self.val_bleu is not None else "no val BLEU"
        step = f"step {self.step:,}" if self.step is not None else "step ?"
        return f"{self.key} · {self.kind} · {self.data} · {self.size} · {step} · {bleu}"


def describe_data(data_config: Mapping | None) -> str:
    """A short name for the corpus a model was trained on."""
    if not data_config:
        return "data unknown"
    source = str(data_config.get("source", "?"))
    name = "fra-eng (Tatoeba)" if source == "fra-eng" else Path(source).name
    max_len = data_config.get("max_len")
    return f"{name}, ≤{max_len} tokens" if max_len else name


def _bleu_at(run_dir: Path | None, step: int | None) -> float | None:
    """The val BLEU recorded at ``step`` in a run's metrics, if any."""
    if run_dir is None or step is None:
        return None
    for rec in reversed(RunDir(run_dir).read_metrics()):
        if rec.get("kind") == "eval" and rec.get("step") == step and "val_bleu" in rec:
            return float(rec["val_bleu"])
    return None


@functools.lru_cache(maxsize=64)
def _checkpoint_info(path: str, mtime_ns: int, size: int) -> dict:
    """Metadata of a checkpoint file (cached per path, modification time and size)."""
    ckpt = read_checkpoint(path)
    cfg = ckpt.get("model_config") or {}
    state = ckpt.get("state") or {}
    params = sum(
        v.numel()
        for v in (ckpt.get("state_dict") or {}).values()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    )
    return {
        "data_config": ckpt.get("data_config") or {},
        "d_model": cfg.get("d_model"),
        "layers": (cfg.get("num_encoder_layers"), cfg.get("num_decoder_layers")),
        "heads": cfg.get("num_heads"),
        "params": params,
        "step": state.get("step"),
        "best_bleu": state.get("best_bleu"),
        "run": ckpt.get("run"),
    }


def _run_with_snapshots(name: str | None, runs: Path) -> str | None:
    """The run directory called ``name`` under ``runs`` if it has snapshots."""
    if not name:
        return None
    candidate = runs / str(name)
    return str(candidate) if RunDir(candidate).snapshot_steps() else None


def read_entry(path: Path, key: str, kind: str, run_dir: Path | None, runs: Path) -> ModelEntry:
    """Describe one checkpoint file; a reading error gives an unusable entry, never raises."""
    try:
        st = path.stat()
        info = _checkpoint_info(str(path), st.st_mtime_ns, st.st_size)
    except (CheckpointError, OSError) as e:
        mtime = path.stat().st_mtime if path.exists() else 0.0
        return ModelEntry(key, str(path), kind, mtime, usable=False, reason=str(e))
    if kind == "run last":  # best_bleu is the best so far, not necessarily this one's
        bleu = _bleu_at(run_dir, info["step"])
    else:
        best = info["best_bleu"]
        bleu = float(best) if best is not None and best >= 0 else None
    run = str(run_dir) if run_dir else _run_with_snapshots(info["run"], runs)
    return ModelEntry(
        key,
        str(path),
        kind,
        st.st_mtime,
        data=describe_data(info["data_config"]),
        d_model=info["d_model"],
        layers=info["layers"],
        heads=info["heads"],
        params=info["params"],
        step=info["step"],
        val_bleu=bleu,
        run_dir=run,
    )


def list_models(checkpoints: Path | None = None, runs: Path | None = None) -> list[ModelEntry]:
    """Every checkpoint under ``checkpoints`` and every run's best/last, newest first."""
    checkpoints = Path(checkpoints) if checkpoints else checkpoints_dir()
    runs = Path(runs) if runs else runs_dir()
    entries = []
    if checkpoints.is_dir():
        for path in sorted(checkpoints.rglob("*.pt")):
            key = "checkpoints/" + path.relative_to(checkpoints).as_posix()
            entries.append(read_entry(path, key, "shipped checkpoint", None, runs))
    if runs.is_dir():
        for run in sorted(p for p in runs.iterdir() if p.is_dir()):
            found = [
                (n, k)
                for n, k in (("best.pt", "run best"), ("last.pt", "run last"))
                if (run / n).is_file()
            ]
            for name, kind in found:
                entries.append(read_entry(run / name, f"runs/{run.name}/{name}", kind, run, runs))
            if not found and (run / "config.json").is_file():
                entries.append(
                    ModelEntry(
                        f"runs/{run.name}/",
                        str(run),
                        "run",
                        run.stat().st_mtime,
                        usable=False,
                        reason="no checkpoint saved yet (training may still be starting)",
                    )
                )
    return sorted(entries, key=lambda e: e.mtime, reverse=True)


def default_entry(entries: Sequence[ModelEntry]) -> ModelEntry | None:
    """The shipped model if it is usable, else the newest usable model, else None."""
    usable = [e for e in entries if e.usable]
    shipped = [
        e for e in usable if e.kind == "shipped checkpoint" and Path(e.path).name == SHIPPED_NAME
    ]
    return (shipped or usable or [None])[0]


def find_entry(entries: Sequence[ModelEntry], key: str | None) -> ModelEntry | None:
    """The usable entry with this key, or None."""
    return next((e for e in entries if e.key == key and e.usable), None)


# ----------------------------------------------------------------------------- translating


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode: greedy (beam_size 1) or beam search."""

    beam_size: int = 1  # 1 = greedy
    alpha: float = 0.6  # GNMT length penalty exponent of beam search
    max_len: int = 50  # longest output, in tokens
    topk: int = 5  # candidate words shown per output step


def trained_max_len(meta: Mapping) -> int | None:
    """The longest sentence (tokens) the model saw in training, if recorded."""
    value = (meta.get("data_config") or {}).get("max_len")
    return int(value) if value else None


def translate_sentence(
    lm: LoadedModel, sentence: str, settings: DecodeSettings = DecodeSettings()
) -> Translation:
    """Translate with all maps; refuse over-long input, warn about unknown or long input."""
    tokens = tokenize(sentence or "")
    if len(tokens) > MAX_SENTENCE_TOKENS:
        raise TranslationError(
            f"The sentence has {len(tokens)} tokens; this page translates at most "
            f"{MAX_SENTENCE_TOKENS}. Split it into shorter sentences."
        )
    t = translate(
        lm.model,
        lm.src_vocab,
        lm.tgt_vocab,
        sentence or "",
        settings.beam_size,
        settings.alpha,
        settings.max_len,
        settings.topk,
    )
    unknown = [tok for tok, unk in zip(t.src_tokens, t.src_unknown) if unk]
    if unknown:
        t.warnings.append(
            "Not in the model's vocabulary (read as <unk>): "
            + ", ".join(dict.fromkeys(unknown))
            + "."
        )
    limit = trained_max_len(lm.meta)
    if limit and len(tokens) > limit:
        t.warnings.append(
            f"The model was trained on sentences of at most {limit} tokens; "
            f"this one has {len(tokens)}, so expect a poorer translation."
        )
    return t


def topk_frame(t: Translation) -> pd.DataFrame:
    """One row per output step: the chosen token and the k best candidates with probabilities."""
    rows = []
    for step, (tok, cands) in enumerate(zip(t.output_tokens, t.topk)):
        row = {"step": step, "output token": tok}
        for rank, (word, p) in enumerate(cands, start=1):
            row[f"#{rank}"] = f"{word} ({p:.2f})"
        rows.append(row)
    return pd.DataFrame(rows)


def d2l_bleu(pred: Sequence[str], label: Sequence[str], k: int = 2) -> float:
    """The d2l.ai chapter's sentence BLEU (brevity penalty, n-gram precisions up to k)."""
    len_pred, len_label = len(pred), len(label)
    if len_pred == 0 or len_label == 0:
        return 0.0
    score = math.exp(min(0.0, 1 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_grams = Counter(tuple(label[i : i + n]) for i in range(len_label - n + 1))
        matches = 0
        for i in range(len_pred - n + 1):
            gram = tuple(pred[i : i + n])
            if label_grams[gram] > 0:
                matches += 1
                label_grams[gram] -= 1
        score *= math.pow(matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


@dataclass
class D2LCheck:
    """The d2l chapter's four test sentences, translated and scored."""

    rows: list[dict]  # source, translation, reference, bleu (d2l, k=2), note
    bleu: float  # corpus BLEU (sacreBLEU, 0-100) of the four


def d2l_check(lm: LoadedModel, settings: DecodeSettings = DecodeSettings()) -> D2LCheck:
    """Translate the chapter's sentences and score them against the book's references."""
    rows, hyps = [], []
    for source, reference in D2L_CHECK:
        note = ""
        try:
            words = translate_sentence(lm, source, settings).tokens
        except TranslationError as e:
            words, note = [], str(e)
        ref = tokenize(reference)
        hyps.append(words)
        rows.append(
            {
                "source": source,
                "translation": " ".join(words),
                "reference": reference,
                "bleu": d2l_bleu(words, ref),
                "note": note,
            }
        )
    refs = [[tokenize(r)] for _, r in D2L_CHECK]
    return D2LCheck(rows, corpus_bleu(hyps, refs))


# ----------------------------------------------------------------------------- validation


@dataclass
class ValidationExample:
    """A validation sentence with all of its reference translations."""

    source: str
    references: list[str]


def _corpus_available(source: str) -> str:
    """'' if the corpus can be read without a download, else the reason it cannot."""
    if source != "fra-eng":
        return "" if Path(source).expanduser().is_file() else f"the file {source} is missing"
    env = os.environ.get(FRA_ENG_ENV)
    if (env and Path(env).is_file()) or (default_cache_dir() / "fra-eng.zip").is_file():
        return ""
    return (
        f"the fra-eng corpus is not on this machine (set {FRA_ENG_ENV} to a copy of "
        "fra-eng.zip, or train once to download it)"
    )


def validation_examples(meta: Mapping, n: int = 200) -> tuple[list[ValidationExample], str]:
    """Up to ``n`` validation sentences spread over the split, or ([], the reason)."""
    saved = meta.get("data_config") or {}
    known = {f.name for f in fields(DataConfig)}
    if not saved:
        return [], "this checkpoint does not record its data settings"
    cfg = DataConfig(**{k: v for k, v in saved.items() if k in known})
    if reason := _corpus_available(cfg.source):
        return [], reason
    try:
        groups = load_corpus(cfg).val.groups()
    except (DataError, OSError, ValueError) as e:
        return [], f"the validation data could not be rebuilt: {e}"
    if not groups:
        return [], "this model was trained without a validation split"
    picks = sorted(set(np.linspace(0, len(groups) - 1, min(n, len(groups))).round().astype(int)))
    return [
        ValidationExample(" ".join(groups[i][0]), [" ".join(r) for r in groups[i][1]])
        for i in picks
    ], ""


# ----------------------------------------------------------------------------- maps


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
        av.kind_labels(kind)  # raises for an unknown kind
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


def _hide(weights: np.ndarray, keys: list[str], hide: bool):
    """Weights and key tokens with <bos>/<eos> columns hidden (rows renormalised) if asked."""
    if not hide:
        return weights, keys, ""
    shown, kept = av.hide_special(weights, keys)
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
    title = av.kind_labels(kind)[0]
    if head in ("mean", "max"):
        chosen = av.aggregate(w[layer : layer + 1], head)[0, 0]  # (Tq, Tk)
        what = f"{head} over {w.shape[1]} heads"
    elif head == "rollout":
        if kind != "encoder":
            raise ValueError("Attention rollout is defined for the encoder only.")
        chosen = av.rollout(w)[layer]  # (S, S)
        what = f"rollout through layers 0–{layer}"
    elif head.isdigit() and int(head) < w.shape[1]:
        chosen = w[layer, int(head)]  # (Tq, Tk)
        what = f"head {head}"
    else:
        raise IndexError(f"Head {head!r} does not exist (0..{w.shape[1] - 1}, mean, max).")
    shown, keys, note = _hide(np.asarray(chosen, dtype=np.float32), keys, hide)
    return View(kind, shown, list(queries), keys, f"{title} — layer {layer}, {what}", note)


def view_figure(view: View, stretch: bool = False) -> go.Figure:
    """The large heatmap of a view (colour scale 0..1, or stretched to the 99th percentile)."""
    zmax = av.percentile_cap(view.weights) if stretch else 1.0
    note = "; ".join(x for x in (view.note, "colour scale stretched" if stretch else "") if x)
    return av.heatmap_figure(
        view.weights,
        view.query_tokens,
        view.key_tokens,
        view.kind,
        title=view.title,
        zmax=zmax,
        note=note or None,
    )


def grid_view_figure(
    maps: SentenceMaps,
    kind: str,
    hide: bool = False,
    layers: Sequence[int] | None = None,
    stretch: bool = False,
) -> go.Figure:
    """Small multiples of the chosen layers (default all) × every head, one colour scale."""
    w = maps.weights(kind)  # (L, H, Tq, Tk)
    layers = list(range(w.shape[0])) if layers is None else list(layers)
    queries, keys = maps.tokens(kind)
    shown, keys, note = _hide(w[layers], keys, hide)  # (L', H, Tq, Tk')
    zmax = av.percentile_cap(shown) if stretch else 1.0
    fig = av.grid_figure(shown, queries, keys, kind, [f"layer {i}" for i in layers], zmax=zmax)
    if hide or stretch:
        extra = "; ".join(x for x in (note, "colour scale stretched" if stretch else "") if x)
        subtitle = f"{av.reading_hint(kind)}<br>{extra}"
        fig.update_layout(title={"subtitle": {"text": subtitle}})
    if len(layers) == 1:
        fig.update_layout(height=max(300, int(fig.layout.height)))
    return fig


def view_csv(view: View) -> bytes:
    """The weights of a view as CSV (one row per query/key pair)."""
    return (
        av.weights_frame(view.weights, view.query_tokens, view.key_tokens)
        .to_csv(index=False)
        .encode("utf-8")
    )


def head_table(maps: SentenceMaps, kind: str) -> pd.DataFrame:
    """Head statistics of one kind (entropy, diagonal, previous, <eos>, monotonicity, label)."""
    queries, keys = maps.tokens(kind)
    table = av.head_stats(maps.weights(kind), kind, queries, keys)
    if kind != "cross":
        table = table.drop(columns=["monotonicity"])
    if kind != "decoder_self":
        table = table.drop(columns=["bos"])
    return table


# ----------------------------------------------------------------------------- playback


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


def playback_step(maps: SentenceMaps, topk: Sequence, step: int, layer: int) -> PlaybackStep:
    """One step of the free-running decoder: its attention rows and next-token candidates."""
    self_rows, cross_rows = av.playback_rows(maps.decoder_self, maps.cross, step)
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


def head_rows_figure(
    rows: np.ndarray, key_tokens: Sequence[str], title: str, key_words: str
) -> go.Figure:
    """Heads as rows (H, K): how each head of one layer spreads one query's attention."""
    heads = [f"head {h}" for h in range(rows.shape[0])]
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(rows, dtype=np.float32),
            x=av.unique_labels(key_tokens),
            y=heads,
            zmin=0.0,
            zmax=1.0,
            colorscale=av.COLORSCALE,
            colorbar={"title": {"text": "weight"}},
            hovertemplate="%{y}<br>key %{x}<br>w=%{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": title},
        xaxis={
            "title": {"text": key_words},
            "type": "category",
            "tickmode": "array",
            "tickvals": av.unique_labels(key_tokens),
            "ticktext": list(key_tokens),
            "tickangle": -45,
        },
        yaxis={"title": {"text": "head"}, "autorange": "reversed"},
        height=int(160 + 28 * len(heads)),
        margin={"t": 60},
    )
    return fig


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


# ----------------------------------------------------------------------------- training


@dataclass
class SnapshotFrame:
    """A probe sentence's maps at one training step, with the metrics of that moment."""

    step: int
    maps: SentenceMaps
    loss: float | None = None  # training loss of the last record at or before this step
    val_loss: float | None = None  # validation loss measured at this step
    val_bleu: float | None = None  # validation BLEU measured at this step


@dataclass
class SnapshotSeries:
    """A probe sentence's attention as it formed during training."""

    sentence: str
    frames: list[SnapshotFrame] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # snapshot files that could not be read

    @property
    def steps(self) -> list[int]:
        """Training steps with a frame, in order."""
        return [f.step for f in self.frames]


SNAPSHOT_ERRORS = (
    pickle.UnpicklingError,
    RuntimeError,
    EOFError,
    zipfile.BadZipFile,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
)


def probe_sentences(run_dir) -> list[str]:
    """The probe sentences recorded in a run's latest readable snapshot."""
    rd = RunDir(run_dir)
    for step in reversed(rd.snapshot_steps()):
        try:
            return [p["sentence"] for p in rd.load_snapshot(step)["probes"]]
        except SNAPSHOT_ERRORS:
            continue
    return []


def _metrics_at(records: list[dict], step: int) -> dict:
    """Training loss (last record ≤ step) and validation metrics at ``step``."""
    out = {"loss": None, "val_loss": None, "val_bleu": None}
    for rec in records:
        if rec.get("kind") == "train" and rec.get("step", math.inf) <= step and "loss" in rec:
            out["loss"] = float(rec["loss"])
        if rec.get("kind") == "eval" and rec.get("step") == step:
            for name in ("val_loss", "val_bleu"):
                if rec.get(name) is not None:
                    out[name] = float(rec[name])
    return out


def snapshot_series(run_dir, sentence: str) -> SnapshotSeries:
    """Every snapshot of ``sentence`` in a run, with loss and BLEU at each step."""
    rd = RunDir(run_dir)
    records = rd.read_metrics()
    series = SnapshotSeries(sentence)
    for step in rd.snapshot_steps():
        try:
            probes = rd.load_snapshot(step)["probes"]
            probe = next((p for p in probes if p["sentence"] == sentence), None)
            if probe is None:
                continue
            maps = SentenceMaps.from_probe(probe)
        except SNAPSHOT_ERRORS as e:
            series.skipped.append(f"step {step}: {type(e).__name__}")
            continue
        series.frames.append(SnapshotFrame(step, maps, **_metrics_at(records, step)))
    return series


def training_curve_figure(run_dir, step: int | None = None) -> go.Figure:
    """Training loss and validation BLEU over steps, with a marker line at ``step``."""
    records = RunDir(run_dir).read_metrics()
    train = [(r["step"], r["loss"]) for r in records if r.get("kind") == "train" and "loss" in r]
    evals = [
        (r["step"], r["val_bleu"])
        for r in records
        if r.get("kind") == "eval" and r.get("val_bleu") is not None
    ]
    fig = go.Figure()
    if train:
        fig.add_scatter(x=[s for s, _ in train], y=[v for _, v in train], name="training loss")
    if evals:
        fig.add_scatter(
            x=[s for s, _ in evals],
            y=[v for _, v in evals],
            name="val BLEU",
            yaxis="y2",
            mode="lines+markers",
        )
    if step is not None:
        fig.add_vline(x=step, line_dash="dash", line_color="gray")
    fig.update_layout(
        title={"text": "Training so far"},
        height=300,
        margin={"t": 50},
        xaxis={"title": {"text": "step"}},
        yaxis={"title": {"text": "loss"}},
        yaxis2={"title": {"text": "BLEU"}, "overlaying": "y", "side": "right"},
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


# ----------------------------------------------------------------------------- URL state


@dataclass
class ViewState:
    """What the pages show, as it travels in the URL (st.query_params)."""

    model: str = ""  # a ModelEntry key; "" = the default model
    sentence: str = DEFAULT_SENTENCE
    beam: int = 1  # beam size (1 = greedy)
    alpha: float = 0.6  # beam length penalty
    max_len: int = 50  # longest output
    kind: str = "cross"  # attention kind shown
    layer: int = 0
    head: str = "0"  # a head number, "mean", "max" or "rollout"
    hide: bool = False  # hide <bos>/<eos> columns

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> ViewState:
        """Read the URL's values; missing or malformed ones keep their defaults."""
        state = cls()
        for f in fields(cls):
            raw = params.get(f.name)
            if raw is None:
                continue
            try:
                value = _parse(f.type, raw)
            except ValueError:
                continue
            setattr(state, f.name, value)
        state.beam = min(max(state.beam, 1), 16)
        state.max_len = min(max(state.max_len, 1), 500)
        state.layer = max(state.layer, 0)
        if state.kind not in KINDS:
            state.kind = cls.kind
        if not (state.head.isdigit() or state.head in HEAD_AGGREGATES):
            state.head = cls.head
        return state

    def to_query(self, keys: Sequence[str] | None = None) -> dict[str, str]:
        """The URL's values (of ``keys``, default all): the view's core always, others if set."""
        default = ViewState()
        out = {}
        for f in fields(self):
            if keys is not None and f.name not in keys:
                continue
            value = getattr(self, f.name)
            always = f.name in ("sentence", "model", "kind", "layer", "head")
            if always or value != getattr(default, f.name):
                out[f.name] = str(int(value) if isinstance(value, bool) else value)
        return out

    def settings(self) -> DecodeSettings:
        """The decoding settings of this state."""
        return DecodeSettings(self.beam, self.alpha, self.max_len)


def _parse(type_name, raw: str):
    """Parse one URL value for a ViewState field type (raises ValueError)."""
    name = type_name if isinstance(type_name, str) else type_name.__name__
    if name == "int":
        return int(raw)
    if name == "float":
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
        return value
    if name == "bool":
        return raw.lower() in ("1", "true", "yes", "on")
    return str(raw)


def clamp_view(state: ViewState, maps: SentenceMaps) -> ViewState:
    """The state with layer and head moved inside what this model and kind have."""
    layers = maps.layers(state.kind)
    state.layer = min(state.layer, layers - 1)
    if state.head not in head_options(state.kind, maps.heads):
        state.head = "0" if not state.head.isdigit() else str(maps.heads - 1)
    return state
