"""Head importance: what removing each attention head costs on a fixed validation sample.

For each head alone: the change in BLEU (greedy, all references) and in mean per-token loss
(teacher-forced). Beside it the gradient score of Michel, Levy & Neubig (2019), "Are Sixteen
Heads Really Better than One?": I_h = E_x |dL(x)/d xi_h| at gates xi = 1, one backward pass
per batch; and the BLEU of removing heads cumulatively, least important first. Results are
cached on disk per checkpoint content, data settings and sample size.

Shape key: B batch (sentences x head sets), H heads, S source length, T target length, V
vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from core.attention.ablation import (
    HeadSpec,
    ablated,
    all_heads,
    attention_modules,
    gate_table,
    gated,
)
from core.attention.head_stats import spearman
from core.attention.hf_importance import HFMeasures, hf_sample, resolved_precision
from core.attention.kinds import KINDS
from core.corpus.batches import batches, encode_pairs, pad_batch
from core.corpus.config import DataConfig
from core.corpus.source import DataError, file_sha1, fra_eng_copy
from core.corpus.splits import Split, load_splits
from core.corpus.vocab import Vocab
from core.model.checkpoints import LoadedModel, validation_source
from core.model.decode import MAX_LEN, greedy_decode
from core.model.hf_folder import folder_sha1
from core.model.record import forced_logits
from core.model.scores import corpus_bleu, evaluate_loss
from core.model.transformer import evaluating
from core.places import ablation_root
from core.runs.disk_cache import read_cached, write_cached

SENTENCES = 200  # validation sentences of the importance sample (the first N of the split)
ROWS_PER_PASS = 256  # sentences decoded together in one batched greedy pass
GRADIENT_BATCH = 64  # teacher-forced pairs per backward pass of the gradient score
MAX_CURVE_POINTS = 24  # the pruning curve has at most this many points besides 0 removed (Michel
# et al. 2019 draw 10 % steps; 24 points of 144 heads are 6 heads apart)
CACHE_VERSION = 1  # bump when the numbers a cached result holds change meaning

ProgressFn = Callable[[float, str], None]  # (fraction done 0..1, what is being done)


# ----------------------------------------------------------------------------- the sample


@dataclass
class Sample:
    """A fixed validation sample: sources with all their references, and the encoded pairs."""

    sources: list[list[str]]  # N tokenized source sentences
    references: list[list[list[str]]]  # all reference translations of each
    src_ids: list[np.ndarray]  # N source ids + <eos>
    encoded: list[tuple[np.ndarray, np.ndarray]]  # every (source, reference) pair, encoded


def sample_from_split(split: Split, src_vocab: Vocab, tgt_vocab: Vocab, n: int) -> Sample:
    """The first ``n`` source sentences of a split (as core.evaluate takes them)."""
    groups = split.groups()[:n]
    pairs = Split([(src, ref) for src, refs in groups for ref in refs])
    encoded = encode_pairs(pairs, src_vocab, tgt_vocab)
    ids = [np.array(src_vocab.encode(src) + [Vocab.eos_id], dtype=np.int64) for src, _ in groups]
    return Sample([g[0] for g in groups], [g[1] for g in groups], ids, encoded)


def validation_sample(
    lm, cfg: DataConfig, n: int, target_lang: str | None = None, split: Split | None = None
):
    """The first ``n`` validation sentences of the split these settings rebuild (or of
    ``split``, the pairs a saved model carries), encoded by a Hugging Face model's own
    tokenizer for such a model."""
    split = split if split is not None else load_splits(cfg).val
    if not split.pairs:
        raise DataError(
            "This model was trained without a validation split: there are no validation "
            "sentences to measure on."
        )
    if getattr(lm, "family", "studio") != "studio":
        return hf_sample(lm, split, n, target_lang)
    return sample_from_split(split, lm.src_vocab, lm.tgt_vocab, n)


def model_sha1(checkpoint) -> str:
    """The SHA-1 of a checkpoint file, or of a Hugging Face model folder's files."""
    return folder_sha1(checkpoint) if Path(checkpoint).is_dir() else file_sha1(checkpoint)


# ----------------------------------------------------------------------------- measuring


def _words(ids: list[int], vocab: Vocab) -> list[str]:
    """Output ids up to the first <eos>, as words."""
    return vocab.words(vocab.decode(ids[: ids.index(Vocab.eos_id)] if Vocab.eos_id in ids else ids))


