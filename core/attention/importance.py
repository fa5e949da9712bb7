"""Head importance: what removing each attention head costs on a fixed validation sample.

For each head alone: the change in BLEU (greedy, all references) and in mean per-token loss
(teacher-forced). Beside it the gradient score of Michel, Levy & Neubig (2019), "Are Sixteen
Heads Really Better than One?": I_h = E_x |dL(x)/d xi_h| at gates xi = 1, one backward pass
per batch; and the BLEU of removing heads cumulatively, least important first. Each head
set's loss runs again from the first layer it removes a head in (``core.model.resumed``). A
model whose capability row says so (``importance_bleu``: a language model, whose BLEU would
need every head's prompted translations, 4x the work, where the issue asks for every head of a
124 M model on 50 texts in minutes; a masked language model, which translates nothing) is
measured by the loss alone, on the pairs its loss reads (``loss_pairs``: each sentence's first
reference after its prompt, or the sentence with tokens masked). Results are cached on disk
per checkpoint content, data settings and sample size.

Shape key: B batch (sentences x head sets), H heads, S source length, T target length, V
vocabulary.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from core.attention.ablation import HeadSpec
from core.attention.head_measures import Measures, resolved_precision
from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.measure.progress import Progress, ProgressFn
from core.measure.rank import spearman
from core.measure.sample import Sample, sample_key, validation_sample
from core.model.checkpoints import validation_source
from core.model.interface import TranslationModel
from core.places import ablation_root
from core.runs.disk_cache import read_cached, write_cached

SENTENCES = 200  # validation sentences of the importance sample (the first N of the split)
SAMPLE_SIZES = (1, 5000)  # the sample sizes the page and core.ablate offer: (least, most)
MAX_CURVE_POINTS = 24  # the pruning curve has at most this many points besides 0 removed (Michel
# et al. 2019 draw 10 % steps; 24 points of 144 heads are 6 heads apart)
LOSS_CURVE_POINTS = 10  # a language model's curve: Michel et al.'s 10 % steps (each point
# runs every layer again: 24 points took 45 s of GPT-2 124 M's 210 on 2 cores)
BY_LOSS = "loss"  # what a model that measures no BLEU here measures (the others: "bleu")
GRADIENT_WORK = 3  # the gradient scores' work, in teacher-forced passes over the sample
CACHE_VERSION = 1  # bump when the numbers a cached result holds change meaning


# ----------------------------------------------------------------------------- importance


@dataclass
class HeadImportance:
    """What removing each head alone costs on a validation sample, and the pruning curve."""

    bleu: float | None  # baseline BLEU, no head removed (None: measured by the loss alone)
    loss: float  # baseline mean per-token loss
    sentences: int  # source sentences in the sample
    pairs: int  # (source, reference) pairs the loss is measured on
    heads: list[dict]  # kind, layer, head, [bleu, delta_bleu,] loss, delta_loss, gradient
    pruning: list[dict]  # removed, fraction, bleu (or loss), head (the last removed, in words)
    seconds: float = 0.0  # time it took to compute
    cached: bool = False  # read from the disk cache
    precision: str = "float32"  # of the passes that removed heads (the gradients: float32)
    measured: str = "bleu"  # "bleu" (BLEU and loss) or BY_LOSS (the loss alone)

    def frame(self) -> pd.DataFrame:
        """One row per head: kind, layer, head, label, BLEU/loss and their changes, gradient."""
        table = pd.DataFrame(self.heads)
        labels = [HeadSpec(r.kind, r.layer, r.head).label for r in table.itertuples()]
        table.insert(3, "label", labels)
        return table

    def agreement(self) -> dict[str, float | None]:
        """Spearman rank correlation of the gradient score with the loss rise and BLEU drop
        (no "bleu" where measured by the loss alone)."""
        table = pd.DataFrame(self.heads)
        score = table["gradient"].to_numpy()
        rhos = {"loss": spearman(score, table["delta_loss"].to_numpy())}
        if self.measured != BY_LOSS:
            rhos["bleu"] = spearman(score, -table["delta_bleu"].to_numpy())
        return {what: None if np.isnan(rho) else rho for what, rho in rhos.items()}

    def json_rows(self) -> list[dict]:
        """``python -m core.ablate``'s lines: a baseline row (with ``pruning``, the curve the
        page draws), then one row per head (a language model's: the loss alone, its baseline
        BLEU None)."""
        agree = self.agreement()
        base = {"baseline": True, "measured": self.measured, "bleu": self.bleu}
        base |= {"loss": self.loss, "sentences": self.sentences, "pairs": self.pairs}
        base |= {"heads": len(self.heads), "spearman_loss": agree["loss"]}
        base |= {"spearman_bleu": agree["bleu"]} if "bleu" in agree else {}
        base |= {"seconds": round(self.seconds, 2), "cached": self.cached}
        base |= {"precision": self.precision, "pruning": self.pruning}
        return [base, *self.heads]

    def order(self) -> list[HeadSpec]:
        """Heads from least to most important (smallest BLEU drop, then smallest loss rise;
        measured by the loss alone: smallest loss rise)."""
        by_loss = self.measured == BY_LOSS
        rows = sorted(
            self.heads, key=lambda r: (0 if by_loss else -r["delta_bleu"], r["delta_loss"])
        )
        return [HeadSpec(r["kind"], r["layer"], r["head"]) for r in rows]


def curve_points(n_heads: int, most: int = MAX_CURVE_POINTS) -> list[int]:
    """How many heads are removed at each point of the pruning curve (1..n_heads)."""
    if n_heads <= most:
        return list(range(1, n_heads + 1))
    return sorted({int(round(x)) for x in np.linspace(1, n_heads, most)})


def head_row(h: HeadSpec, bleu: tuple | None, loss: tuple, gradient: float) -> dict:
    """One head's row: BLEU (unless None) and loss without it ((baseline, without) pairs)
    and its score."""
    row = {"kind": h.kind, "layer": h.layer, "head": h.head}
    if bleu is not None:
        row |= {"bleu": bleu[1], "delta_bleu": bleu[1] - bleu[0]}
    return row | {"loss": loss[1], "delta_loss": loss[1] - loss[0], "gradient": gradient}


def head_importance(
    lm: TranslationModel,
    sample: Sample,
    progress: ProgressFn | None = None,
    target_lang: str | None = None,
    precision: str = "float32",
) -> HeadImportance:
    """BLEU and loss with each head removed alone, gradient scores and the pruning curve; a
    model that measures no BLEU here (``supports("importance_bleu")``) by its loss alone, on
    the pairs its loss reads (``loss_pairs``), its curve in loss."""
    start, measured = time.perf_counter(), measure_of(lm)
    if measured == BY_LOSS:
        sample = replace(sample, encoded=loss_pairs(lm, sample))
    measures = Measures(lm, sample, target_lang, precision)
    heads, row = measures.all_heads(), measures.loss_row
    n, pairs = len(sample.sources), len(sample.encoded)
    points = curve_points(
        len(heads), LOSS_CURVE_POINTS if measured == BY_LOSS else MAX_CURVE_POINTS
    )
    per_head = 1 + sum(measures.share([h]) for h in heads)  # whole passes, the baseline's too
    decoded = 0 if measured == BY_LOSS else n * (1 + len(heads) + len(points))
    forced = len(points) if measured == BY_LOSS else 0  # the curve's passes, in loss
    work = Progress(progress, decoded + row * pairs * (per_head + GRADIENT_WORK + forced))
    with lm.evaluating():
        sets = [[]] + [[h] for h in heads]
        bleus = None
        if measured != BY_LOSS:
            bleus = measures.bleu(sets, lambda r: work.advance(r, "BLEU per head"))
        losses = measures.losses(sets, lambda r: work.advance(row * r, "loss per head"))
        grads = measures.gradients()
        work.advance(GRADIENT_WORK * row * pairs, "gradient scores")
        rows = [
            head_row(h, None if bleus is None else (bleus[0], bleus[i]), (losses[0], lo), grads[h])
            for i, (h, lo) in enumerate(zip(heads, losses[1:]), 1)
        ]
        baseline = None if bleus is None else bleus[0]
        result = HeadImportance(baseline, losses[0], n, pairs, rows, [], measured=measured)
        result.precision = measures.precision
        order = result.order()
        curve = pruning_values(measures, [order[:k] for k in points], work, row)
    first = losses[0] if baseline is None else baseline
    result.pruning = pruning_points(order, points, curve, measured, first)
    result.seconds = time.perf_counter() - start
    return result


def measure_of(lm: TranslationModel) -> str:
    """What a model's head importance measures: "bleu" (BLEU and loss), or BY_LOSS where its
    capability row says BLEU is not measured (``importance_bleu``)."""
    return "bleu" if lm.supports("importance_bleu") is None else BY_LOSS


def pruning_values(measures: Measures, sets, work: Progress, row: float) -> list[float]:
    """The pruning curve's values: BLEU of each set removed, or its loss (measured by the loss
    alone; each set run again from its first layer, counted as whole passes)."""
    if measure_of(measures.m) != BY_LOSS:
        return measures.bleu(sets, lambda r: work.advance(r, "pruning curve"))
    scale = len(sets) / max(sum(measures.share(heads) for heads in sets), 1e-9)
    return measures.losses(sets, lambda r: work.advance(row * r * scale, "pruning curve"))


def loss_pairs(lm, sample: Sample) -> list[tuple[list[int], list[int]]]:
    """The pairs a one-sequence model's loss reads (``OneSequence.loss_pairs``): each
    sentence's first reference after its prompt, or the sentence with tokens masked."""
    firsts = np.cumsum([0] + [len(r) for r in sample.references[:-1]])  # each first pair
    return lm.loss_pairs(sample.src_ids, [sample.encoded[i] for i in firsts])


