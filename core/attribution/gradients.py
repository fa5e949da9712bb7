"""Gradient x input and integrated gradients at the token embeddings, through captum.

The explained quantity is the log-probability of each output token y_t given the source and
the prefix, log p(y_t | x, y_<t), as a function of the token embeddings e: the embedding
modules' outputs (``encoder.embed`` / ``decoder.embed`` hook sites), put in place of the ids'
own by the model's embeddings path (``TranslationModel.log_probs_from_embeddings``), so the
function is the model's own from ids on every family (a √D scale and the positions are part
of it, wherever the family applies them). A token's score is the sum over the embedding
dimensions of captum's attribution. For output token t the batch holds one copy of the
sentence and captum's ``target`` picks position t.

Integrated gradients (Sundararajan et al. 2017) integrates from an all-zero embedding
baseline (positions kept); completeness says the scores of a row sum to
log p(y_t) - log p_baseline(y_t), and ``Gradients.completeness`` reports how far they are.

``GradientChoices`` (issue 51) names what a user may change, each as inseq or captum offer
it: the baseline (zero; the UNK or PAD token's embedding at every position, as inseq's UNK
baseline, specials optionally kept as they are), the number of steps and captum's rule
(Gauss-Legendre, the Riemann sums), the aggregation over the embedding (the signed sum, as
by default; the L2 norm, as inseq's; the sum of absolute values) and the function explained
(log p(y_t), or p(y_t) as inseq's default). The defaults are what the studio always did.

Shape key: S source tokens, T output tokens, D model width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from core.model.interface import TranslationModel
from core.model.record import Record

IG_STEPS = 32  # integration points of integrated gradients (Gauss-Legendre)
IG_BATCH = 512  # sentence copies per forward/backward pass of integrated gradients
MAX_STEPS = 256  # the most integration points a user may ask for
BASELINES = ("zero", "unk", "pad")  # what integrated gradients starts from
RULES = ("gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle")
AGGREGATIONS = ("sum", "l2", "abs-sum")  # over the embedding dimensions, per token
FUNCTIONS = ("log-prob", "prob")  # what is explained of each output token
CHOICE_WORDS = {
    "zero": "zero embeddings",
    "unk": "the UNK token's embedding",
    "pad": "the PAD token's embedding",
    "gausslegendre": "Gauss-Legendre",
    "riemann_trapezoid": "trapezoid Riemann sum",
    "riemann_left": "left Riemann sum",
    "riemann_right": "right Riemann sum",
    "riemann_middle": "midpoint Riemann sum",
    "sum": "signed sum over the embedding",
    "l2": "L2 norm over the embedding",
    "abs-sum": "sum of absolute values over the embedding",
    "log-prob": "log p(y_t)",
    "prob": "p(y_t)",
}


@dataclass(frozen=True)
class GradientChoices:
    """What the gradient methods compute, as a user chose it (the defaults: as always)."""

    baseline: str = "zero"
    keep_specials: bool = False  # specials (</s>, the start token) keep their embedding
    steps: int = IG_STEPS
    rule: str = "gausslegendre"
    aggregation: str = "sum"
    function: str = "log-prob"

    def problems(self) -> list[str]:
        """What cannot be computed as asked, one line each."""
        out = []
        for name, allowed in (
            ("baseline", BASELINES),
            ("rule", RULES),
            ("aggregation", AGGREGATIONS),
            ("function", FUNCTIONS),
        ):
            if getattr(self, name) not in allowed:
                out.append(
                    f"{name} must be one of {', '.join(allowed)} (got {getattr(self, name)!r})"
                )
        if not isinstance(self.steps, int) or not 2 <= self.steps <= MAX_STEPS:
            out.append(f"steps must be a whole number from 2 to {MAX_STEPS} (got {self.steps!r})")
        return out

    def words(self, method: str) -> str:
        """The choices in words, as a result names them."""
        parts = [f"explains {CHOICE_WORDS[self.function]}", CHOICE_WORDS[self.aggregation]]
        if method == "integrated-gradients":
            kept = ", specials kept" if self.keep_specials and self.baseline != "zero" else ""
            parts.insert(0, f"from {CHOICE_WORDS[self.baseline]}{kept}")
            parts.insert(1, f"{self.steps} {CHOICE_WORDS[self.rule]} steps")
        return "; ".join(parts)

    def to_json(self) -> dict:
        """The choices as data (``choices`` of a result)."""
        return asdict(self)


DEFAULT_CHOICES = GradientChoices()


def add_choice_flags(parser) -> None:
    """The commands' flags of GradientChoices (an argparse parser), named as the fields."""
    d = DEFAULT_CHOICES
    parser.add_argument("--baseline", default=d.baseline, help=f"one of {', '.join(BASELINES)}")
    parser.add_argument(
        "--keep-specials", action="store_true", help="the baseline keeps </s> and the start token"
    )
    parser.add_argument("--steps", type=int, default=d.steps, help="integration points")
    parser.add_argument("--rule", default=d.rule, help=f"one of {', '.join(RULES)}")
    parser.add_argument(
        "--aggregation", default=d.aggregation, help=f"one of {', '.join(AGGREGATIONS)}"
    )
    parser.add_argument("--function", default=d.function, help=f"one of {', '.join(FUNCTIONS)}")


def choices_from(args) -> GradientChoices:
    """The GradientChoices of parsed flags (``add_choice_flags``)."""
    return GradientChoices(
        args.baseline, args.keep_specials, args.steps, args.rule, args.aggregation, args.function
    )


@dataclass
class Gradients:
    """Signed scores of one sentence: row t over [source ; prefix]."""

    scores: torch.Tensor  # (T, S + T) signed: sum over D of the attribution
    completeness: float | None = None  # integrated gradients: sum |delta_t| / sum |change_t|