def bleu_without(
    lm: LoadedModel,
    sample: Sample,
    head_sets: Sequence[Sequence[HeadSpec]],
    tick: Callable[[int], None] | None = None,
) -> list[float]:
    """Corpus BLEU of greedy translations of the sample with each set of heads removed.

    The sample is repeated once per set and decoded in batched passes; each row carries the
    (B, H) gates of its own set. ``tick(rows)`` is called after each pass.
    """
    model, n = lm.model, len(sample.sources)
    order = sorted(range(n), key=lambda i: len(sample.src_ids[i]))  # less padding per pass
    rows = [(j, i) for j in range(len(head_sets)) for i in order]
    table = gate_table(model, head_sets)  # module -> (sets, H)
    device = next(model.parameters()).device
    max_len = min(MAX_LEN, model.cfg.max_positions - 1)
    words: list[list] = [[None] * n for _ in head_sets]
    for start in range(0, len(rows), ROWS_PER_PASS):
        chunk = rows[start : start + ROWS_PER_PASS]
        sets = torch.tensor([j for j, _ in chunk], device=device)  # (B,)
        src = pad_batch([sample.src_ids[i] for _, i in chunk]).to(device)  # (B, S)
        with gated({m: t[sets] for m, t in table.items()}):  # (B, H) each
            out, _, _ = greedy_decode(model, src, max_len, scores=False)  # (B, T)
        for (j, i), ids in zip(chunk, out.tolist()):
            words[j][i] = _words(ids, lm.tgt_vocab)
        if tick:
            tick(len(chunk))
    return [corpus_bleu(hyps, sample.references) for hyps in words]


def loss_without(lm: LoadedModel, sample: Sample, heads: Sequence[HeadSpec]) -> float:
    """Mean per-token validation loss (teacher-forced) with ``heads`` removed."""
    with ablated(lm.model, heads):
        return evaluate_loss(lm.model, sample.encoded)


