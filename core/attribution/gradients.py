"""Gradient x input and integrated gradients at the token embeddings.

The explained quantity is, by default, the log-probability of each output token y_t given
the source and the prefix, log p(y_t | x, y_<t), as a function of the token embeddings e: the
embedding modules' outputs (``encoder.embed`` / ``decoder.embed`` hook sites), put in place of
the ids' own by the model's embeddings path (``TranslationModel.log_probs_at``), so the
function is the model's own from ids on every family (a √D scale and the positions are part
of it, wherever the family applies them). A token's score aggregates the attribution over
its D embedding dimensions.

Integrated gradients (Sundararajan et al. 2017) integrates from a baseline embedding (zero
by default; positions kept): attribution = (e - b) * Σ_k w_k ∇f(b + α_k (e - b)), with
captum's integration rules (``path``: Gauss-Legendre by default, the Riemann sums), and the
same numbers as captum's ``IntegratedGradients`` (a test compares). Completeness says the
scores of a row sum to f(e) - f(b); ``Gradients.completeness`` reports how far they are.
Gradient x input is the same sum at α = 1 alone: e * ∇f(e).

How it is computed (issue 51, item 5): one batch row per (integration point, output step),
each row projecting only its own step onto the vocabulary (not every step of every copy),
and the rows of early steps run with the prefix cut after their last step (a causal decoder's
later steps change nothing before them): the work inseq does step by step, in a few passes.
The gradient passes run their batched products (attention's) in the layout the CPU's batched
GEMM runs fastest and softmax rows shorter than 16 keys written out
(``core.attribution.products``: same sums, 20-25 % less time on the decoder-only models'
longest pairs, 15 % on the encoder-decoders' short ones, issue 67).

``GradientChoices`` names what a user may change, each as inseq or captum offer it: the
baseline (zero; the UNK, PAD or MASK token's embedding at every position, as inseq's UNK
baseline, specials optionally kept as they are; a uniformly random embedding or random
vocabulary tokens' embeddings, averaged over ``samples`` draws: the expected-gradients idea),
the number of steps and the rule, the aggregation over the embedding (the signed sum, as by
default; the L2 norm, as inseq's; the sum of absolute values), the normalisation (each row's
absolute scores scaled to sum to 1, or none: the aggregated scores as they are) and the
function explained (log p(y_t); p(y_t), inseq's default; the entropy of the step's
distribution; with a contrast, log p(y_t) - log p(y'_t), p(y_t) - p(y'_t) or the KL
divergence to the contrast's distribution: ``core.attribution.contrast``). The defaults are
what the studio always did.

Shape key: S source tokens, T output tokens, D model width, V vocabulary, B batch rows,
K integration points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from core.attribution.products import NarrowProducts
from core.command_line import InRange
from core.measure.progress import check_time
from core.model.interface import TranslationModel
from core.model.record import Record

IG_STEPS = 32  # integration points of integrated gradients (Gauss-Legendre)
GROUP = 10  # output steps per forward pass
IG_BATCH = 256  # integration points per forward pass (every one of them: MAX_STEPS)
MAX_STEPS = 256  # the most integration points a user may ask for
MAX_SAMPLES = 32  # the most random baselines averaged
MAX_INTEGRATIONS = 1024  # steps x random draws: one sentence's work stays bounded
BASELINES = ("zero", "unk", "pad", "mask", "uniform", "expected")  # where the integral starts
RANDOM_BASELINES = ("uniform", "expected")  # averaged over ``samples`` draws
RULES = ("gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle")
AGGREGATIONS = ("sum", "l2", "abs-sum")  # over the embedding dimensions, per token
NORMALISATIONS = ("row", "none")
FUNCTIONS = ("log-prob", "prob", "entropy", "kl")  # what is explained of each output step
CONTRAST_ONLY = ("kl",)  # needs an alternative translation
PLAIN_FUNCTIONS = tuple(f for f in FUNCTIONS if f not in CONTRAST_ONLY)
DEFAULT = " (default: %(default)s)"  # a flag's help names its default
CHOICE_WORDS = {
    "zero": "zero embeddings",
    "unk": "the UNK token's embedding",
    "pad": "the PAD token's embedding",
    "mask": "the MASK token's embedding",
    "uniform": "uniformly random embeddings",
    "expected": "random vocabulary tokens' embeddings (expected gradients)",
    "gausslegendre": "Gauss-Legendre",
    "riemann_trapezoid": "trapezoid Riemann sum",
    "riemann_left": "left Riemann sum",
    "riemann_right": "right Riemann sum",
    "riemann_middle": "midpoint Riemann sum",
    "sum": "signed sum over the embedding",
    "l2": "L2 norm over the embedding",
    "abs-sum": "sum of absolute values over the embedding",
    "row": "absolute scores, each row scaled to sum to 1",
    "none": "not normalised (the scores as aggregated)",
    "log-prob": "log p(y_t)",
    "prob": "p(y_t)",
    "entropy": "the entropy of the step's distribution",
    "kl": "KL(P_t || P'_t), the contrast's distribution P'_t",
}
CONTRAST_WORDS = {"log-prob": "log p(y_t) − log p(y'_t)", "prob": "p(y_t) − p(y'_t)"}


@dataclass(frozen=True)
class GradientChoices:
    """What the gradient methods compute, as a user chose it (the defaults: as always)."""

    baseline: str = "zero"
    keep_specials: bool = False  # specials (</s>, the start token) keep their embedding
    steps: int = IG_STEPS
    rule: str = "gausslegendre"
    aggregation: str = "sum"
    function: str = "log-prob"
    normalisation: str = "row"
    samples: int = 8  # random baselines averaged (``uniform``, ``expected``)

    def problems(self) -> list[str]:
        """What cannot be computed as asked, one line each."""
        out = []
        for name, allowed in (
            ("baseline", BASELINES),
            ("rule", RULES),
            ("aggregation", AGGREGATIONS),
            ("function", FUNCTIONS),
            ("normalisation", NORMALISATIONS),
        ):
            if getattr(self, name) not in allowed:
                out.append(
                    f"{name} must be one of {', '.join(allowed)} (got {getattr(self, name)!r})"
                )
        if not isinstance(self.steps, int) or not 2 <= self.steps <= MAX_STEPS:
            out.append(f"steps must be a whole number from 2 to {MAX_STEPS} (got {self.steps!r})")
        if not isinstance(self.samples, int) or not 1 <= self.samples <= MAX_SAMPLES:
            out.append(
                f"samples must be a whole number from 1 to {MAX_SAMPLES} (got {self.samples!r})"
            )
        elif self.baseline in RANDOM_BASELINES and self.integrations() > MAX_INTEGRATIONS:
            out.append(
                f"steps x random draws must be at most {MAX_INTEGRATIONS:,} (got "
                f"{self.steps} x {self.samples}): take fewer of one or the other"
            )
        return out

    def integrations(self) -> int:
        """Integration points computed in all: steps, times the random draws averaged."""
        steps = self.steps if isinstance(self.steps, int) else 0
        return steps * (self.samples if self.baseline in RANDOM_BASELINES else 1)

    def words(self, method: str, contrast: bool = False) -> str:
        """The choices in words, as a result names them."""
        explained = (CONTRAST_WORDS if contrast else {}).get(self.function)
        parts = [f"explains {explained or CHOICE_WORDS[self.function]}"]
        parts += [CHOICE_WORDS[self.aggregation], CHOICE_WORDS[self.normalisation]]
        if method in ("integrated-gradients", "deeplift", "gradient-shap"):  # from a baseline
            kept = ", specials kept" if self.keep_specials and self.baseline != "zero" else ""
            drawn = f", {self.samples} draws" if self.baseline in RANDOM_BASELINES else ""
            parts.insert(0, f"from {CHOICE_WORDS[self.baseline]}{kept}{drawn}")
        if method == "integrated-gradients":
            parts.insert(1, f"{self.steps} {CHOICE_WORDS[self.rule]} steps")
        elif method == "gradient-shap":  # captum's n_samples
            parts.insert(1, f"{self.steps} samples")
        return "; ".join(parts)

    def to_json(self) -> dict:
        """The choices as data (``choices`` of a result)."""
        return asdict(self)


DEFAULT_CHOICES = GradientChoices()


def baselines_of(m: TranslationModel) -> tuple[str, ...]:
    """The baselines that apply to this model: a token's only where its tokenizer has it."""
    tokens = {"unk": m.unk_id, "pad": m.pad_id, "mask": m.mask_id}
    return tuple(b for b in BASELINES if b not in tokens or tokens[b] is not None)


