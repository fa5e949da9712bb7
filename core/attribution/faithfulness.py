"""Faithfulness: does a method's ranking of source words match what removing them does?

On N validation sentences, each with the model's own output for it (a translator's greedy
translation; a masked language model's fill of one word the masking protocol hides, T = 1:
``core.model.own_outputs`` writes the rule, and counts the sentences it skips), every source
word (``source_spans``: the mask is no word, it is the output's position) is occluded in turn
(each of its pieces replaced by the tokenizer's unknown token) and the change in the
log-probability of every output token is recorded: the occlusion effect (T, W). The same code
reads every kind of model: ``output_logp``'s teacher-forced pass (``TranslationModel.run``) is
a masked model's pass over the occluded sentence read at its mask. For each method, its source
part merged into words (T, W) is compared with it:

- Spearman's rho per output token (tokens whose scores or effects are all equal are left
  out), averaged per sentence; the mean over sentences with a 95% interval
  (mean +- 1.96 sd / sqrt(n), the normal approximation over sentences);
- a deletion curve: the drop of log p(y_t) when the method's top-k words for y_t are
  occluded together, k = 1, 2, 3, averaged over output tokens with at least k words.

A ``random`` ranking (seeded) is the baseline: its expected rho is 0. Results are cached on
disk per checkpoint, data settings, sample size and methods, like head importance.

Shape key: S source tokens (pieces, <eos> included), T output tokens, W source words
(<eos> not counted), N copies in one batch, K deletion sizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np
import torch

from core.attribution.gradients import DEFAULT_CHOICES, GradientChoices
from core.attribution.methods import (  # GRADIENT_METHODS: those the choices change
    GRADIENT_METHODS,
    METHOD_NAMES,
    METHODS,
    Attribution,
    AttributionError,
    attribute,
    method_name,
)
from core.corpus.source import DataError
from core.measure.progress import Progress, check_time
from core.measure.rank import spearman
from core.measure.sample import Sample, sample_key, validation_sample
from core.model.checkpoints import validation_source
from core.model.interface import TranslationModel
from core.model.own_outputs import own_outputs, source_spans
from core.places import attribution_root
from core.runs.disk_cache import read_cached, write_cached

SENTENCES = 200  # validation sentences of the faithfulness sample (the first N)
SAMPLE_SIZES = (1, 1000)  # sample sizes core.attribute offers (least, most; the page: from 10)
DELETION_K = (1, 2, 3)  # how many top words the deletion curve removes
SLOW_METHODS = ("integrated-gradients", "gradient-shap")  # measured when asked for
DEFAULT_METHODS = tuple(m for m in METHODS if m not in SLOW_METHODS)
RANDOM = "random"  # the baseline ranking
CACHE_VERSION = 3  # 2: the attention row names its layer and head; 3: a one-stack model's
# attention row is named for its one attention
ROWS_PER_PASS = 32  # occluded copies per teacher-forced pass ((N, T, V) logits of a big vocabulary)
RANKED_AT = {"attention": " (last layer, mean of heads)"}  # what a method's row measured

ProgressFn = Callable[[float, str], None]


@dataclass
class Case:
    """One sentence of the sample with the model's own output (translation, or fill)."""

    src_ids: list[int]  # S ids, <eos> included (a masked model's: its one mask in a word's place)
    out_ids: list[int]  # T ids, <eos> included if reached (a masked model's: its fill, T = 1)
    spans: list[tuple[int, int]]  # W [start, end) source word spans (pieces), specials left out


def usable_methods(m: TranslationModel, methods: Sequence[str]) -> list[str]:
    """The ``methods`` that explain this model (``TranslationModel.supports``)."""
    return [x for x in methods if not m.supports(x)]


def translate_sample(m: TranslationModel, sample: Sample, target_lang=None) -> list[Case]:
    """The model's own output for every sample sentence (batched: ``own_outputs``), as Cases;
    the sentences a masked model's protocol skips are left out."""
    cases = own_outputs(m, sample.src_ids, target_lang, tick=lambda _: check_time())
    return [Case(src, out, source_spans(m, src)) for src, out in filter(None, cases)]


