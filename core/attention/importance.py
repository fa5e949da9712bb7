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

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

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
from core.model.transformer import evaluating
from core.places import ablation_root
from core.runs.disk_cache import read_cached, write_cached

SENTENCES = 200  # validation sentences of the importance sample (the first N of the split)
MAX_CURVE_POINTS = 24  # the pruning curve has at most this many points besides 0 removed (Michel
# et al. 2019 draw 10 % steps; 24 points of 144 heads are 6 heads apart)
CACHE_VERSION = 1  # bump when the numbers a cached result holds change meaning


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


def head_importance(
    lm: TranslationModel,
    sample: Sample,
    progress: ProgressFn | None = None,
    target_lang: str | None = None,
    precision: str = "float32",
) -> HeadImportance:
    """BLEU and loss with each head removed alone, gradient scores and the pruning curve."""
    start, measures = time.perf_counter(), Measures(lm, sample, target_lang, precision)
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
    bfloat16 where the CPU runs it natively). Heads are removed in this thread only: ``lm``
    may be shared with other sessions meanwhile.
    """
    cfg, carried = validation_source(lm.meta, source)
    precision = resolved_precision(precision, lm)
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