def add_choice_flags(parser) -> None:
    """The commands' flags of GradientChoices (an argparse parser), named as the fields."""
    d = DEFAULT_CHOICES
    flag = parser.add_argument
    flag("--baseline", default=d.baseline, help=f"one of {', '.join(BASELINES)}{DEFAULT}")
    flag("--keep-specials", action="store_true", help="the baseline keeps </s> and the start token")
    steps = "integrated gradients' integration points, GradientSHAP's samples" + DEFAULT
    flag("--steps", type=InRange(int, 2, MAX_STEPS), default=d.steps, help=steps)
    flag("--rule", default=d.rule, help=f"one of {', '.join(RULES)}{DEFAULT}")
    flag("--aggregation", default=d.aggregation, help=f"one of {', '.join(AGGREGATIONS)}{DEFAULT}")
    explained = f"one of {', '.join(FUNCTIONS)}{DEFAULT} (kl needs --contrast; with a contrast"
    flag("--function", default=d.function, help=f"{explained} log-prob and prob are differences)")
    flag("--normalisation", default=d.normalisation, help=f"row or none{DEFAULT}")
    draws = f"random baselines averaged (uniform, expected){DEFAULT}"
    flag("--samples", type=InRange(int, 1, MAX_SAMPLES), default=d.samples, help=draws)