def sentence_losses(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of each sentence: logits (B, T, V), tgt_out (B, T) -> (B,)."""
    tokens = F.cross_entropy(
        logits.float().transpose(1, 2), tgt_out, ignore_index=Vocab.pad_id, reduction="none"
    )  # (B, T)
    counts = (tgt_out != Vocab.pad_id).sum(1).clamp(min=1)  # (B,)
    return tokens.sum(1) / counts


def gradient_scores(lm: LoadedModel, sample: Sample, batch_size: int = GRADIENT_BATCH) -> dict:
    """{HeadSpec: I_h}: I_h = mean over pairs x of |dL(x)/d xi_h| at gates xi = 1.

    Michel, Levy & Neubig (2019). Each pair has its own (B, H) gates, so one backward pass
    per batch gives every pair's gradient; L(x) is the pair's mean token loss.
    """
    model, H = lm.model, lm.model.cfg.num_heads
    modules = {(k, i): m for k in KINDS for i, m in enumerate(attention_modules(model, k))}
    sums = {key: torch.zeros(H) for key in modules}
    device = next(model.parameters()).device
    with torch.enable_grad():
        for src, tgt in batches(sample.encoded, batch_size, shuffle=False):
            src, tgt = src.to(device), tgt.to(device)  # (B, S), (B, T + 1)
            ones = [torch.ones(src.size(0), H, device=device, requires_grad=True) for _ in sums]
            with gated(dict(zip(modules.values(), ones))):
                logits = forced_logits(model, src, tgt[:, :-1])  # (B, T, V)
            losses = sentence_losses(logits, tgt[:, 1:])  # (B,)
            grads = torch.autograd.grad(losses.sum(), ones)  # each (B, H)
            for key, g in zip(modules, grads):
                sums[key] += g.abs().sum(0).cpu()
    count = max(len(sample.encoded), 1)
    return {HeadSpec(k, i, h): float(sums[(k, i)][h]) / count for k, i in sums for h in range(H)}


# ----------------------------------------------------------------------------- importance


@dataclass
class HeadImportance:
    """What removing each head alone costs on a validation sample, and the pruning curve."""

    bleu: float  # baseline BLEU, no head removed
    loss: float  # baseline mean per-token loss
    sentences: int  # source sentences in the sample
    pairs: int  # (source, reference) pairs the loss is measured on
    heads: list[dict]  # kind, layer, head, bleu, delta_bleu, loss, delta_loss, gradient
    pruning: list[dict]  # removed, fraction, bleu, head (the last removed, in words)
    seconds: float = 0.0  # time it took to compute
    cached: bool = False  # read from the disk cache
    precision: str = "float32"  # of the passes that removed heads (the gradients: float32)

    def frame(self) -> pd.DataFrame:
        """One row per head: kind, layer, head, label, BLEU/loss and their changes, gradient."""
        table = pd.DataFrame(self.heads)
        labels = [HeadSpec(r.kind, r.layer, r.head).label for r in table.itertuples()]
        table.insert(3, "label", labels)
        return table

    def agreement(self) -> dict[str, float | None]:
        """Spearman rank correlation of the gradient score with the loss rise and BLEU drop."""
        table = pd.DataFrame(self.heads)
        rhos = {
            "loss": spearman(table["gradient"].to_numpy(), table["delta_loss"].to_numpy()),
            "bleu": spearman(table["gradient"].to_numpy(), -table["delta_bleu"].to_numpy()),
        }
        return {what: None if np.isnan(rho) else rho for what, rho in rhos.items()}

    def order(self) -> list[HeadSpec]:
        """Heads from least to most important (smallest BLEU drop, then smallest loss rise)."""
        rows = sorted(self.heads, key=lambda r: (-r["delta_bleu"], r["delta_loss"]))
        return [HeadSpec(r["kind"], r["layer"], r["head"]) for r in rows]


class Progress:
    """Reports a fraction of weighted work done, with what is being done, to a callback."""

    def __init__(self, report: ProgressFn | None, total: float):
        self.report, self.total, self.done = report, max(total, 1e-9), 0.0

    def advance(self, amount: float, what: str) -> None:
        """Count ``amount`` more work as done and report."""
        self.done += amount
        if self.report:
            self.report(min(self.done / self.total, 1.0), what)


def curve_points(n_heads: int) -> list[int]:
    """How many heads are removed at each point of the pruning curve (1..n_heads)."""
    if n_heads <= MAX_CURVE_POINTS:
        return list(range(1, n_heads + 1))
    return sorted({int(round(x)) for x in np.linspace(1, n_heads, MAX_CURVE_POINTS)})


def head_row(h: HeadSpec, bleu: tuple, loss: tuple, gradient: float) -> dict:
    """One head's row: BLEU and loss without it ((baseline, without) pairs) and its score."""
    return {
        "kind": h.kind,
        "layer": h.layer,
        "head": h.head,
        "bleu": bleu[1],
        "delta_bleu": bleu[1] - bleu[0],
        "loss": loss[1],
        "delta_loss": loss[1] - loss[0],
        "gradient": gradient,
    }


class StudioMeasures:
    """BLEU, loss and gradient scores of the studio's own model on a sample, heads removed
    (``core.attention.hf_importance.HFMeasures`` measures a Hugging Face model alike)."""

    precision = "float32"  # a model this small is measured exactly, and fast
    loss_row = 0.1  # one teacher-forced pair's time, in greedily decoded sentences

    def __init__(self, lm: LoadedModel, sample: Sample):
        self.lm, self.sample = lm, sample

    def all_heads(self) -> list[HeadSpec]:
        return all_heads(self.lm.model.cfg)

    def bleu(self, sets: Sequence[Sequence[HeadSpec]], tick=None) -> list[float]:
        return bleu_without(self.lm, self.sample, sets, tick)

    def losses(self, sets: Sequence[Sequence[HeadSpec]], tick=None) -> list[float]:
        out = []
        for heads in sets:
            out.append(loss_without(self.lm, self.sample, heads))
            if tick:
                tick(len(self.sample.encoded))
        return out

    def gradients(self) -> dict:
        return gradient_scores(self.lm, self.sample)


def measures_of(lm, sample, target_lang: str | None = None, precision: str = "float32"):
    """The measures that read this model's family (``precision``: a Hugging Face model's,
    see ``core.attention.hf_importance.resolved_precision``)."""
    if getattr(lm, "family", "studio") == "studio":
        return StudioMeasures(lm, sample)
    return HFMeasures(lm, sample, target_lang, precision)


def precision_of(lm, precision: str = "auto") -> str:
    """The precision head importance runs in for this model: float32 for the studio's own,
    ``precision`` resolved on the model's device for a Hugging Face one."""
    if getattr(lm, "family", "studio") == "studio":
        return "float32"
    return resolved_precision(precision, next(lm.model.parameters()).device)


def head_importance(
    lm,
    sample,
    progress: ProgressFn | None = None,
    target_lang: str | None = None,
    precision: str = "float32",
) -> HeadImportance:
    """BLEU and loss with each head removed alone, gradient scores and the pruning curve."""
    start, measures = time.perf_counter(), measures_of(lm, sample, target_lang, precision)
    heads, row = measures.all_heads(), measures.loss_row
    n, pairs, points = len(sample.sources), len(sample.encoded), curve_points(len(heads))
    work = Progress(progress, n * (1 + len(heads) + len(points)) + row * pairs * (len(heads) + 3))
    with evaluating(lm.model):
        sets = [[]] + [[h] for h in heads]
        bleus = measures.bleu(sets, lambda r: work.advance(r, "BLEU per head"))
        losses = measures.losses(sets, lambda r: work.advance(row * r, "loss per head"))
        grads = measures.gradients()
        work.advance(2 * row * pairs, "gradient scores")
        rows = [
            head_row(h, (bleus[0], b), (losses[0], lo), grads[h])
            for h, b, lo in zip(heads, bleus[1:], losses[1:])
        ]
        result = HeadImportance(bleus[0], losses[0], n, pairs, rows, [])
        result.precision = measures.precision
        order = result.order()
        curve = measures.bleu(
            [order[:k] for k in points], lambda r: work.advance(r, "pruning curve")
        )
    result.pruning = [{"removed": 0, "fraction": 0.0, "bleu": bleus[0], "head": ""}] + [
        {"removed": k, "fraction": k / len(heads), "bleu": b, "head": order[k - 1].label}
        for k, b in zip(points, curve)
    ]
    result.seconds = time.perf_counter() - start
    return result


# ----------------------------------------------------------------------------- disk cache


def sample_key(checkpoint, cfg: DataConfig, sentences: int, **facts) -> str:
    """Cache key of a result on a validation sample: checkpoint content, data settings,
    corpus file, sample size and the result's own ``facts`` (its version, its options)."""
    corpus = fra_eng_copy() if cfg.source == "fra-eng" else Path(cfg.source)
    facts = {
        "checkpoint": model_sha1(checkpoint),
        "data": asdict(cfg) | {"source": "fra-eng" if cfg.source == "fra-eng" else ""},
        "corpus": file_sha1(corpus) if corpus else "",
        "sentences": int(sentences),
        "max_len": MAX_LEN,
        **facts,
    }
    return hashlib.sha1(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def importance_key(
    checkpoint, cfg: DataConfig, sentences: int, target_lang=None, precision="float32"
) -> str:
    """Cache key of head importance: checkpoint, data settings, corpus and sample size (and
    a multilingual model's target language, and a precision other than float32)."""
    facts = {"target_lang": target_lang} if target_lang else {}
    facts |= {"precision": precision} if precision != "float32" else {}
    return sample_key(checkpoint, cfg, sentences, version=CACHE_VERSION, **facts)


def cached_importance(key: str) -> HeadImportance | None:
    """A result stored under ``key``, or None (missing or unreadable)."""
    data = read_cached(ablation_root(), key)
    try:
        result = HeadImportance(**{**data, "cached": True})
        result.frame(), result.agreement(), result.order()  # readable as a whole
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return result


def store_importance(key: str, result: HeadImportance) -> None:
    """Write a result under ``key``; a failure is ignored (the cache only saves time)."""
    write_cached(ablation_root(), key, asdict(result) | {"cached": False})


def importance_for(
    lm,
    checkpoint,
    sentences: int = SENTENCES,
    source: str | None = None,
    progress: ProgressFn | None = None,
    refresh: bool = False,
    target_lang: str | None = None,
    precision: str = "auto",
) -> HeadImportance:
    """Head importance of a checkpoint's model on its validation sample, cached on disk.

    A Hugging Face model was not trained here: its sample is the validation split of the
    studio's default data settings (fra-eng), or of ``source``; ``target_lang`` is a
    multilingual model's output language; ``precision`` that of its passes (``auto``:
    bfloat16 where the CPU runs it natively). ``lm`` must not be shared with other threads
    while this runs (see private_copy).
    """
    cfg, carried = validation_source(lm.meta, source)
    precision = precision_of(lm, precision)
    key = importance_key(checkpoint, cfg, sentences, target_lang, precision)
    if not refresh and (hit := cached_importance(key)) is not None:
        return hit
    if progress:
        progress(0.0, "rebuilding the validation split")
    sample = validation_sample(lm, cfg, sentences, target_lang, carried)
    result = head_importance(lm, sample, progress, target_lang, precision)
    store_importance(key, result)
    return result


def lookup_importance(
    checkpoint, meta: Mapping, sentences: int = SENTENCES, target_lang=None, precision="float32"
):
    """A cached result for this checkpoint, sample size (and a Hugging Face model's resolved
    precision), or None (never computes)."""
    try:
        cfg = validation_source(meta)[0]
        key = importance_key(checkpoint, cfg, sentences, target_lang, precision)
    except DataError:
        return None
    return cached_importance(key)