def occluded(src_ids: list[int], spans, chosen: Sequence[int], unk: int) -> list[int]:
    """The source with the pieces of the ``chosen`` words replaced by the unknown ``unk``."""
    ids = list(src_ids)
    for w in chosen:
        a, b = spans[w]
        ids[a:b] = [unk] * (b - a)
    return ids


@torch.no_grad()
def output_logp(m: TranslationModel, sources: list[list[int]], out_ids: list[int]):
    """log p(y_t) of one output after each of N equally long sources: (N, T), ROWS_PER_PASS
    copies a pass."""
    out = torch.tensor(out_ids, device=m.device)  # (T,)
    tgt_in = torch.tensor([m.decoder_inputs(out_ids)], device=m.device)  # (1, T)
    parts = []
    for i in range(0, len(sources), ROWS_PER_PASS):
        check_time()  # a shared server's limit for one heavy job
        src = torch.tensor(sources[i : i + ROWS_PER_PASS], device=m.device)  # (n, S)
        n = src.size(0)
        logp = m.run(src, tgt_in.expand(n, -1)).float().log_softmax(-1)  # (n, T, V)
        parts.append(logp.gather(-1, out.expand(n, -1)[..., None])[..., 0].cpu())  # (n, T)
    return torch.cat(parts)


def word_scores(a: Attribution, spans) -> np.ndarray:
    """A method's source part summed over each word's pieces: (T, W)."""
    return np.stack([a.source[:, s:e].sum(1) for s, e in spans], axis=1)


def deletion_sources(case: Case, scores: np.ndarray, ks, unk: int) -> list[list[int]]:
    """For each output token t and k: the source without its top-k words by ``scores``."""
    order = np.argsort(-scores, axis=1, kind="stable")  # (T, W)
    return [
        occluded(case.src_ids, case.spans, order[t, :k], unk)
        for t in range(len(scores))
        for k in ks
    ]


def row_spearman(scores: np.ndarray, effects: np.ndarray) -> float:
    """Mean Spearman rho over output tokens with varying scores and effects (nan if none)."""
    rhos = [
        spearman(s, e)
        for s, e in zip(scores, effects)
        if len(s) > 1 and np.ptp(s) > 0 and np.ptp(e) > 0
    ]
    rhos = [r for r in rhos if not np.isnan(r)]
    return float(np.mean(rhos)) if rhos else float("nan")


def variants(methods: Sequence[str], choices: GradientChoices = DEFAULT_CHOICES) -> list[tuple]:
    """(row id, method, choices) of each row measured: every method as by default and, for
    choices other than the defaults, each gradient method as chosen too (its own row)."""
    out = [(m, m, DEFAULT_CHOICES) for m in methods]
    if choices != DEFAULT_CHOICES:
        chosen = [m for m in methods if m in GRADIENT_METHODS]
        out += [(f"{m} ({choices.words(m)})", m, choices) for m in chosen]
    return out


def rankings(m: TranslationModel, case: Case, methods, rng, clock: dict):
    """Each row's word scores (T, W) for one case (``methods``: method names, or the
    (row id, method, choices) of ``variants``), and the random baseline's."""
    p = m.forced(case.src_ids, case.out_ids)
    explain = partial(attribute, m, case.src_ids, case.out_ids, p=p)
    out = {}
    for row, method, choices in (
        v if isinstance(v, tuple) else (v, v, DEFAULT_CHOICES) for v in methods
    ):
        check_time()
        start = time.perf_counter()
        out[row] = word_scores(explain(method, choices=choices), case.spans)
        clock[row] = clock.get(row, 0.0) + time.perf_counter() - start
    out[RANDOM] = rng.random((len(case.out_ids), len(case.spans)))  # (T, W)
    return out