def choices_from(args) -> GradientChoices:
    """The GradientChoices of parsed flags (``add_choice_flags``)."""
    return GradientChoices(
        args.baseline,
        args.keep_specials,
        args.steps,
        args.rule,
        args.aggregation,
        args.function,
        args.normalisation,
        args.samples,
    )


def path(rule: str, steps: int) -> tuple[list[float], list[float]]:
    """(α_k, w_k) of an integration rule on [0, 1], exactly as captum defines them (its
    trapezoid rule halves the end weights of n equal steps of 1/n)."""
    if rule == "gausslegendre":
        x, w = np.polynomial.legendre.leggauss(steps)
        return list(0.5 * (x + 1)), list(0.5 * w)
    n = steps
    weights = [1 / n] * n
    if rule == "riemann_trapezoid":
        weights[0], weights[-1] = weights[0] / 2, weights[-1] / 2
        return torch.linspace(0, 1, n).tolist(), weights
    first, last = {
        "riemann_left": (0, 1 - 1 / n),
        "riemann_right": (1 / n, 1),
        "riemann_middle": (1 / (2 * n), 1 - 1 / (2 * n)),
    }[rule]
    return torch.linspace(first, last, n).tolist(), weights


@dataclass
class Gradients:
    """Signed scores of one sentence: row t over [source ; prefix]."""

    scores: torch.Tensor  # (T, S + T): the chosen aggregation of the attribution over D
    completeness: float | None = None  # integrated gradients: sum |delta_t| / sum |change_t|


Pick = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (B, V) log p, (B,) steps -> (B,)


@dataclass
class GradientTask:
    """What the gradient methods explain: f_t (log p(y_t) by default) of every output step
    as a function of the token embeddings, at one sentence's embeddings."""

    embeddings: tuple[torch.Tensor, torch.Tensor]  # (1, S, D) source, (1, T, D) prefix
    at: Callable  # (B, S, D), (B, T', D), (P,) steps -> P x (B,) f at each step of each row
    logp: torch.Tensor  # (T,) the sentence's own f_t
    baselines: Callable  # choices -> [((1, S, D), (1, T, D)), ...] to start from

    @property
    def output_length(self) -> int:
        """T, the number of output tokens explained."""
        return self.embeddings[1].size(1)

    def log_probs(self, src_emb: torch.Tensor, tgt_emb: torch.Tensor) -> torch.Tensor:
        """(B, T) f_t of every step of every row."""
        steps = torch.arange(self.output_length, device=src_emb.device)  # (T,)
        return torch.stack(self.at(src_emb, tgt_emb, steps), 1)  # (B, T)


def kept(m: TranslationModel, ids: torch.Tensor) -> torch.Tensor:
    """(same shape as ``ids``) True where a baseline keeps the token when asked to keep the
    specials: the end token and the decoder's start token, as inseq keeps them (not every
    special: BART's <s> is replaced like any word)."""
    ends = torch.tensor(sorted({m.eos_id, m.start_id}), device=ids.device)
    return torch.isin(ids, ends)


def baseline_ids(m: TranslationModel, ids: torch.Tensor, token: int, keep: bool) -> torch.Tensor:
    """``ids`` with every token replaced by ``token`` (</s> and the start token kept where
    ``keep``)."""
    out = torch.full_like(ids, token)
    return torch.where(kept(m, ids), ids, out) if keep else out