def pruning_points(order: list[HeadSpec], points, values, what: str, baseline) -> list[dict]:
    """The pruning curve: none removed, then each point's ``what`` (bleu or loss)."""
    first = {"removed": 0, "fraction": 0.0, what: baseline, "head": ""}
    return [first] + [
        {"removed": k, "fraction": k / len(order), what: v, "head": order[k - 1].label}
        for k, v in zip(points, values)
    ]


# ----------------------------------------------------------------------------- disk cache


def importance_key(
    checkpoint, cfg: DataConfig, sentences: int, target_lang=None, precision="float32", model=None
) -> str:
    """Cache key of head importance: checkpoint, data settings, corpus and sample size (and
    a multilingual model's target language, a precision other than float32, and the
    ``model_facts`` of a language model)."""
    facts = {"target_lang": target_lang} if target_lang else {}
    facts |= {"precision": precision} if precision != "float32" else {}
    facts |= model or {}
    return sample_key(checkpoint, cfg, sentences, version=CACHE_VERSION, **facts)


def model_facts(lm) -> dict:
    """What else a model's result depends on: its measure where not BLEU, and what beside its
    file sets what it computes (a prompt's template: ``view_key``)."""
    facts = {"measured": BY_LOSS} if measure_of(lm) == BY_LOSS else {}
    return facts | ({"view": lm.view_key} if lm.view_key else {})


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
    bfloat16 where the CPU runs it natively). Heads are removed in this thread only: ``lm``
    may be shared with other sessions meanwhile.
    """
    cfg, carried = validation_source(lm.meta, source)
    precision = resolved_precision(precision, lm)
    key = importance_key(checkpoint, cfg, sentences, target_lang, precision, model_facts(lm))
    if not refresh and (hit := cached_importance(key)) is not None:
        return hit
    if progress:
        progress(0.0, "rebuilding the validation split")
    sample = validation_sample(lm, cfg, sentences, target_lang, carried)
    result = head_importance(lm, sample, progress, target_lang, precision)
    store_importance(key, result)
    return result


def lookup_importance(
    checkpoint,
    meta: Mapping,
    sentences: int = SENTENCES,
    target_lang=None,
    precision="float32",
    model: Mapping | None = None,
):
    """A cached result for this checkpoint, sample size (and a Hugging Face model's resolved
    precision, and ``model_facts``), or None (never computes)."""
    try:
        cfg = validation_source(meta)[0]
        key = importance_key(checkpoint, cfg, sentences, target_lang, precision, model)
    except DataError:
        return None
    return cached_importance(key)