def measure_case(m: TranslationModel, case: Case, methods, rng, clock: dict):
    """method -> (rho of the sentence, [drops of its output tokens for each k <= W])."""
    T, W = len(case.out_ids), len(case.spans)
    ks = [k for k in DELETION_K if k <= W]
    if m.unk_id is None:
        raise DataError("This model's tokenizer has no unknown token to occlude words with.")
    ranked = rankings(m, case, methods, rng, clock)
    singles = [occluded(case.src_ids, case.spans, [w], m.unk_id) for w in range(W)]
    deletions = [deletion_sources(case, scores, ks, m.unk_id) for scores in ranked.values()]
    sources = [case.src_ids, *singles, *(s for block in deletions for s in block)]
    logp = output_logp(m, sources, case.out_ids).numpy()  # (1 + W + M T K, T)
    effects = (logp[0] - logp[1 : 1 + W]).T  # (T, W) how much each word's absence costs y_t
    removed = logp[1 + W :].reshape(len(ranked), T, len(ks), T)  # (M, T, K, T)
    steps = np.arange(T)
    drops = logp[0][None, :, None] - removed[:, steps, :, steps].transpose(1, 0, 2)  # (M, T, K)
    return {
        m: (row_spearman(ranked[m], effects), [drops[i, :, j].tolist() for j in range(len(ks))])
        for i, m in enumerate(ranked)
    }


@dataclass
class Faithfulness:
    """Each method's agreement with occlusion on a validation sample, best first."""

    methods: list[dict]  # method, name, spearman, spearman_ci95, deletion, sentences, seconds
    sentences: int  # sentences of the sample explained
    tokens: int  # output tokens explained
    seconds: float = 0.0
    cached: bool = False
    skipped: int = 0  # sample sentences with nothing to explain (the masking protocol's)

    def lines(self) -> list[dict]:
        """The command's JSON lines: each method's row with the sample the page states above
        its table (``sample``: sentences explained, output tokens, sentences skipped, seconds
        and whether the result was read from the disk cache)."""
        sample = {"sentences": self.sentences, "tokens": self.tokens, "skipped": self.skipped}
        sample |= {"seconds": self.seconds, "cached": self.cached}
        return [r | {"sample": sample} for r in self.methods]

    def row(self, method: str) -> dict:
        """The row of one method (KeyError if it was not measured)."""
        for r in self.methods:
            if r["method"] == method:
                return r
        raise KeyError(method)


def summary(
    method: str,
    rhos: list[float],
    drops: list[list[float]],
    seconds: float,
    choices: tuple[str, GradientChoices] | None = None,
    names: dict[str, str] = METHOD_NAMES,
) -> dict:
    """One row: mean rho with its 95% interval, mean drop at each k (``choices``: the
    (method, choices) of a row measured with other than the defaults; ``names``: the methods'
    names for the model, ``methods.method_name``)."""
    rhos = [r for r in rhos if not np.isnan(r)]
    mean = float(np.mean(rhos)) if rhos else None
    half = 1.96 * float(np.std(rhos, ddof=1)) / np.sqrt(len(rhos)) if len(rhos) > 1 else None
    base = choices[0] if choices else method
    name = names.get(base, "Random ranking (baseline)") + RANKED_AT.get(base, "")
    extra = {"choices": choices[1].to_json()} if choices else {}
    return extra | {
        "method": method,
        "name": f"{name} — {choices[1].words(base)}" if choices else name,
        "spearman": mean,
        "spearman_ci95": None if half is None else [mean - half, mean + half],
        "deletion": [float(np.mean(d)) if d else None for d in drops],
        "sentences": len(rhos),
        "seconds": seconds,
    }