def picked(out: torch.Tensor, function: str) -> Pick:
    """f of a step from its (B, V) log-probabilities: log p or p of the step's output token
    (``out``: (T,) ids), or the distribution's entropy."""
    if function == "entropy":
        return lambda logp, steps: -(logp.exp() * logp).nan_to_num().sum(-1)  # (B,)

    def chosen(logp: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        value = logp.gather(-1, out[steps][:, None])[:, 0]  # (B,)
        return value.exp() if function == "prob" else value

    return chosen


def _random_baselines(m: TranslationModel, p: Record, c: GradientChoices) -> list[tuple]:
    """``c.samples`` random starts (seeded: the same each time): embeddings drawn uniformly
    within the sentence's embedding range per dimension, or the embeddings of tokens drawn
    uniformly from each side's vocabulary; specials kept where asked."""
    g = torch.Generator().manual_seed(0)
    ids = (p.src, p.tgt_in)  # (1, S), (1, T)
    own = m.embeddings(*ids)  # (1, S, D), (1, T, D)
    special = [kept(m, x) for x in ids]  # (1, S), (1, T): </s> and the start token
    starts = []
    for _ in range(c.samples):
        if c.baseline == "expected":
            drawn = [
                torch.randint(n, x.shape, generator=g).to(x.device)
                for n, x in zip(m.vocab_sizes(), ids)
            ]
            if c.keep_specials:
                drawn = [torch.where(s, x, r) for s, x, r in zip(special, ids, drawn)]
            starts.append(m.embeddings(*drawn))
            continue
        pair = []
        for x, s in zip(own, special):
            low, high = x.amin(dim=(0, 1)), x.amax(dim=(0, 1))  # (D,) each
            draw = low + (high - low) * torch.rand(x.shape, generator=g).to(x)  # (1, ., D)
            pair.append(torch.where(s[..., None], x, draw) if c.keep_specials else draw)
        starts.append(tuple(pair))
    return starts


def embedding_task(
    m: TranslationModel,
    p: Record,
    function: Pick | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> GradientTask:
    """The task of a recorded pass (one sentence): f_t of its ``out_ids`` as ``choices``
    say (log p(y_t) by default), or ``function((B, V) log-probabilities, (B,) steps)``."""
    if choices.function in CONTRAST_ONLY and function is None:
        raise ValueError(f"{CHOICE_WORDS[choices.function]} needs an alternative translation.")
    pick = function or picked(p.out_ids[0], choices.function)

    def at(src_emb: torch.Tensor, tgt_emb: torch.Tensor, steps: torch.Tensor) -> list:
        tgt_in = p.tgt_in[:, : tgt_emb.size(1)]  # (1, T'): the prefix the rows read
        logps = m.log_probs_at(p.src, tgt_in, src_emb, tgt_emb, steps)  # P x (B, V)
        B = src_emb.size(0)
        return [pick(logp, t.expand(B)) for logp, t in zip(logps, steps)]  # P x (B,)

    def baselines(c: GradientChoices) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if c.baseline == "zero":
            return [tuple(torch.zeros_like(x) for x in pair)]
        if c.baseline in RANDOM_BASELINES:
            return _random_baselines(m, p, c)
        token = {"unk": m.unk_id, "pad": m.pad_id, "mask": m.mask_id}[c.baseline]
        if token is None:
            raise ValueError(f"This model's tokenizer has no {c.baseline.upper()} token.")
        ids = (baseline_ids(m, x, int(token), c.keep_specials) for x in (p.src, p.tgt_in))
        return [m.embeddings(*ids)]  # (1, S, D), (1, T, D): those tokens' own embeddings

    pair = m.embeddings(p.src, p.tgt_in)  # (1, S, D), (1, T, D)
    task = GradientTask(pair, at, p.logp, baselines)
    if function is not None or choices.function != "log-prob":
        with torch.no_grad():
            task.logp = task.log_probs(*pair)[0]  # (T,)
    return task


def _groups(T: int) -> list[range]:
    """Consecutive output steps explained by one forward pass, whose prefix ends after the
    group's last step."""
    size = GROUP
    return [range(lo, min(T, lo + size)) for lo in range(0, T, size)]


def _gradients(task: GradientTask, x_src, x_tgt, group: range):
    """∇f_t of each row of (n, S, D) source and (n, T', D) prefix embeddings for every step
    t of ``group``: (g, n, S, D), (g, n, T', D). One forward pass serves the g steps (a
    causal decoder computes every earlier step on the way to the last); a backward pass
    each."""
    steps = torch.tensor(list(group), device=x_src.device)  # (g,)
    with torch.enable_grad(), NarrowProducts():
        f = task.at(x_src, x_tgt, steps)  # g x (n,): each step's own graph above the stacks
        last = len(group) - 1
        grads = [
            torch.autograd.grad(f[j].sum(), (x_src, x_tgt), retain_graph=j < last)
            for j in range(len(group))
        ]
    return torch.stack([d for d, _ in grads]), torch.stack([d for _, d in grads])


def _integrate(task: GradientTask, start: tuple, alphas: list[float], weights: list[float]):
    """Σ_k w_k ∇f_t(b + α_k (e - b)) of every step t: (T, S, D), (T, T, D)."""
    src, tgt = (x.detach() for x in task.embeddings)  # (1, S, D), (1, T, D)
    b_src, b_tgt = (b.detach().to(x.dtype) for b, x in zip(start, (src, tgt)))
    T = task.output_length
    total = [src.new_zeros(T, *src.shape[1:]), tgt.new_zeros(T, *tgt.shape[1:])]
    for k0 in range(0, len(alphas), IG_BATCH):
        a = torch.tensor(alphas[k0 : k0 + IG_BATCH], dtype=src.dtype, device=src.device)  # (n,)
        w = torch.tensor(weights[k0 : k0 + IG_BATCH], dtype=src.dtype, device=src.device)
        x_src = (b_src + a[:, None, None] * (src - b_src)).requires_grad_()  # (n, S, D)
        for group in _groups(T):
            check_time()  # a shared server's limit for one heavy job, where one is set
            cut = group[-1] + 1
            x_tgt = (b_tgt[:, :cut] + a[:, None, None] * (tgt - b_tgt)[:, :cut]).requires_grad_()
            d_src, d_tgt = _gradients(task, x_src, x_tgt, group)  # (g, n, ., D) each
            total[0][group] += (d_src * w[None, :, None, None]).sum(1)  # (g, S, D)
            total[1][group, :cut] += (d_tgt * w[None, :, None, None]).sum(1)  # (g, cut, D)
    return total


def _scores(parts, aggregation: str = "sum") -> torch.Tensor:
    """Attributions (T, S, D), (T, T, D) -> (T, S + T) per-token scores: their signed sum
    over D, its L2 norm, or the sum of their absolute values."""
    aggregate = {
        "sum": lambda a: a.sum(-1),
        "l2": lambda a: a.norm(dim=-1),
        "abs-sum": lambda a: a.abs().sum(-1),
    }[aggregation]
    return torch.cat([aggregate(a.float()) for a in parts], dim=1).detach()


def grad_input(task: GradientTask, choices: GradientChoices = DEFAULT_CHOICES) -> Gradients:
    """Gradient x input of every output step's f (log p(y_t) by default): e * ∇f(e)."""
    zero = tuple(torch.zeros_like(x) for x in task.embeddings)
    grads = _integrate(task, zero, [1.0], [1.0])
    parts = [d * x.detach() for d, x in zip(grads, task.embeddings)]  # (T, ., D) each
    return Gradients(_scores(parts, choices.aggregation))


def integrated_gradients(
    task: GradientTask, steps: int | None = None, choices: GradientChoices = DEFAULT_CHOICES
) -> Gradients:
    """Integrated gradients from the chosen baseline (zero embeddings by default; random
    baselines averaged), with the completeness error (measured on the signed sum, whatever
    the aggregation shown)."""
    starts = task.baselines(choices)
    alphas, weights = path(choices.rule, steps or choices.steps)
    parts = [torch.zeros(0)] * 2
    origin = 0.0
    for start in starts:
        grads = _integrate(task, start, alphas, weights)
        done = [d * (x - b).detach() for d, x, b in zip(grads, task.embeddings, start)]
        parts = done if parts[0].numel() == 0 else [a + b for a, b in zip(parts, done)]
        with torch.no_grad():
            origin = origin + task.log_probs(*start)[0]  # (T,) f_t at the baseline
    parts = [a / len(starts) for a in parts]  # (T, ., D) each: the mean over baselines
    change = task.logp - origin / len(starts)  # (T,)
    delta = _scores(parts).sum(-1) - change  # (T,)
    error = float(delta.abs().sum() / change.abs().sum().clamp(min=1e-12))
    return Gradients(_scores(parts, choices.aggregation), error)