@dataclass
class GradientTask:
    """What the gradient methods explain: log p(y_t) of every output token as a function of
    the token embeddings, at one sentence's embeddings."""

    embeddings: tuple[torch.Tensor, torch.Tensor]  # (1, S, D) source, (1, T, D) prefix
    log_probs: Callable  # (B, S, D), (B, T, D) -> (B, T) log p(y_t) of the output tokens
    logp: torch.Tensor  # (T,) the sentence's own log p(y_t)
    baselines: Callable | None = None  # choices -> ((1, S, D), (1, T, D)) to integrate from

    @property
    def output_length(self) -> int:
        """T, the number of output tokens explained."""
        return self.embeddings[1].size(1)


def baseline_ids(m: TranslationModel, ids: torch.Tensor, token: int, keep: bool) -> torch.Tensor:
    """``ids`` with every token replaced by ``token`` (specials kept where ``keep``)."""
    out = torch.full_like(ids, token)
    if keep:
        special = torch.tensor(sorted(m.special_ids()), device=ids.device)
        out = torch.where(torch.isin(ids, special), ids, out)
    return out


def embedding_task(
    m: TranslationModel,
    p: Record,
    function: Callable | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
):
    """The task of a recorded pass (one sentence): log p(y_t) of its ``out_ids`` (p(y_t)
    where ``choices`` say so), or ``function((B, T, V) log-probabilities) -> (B, T)``."""
    out = p.out_ids  # (1, T)

    def chosen(logp: torch.Tensor) -> torch.Tensor:
        picked = logp.gather(-1, out.expand(logp.size(0), -1)[..., None])[..., 0]  # (B, T)
        return picked.exp() if choices.function == "prob" else picked

    pick = function or chosen

    def log_probs(src_emb: torch.Tensor, tgt_emb: torch.Tensor) -> torch.Tensor:
        return pick(m.log_probs_from_embeddings(p.src, p.tgt_in, src_emb, tgt_emb))

    def baselines(c: GradientChoices) -> tuple[torch.Tensor, torch.Tensor]:
        if c.baseline == "zero":
            return tuple(torch.zeros_like(x) for x in pair)
        token = m.unk_id if c.baseline == "unk" else m.pad_id
        if token is None:
            raise ValueError(f"This model's tokenizer has no {c.baseline.upper()} token.")
        ids = (baseline_ids(m, x, int(token), c.keep_specials) for x in (p.src, p.tgt_in))
        return m.embeddings(*ids)  # (1, S, D), (1, T, D): those tokens' own embeddings

    pair = m.embeddings(p.src, p.tgt_in)  # (1, S, D), (1, T, D)
    plain = function is None and choices.function == "log-prob"
    with torch.no_grad():
        own = p.logp if plain else log_probs(*pair)[0]  # (T,)
    return GradientTask(pair, log_probs, own, baselines)


def _inputs(task: GradientTask) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentence's embeddings, one copy per output token: (T, S, D), (T, T, D)."""
    T = task.output_length
    src, tgt = (x.detach().expand(T, -1, -1).clone() for x in task.embeddings)
    return src.requires_grad_(), tgt.requires_grad_()


def _scores(parts, aggregation: str = "sum") -> torch.Tensor:
    """captum's attributions (T, S, D), (T, T, D) -> (T, S + T) per-token scores: their
    signed sum over D, its L2 norm, or the sum of its absolute values."""
    aggregate = {
        "sum": lambda a: a.sum(-1),
        "l2": lambda a: a.norm(dim=-1),
        "abs-sum": lambda a: a.abs().sum(-1),
    }[aggregation]
    return torch.cat([aggregate(a.float()) for a in parts], dim=1).detach()


def grad_input(task: GradientTask, choices: GradientChoices = DEFAULT_CHOICES) -> Gradients:
    """Gradient x input of every output token's log-probability (or what ``choices`` say)."""
    # captum is imported here, not above: its import takes 0.7 s (matplotlib among it), which
    # every page's first opening paid, and few ask for gradients
    from captum.attr import InputXGradient

    explainer = InputXGradient(task.log_probs)
    with torch.enable_grad():
        parts = explainer.attribute(_inputs(task), target=list(range(task.output_length)))
    return Gradients(_scores(parts, choices.aggregation))


def integrated_gradients(
    task: GradientTask, steps: int | None = None, choices: GradientChoices = DEFAULT_CHOICES
) -> Gradients:
    """Integrated gradients from the chosen baseline (zero embeddings by default), with the
    completeness error (measured on the signed sum, whatever the aggregation shown)."""
    from captum.attr import IntegratedGradients  # here: see grad_input

    log_probs = task.log_probs
    explainer = IntegratedGradients(log_probs)
    inputs = _inputs(task)
    T = task.output_length
    start = task.baselines(choices) if task.baselines else tuple(map(torch.zeros_like, inputs))
    start = tuple(b.detach().expand_as(x) for b, x in zip(start, inputs))  # (T, ., D) each
    with torch.enable_grad():
        parts, delta = explainer.attribute(
            inputs,
            baselines=start,
            target=list(range(T)),
            n_steps=steps or choices.steps,
            method=choices.rule,
            internal_batch_size=max(IG_BATCH, T),
            return_convergence_delta=True,
        )
    with torch.no_grad():
        origin = log_probs(*(b[:1] for b in start))[0]  # (T,)
        change = (task.logp - origin).abs().sum()
    error = float(delta.abs().sum() / change.clamp(min=1e-12))
    return Gradients(_scores(parts, choices.aggregation), error)