def faithfulness(
    lm: TranslationModel,
    sample: Sample,
    methods: Sequence[str] = DEFAULT_METHODS,
    progress: ProgressFn | None = None,
    seed: int = 0,
    target_lang: str | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Faithfulness:
    """Measure every method (and the random baseline) against occlusion on the sample
    (``usable_methods`` of them for a Hugging Face model); with ``choices`` other than the
    defaults, each gradient method as chosen too, on a row of its own."""
    rows_of = variants(usable_methods(lm, methods), choices)
    start, clock = time.perf_counter(), {}
    rng = np.random.default_rng(seed)
    rhos = {r: [] for r in (*(v[0] for v in rows_of), RANDOM)}
    drops = {m: [[] for _ in DELETION_K] for m in rhos}
    work = Progress(progress, len(sample.sources) + 1)
    with lm.evaluating():
        cases = translate_sample(lm, sample, target_lang)
        work.advance(1 + len(sample.src_ids) - len(cases), "the model's own outputs")
        tokens = 0
        for i, case in enumerate(cases):
            if case.spans and case.out_ids:
                tokens += len(case.out_ids)
                for m, (rho, by_k) in measure_case(lm, case, rows_of, rng, clock).items():
                    rhos[m].append(rho)
                    for k, values in enumerate(by_k):
                        drops[m][k].extend(values)
            work.advance(1, f"sentence {i + 1} of {len(cases)}")
    chosen = {row: (method, c) for row, method, c in rows_of if row != method}
    names = {x: method_name(lm, x) for x in METHOD_NAMES}
    rows = [summary(m, rhos[m], drops[m], clock.get(m, 0.0), chosen.get(m), names) for m in rhos]
    rows.sort(key=lambda r: -np.inf if r["spearman"] is None else r["spearman"], reverse=True)
    seconds, skipped = time.perf_counter() - start, len(sample.src_ids) - len(cases)
    return Faithfulness(rows, len(cases), tokens, seconds, skipped=skipped)


def faithfulness_key(
    checkpoint,
    cfg,
    sentences: int,
    methods: Sequence[str],
    target_lang: str | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> str:
    """Cache key: the sample's facts and the methods measured (and a target language, and
    the gradient methods' choices where not the defaults)."""
    facts = {"target_lang": target_lang} if target_lang else {}
    facts |= {"choices": choices.to_json()} if choices != DEFAULT_CHOICES else {}
    return sample_key(
        checkpoint, cfg, sentences, version=CACHE_VERSION, methods=sorted(methods), **facts
    )


def cached_faithfulness(key: str) -> Faithfulness | None:
    """A result stored under ``key``, or None."""
    data = read_cached(attribution_root(), key)
    try:
        result = Faithfulness(**{**data, "cached": True})
        [result.row(r["method"]) for r in result.methods]
    except (TypeError, KeyError):
        return None
    return result


def faithfulness_for(
    lm,
    checkpoint,
    sentences: int = SENTENCES,
    methods: Sequence[str] = DEFAULT_METHODS,
    source: str | None = None,
    progress: ProgressFn | None = None,
    refresh: bool = False,
    target_lang: str | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Faithfulness:
    """Faithfulness of the methods on a checkpoint's validation sample, cached on disk
    (a model not trained here: fra-eng's validation sentences, as head importance reads them);
    ``choices``: each gradient method also measured as chosen."""
    if problem := lm.supports("faithfulness"):
        raise AttributionError(problem)
    methods = usable_methods(lm, methods)
    cfg, carried = validation_source(lm.meta, source)
    key = faithfulness_key(checkpoint, cfg, sentences, methods, target_lang, choices)
    if not refresh and (hit := cached_faithfulness(key)) is not None:
        return hit
    if progress:
        progress(0.0, "rebuilding the validation split")
    sample = validation_sample(lm, cfg, sentences, target_lang, carried)
    result = faithfulness(lm, sample, methods, progress, target_lang=target_lang, choices=choices)
    write_cached(attribution_root(), key, asdict(result) | {"cached": False})
    return result


def lookup_faithfulness(
    checkpoint,
    lm,
    sentences=SENTENCES,
    methods=DEFAULT_METHODS,
    target_lang=None,
    choices: GradientChoices = DEFAULT_CHOICES,
):
    """A cached result for this checkpoint, sample size, methods (and choices), or None
    (never computes)."""
    methods = usable_methods(lm, methods)
    try:
        cfg = validation_source(lm.meta)[0]
        return cached_faithfulness(
            faithfulness_key(checkpoint, cfg, sentences, methods, target_lang, choices)
        )
    except DataError:  # the corpus is not here: nothing can be cached for it
        return None
