"""Saliency, DeepLIFT and GradientSHAP at the token embeddings, through captum (inseq's
``saliency``, ``deeplift`` and ``gradient_shap``).

Each explains f_t (log p(y_t) by default, ``GradientChoices.function``) of every output step
as a function of the token embeddings, on the embeddings path the other gradient methods use
(``core.attribution.gradients.GradientTask``): a torch module (``StepFunction``) wraps the
task with the model inside it, and captum's own classes attribute it, a group of output
steps per call (one batch row per step, each row's target its own step).

- **saliency** (Simonyan et al. 2014): |∂f_t / ∂e| per embedding dimension (captum's
  ``Saliency``, ``abs=True`` as inseq calls it), then reduced over the width as chosen;
  inseq's reduction is the L2 norm (``aggregation="l2"``). No baseline, no sign.
- **deeplift** (Shrikumar et al. 2017): captum's ``DeepLift`` (the rescale rule) from the
  chosen baseline (zero embeddings by default; random baselines averaged over their draws).
  Its rules act on the model's ``nn.ReLU``/``nn.Softmax``/... modules only; every other
  non-linearity (GELU, SiLU, a functional ReLU, layer norms, attention's products) passes
  its plain gradient, so on these transformers the scores do not sum exactly to
  f(e) - f(b): ``completeness`` reports how far they are.
- **gradient-shap** (Lundberg & Lee 2017): captum's ``GradientShap``: ``steps`` samples, each
  a baseline drawn from the chosen one(s) and a uniform point on the path to e, the noise
  ``stdevs`` 0 (captum's and inseq's default). Its draws are seeded (torch, numpy and
  Python's ``random`` at ``SEED``, each generator's state restored after), so a result is
  the same each time.

Shape key: S source tokens, T output tokens, D model width, g output steps of a group, K
baselines.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from captum.attr import DeepLift, GradientShap, Saliency
from torch import nn

from core.attribution.gradients import (
    DEFAULT_CHOICES,
    GROUP,
    GradientChoices,
    Gradients,
    GradientTask,
    _scores,
)
from core.measure.progress import check_time

CAPTUM_METHODS = ("saliency", "deeplift", "gradient-shap")
SEED = 0  # GradientSHAP's draws
SHAP_GROUP = 1  # output steps per GradientSHAP call: its rows are steps x samples


class StepFunction(nn.Module):
    """f at a group of output steps as a module of the token embeddings, the model inside
    (so captum's DeepLIFT finds the model's own non-linear modules): (N, S, D), (N, T', D)
    -> (N, g)."""

    def __init__(self, task: GradientTask, net: nn.Module, steps: torch.Tensor):
        super().__init__()
        self.net, self.task, self.steps = net, task, steps

    def forward(self, src_emb: torch.Tensor, tgt_emb: torch.Tensor) -> torch.Tensor:
        """(N, g) f at each of the group's steps of every row."""
        return torch.stack(self.task.at(src_emb, tgt_emb, self.steps), 1)  # (N, g)


@contextmanager
def seeded(seed: int = SEED) -> Iterator[None]:
    """A context where torch's CPU generator, numpy's and Python's global generators start
    at ``seed``; each one's state is restored after (captum draws from all three)."""
    state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(state)
            random.setstate(py_state)


Attribute = Callable[[nn.Module, tuple, list[int], int], tuple]  # f, inputs, targets, cut


def by_groups(task: GradientTask, net: nn.Module, attribute: Attribute, size: int = GROUP):
    """Per-dimension attributions (T, S, D), (T, T, D) of every step's f, ``attribute``
    called on ``size`` steps at a time (one row each, the prefix cut after the last)."""
    src, tgt = (x.detach() for x in task.embeddings)  # (1, S, D), (1, T, D)
    T = task.output_length
    total = [src.new_zeros(T, *src.shape[1:]), tgt.new_zeros(T, *tgt.shape[1:])]
    for lo in range(0, T, size):
        check_time()  # a shared server's limit for one heavy job, where one is set
        group = list(range(lo, min(T, lo + size)))
        g, cut = len(group), group[-1] + 1
        f = StepFunction(task, net, torch.tensor(group, device=src.device))
        inputs = tuple(  # (g, S, D), (g, cut, D): one row per step
            x.expand(g, -1, -1).clone().requires_grad_() for x in (src, tgt[:, :cut])
        )
        a_src, a_tgt = attribute(f, inputs, list(range(g)), cut)  # (g, S, D), (g, cut, D)
        total[0][group] = a_src.detach()
        total[1][group, :cut] = a_tgt.detach()
    return total


def saliency(task: GradientTask, net: nn.Module, choices: GradientChoices = DEFAULT_CHOICES):
    """|∇f_t(e)| of every step, reduced over D as chosen."""

    def grads(f, inputs, targets, cut):
        return Saliency(f).attribute(inputs, target=targets, abs=True)

    return Gradients(_scores(by_groups(task, net, grads), choices.aggregation))


def _completeness(task: GradientTask, parts, starts) -> float:
    """sum |delta_t| / sum |change_t|: how far the rows' signed sums are from f(e) minus f
    at the baselines (their mean)."""
    with torch.no_grad():
        origin = sum(task.log_probs(*b)[0] for b in starts) / len(starts)  # (T,)
    change = task.logp - origin  # (T,)
    delta = _scores(parts).sum(-1) - change  # (T,)
    return float(delta.abs().sum() / change.abs().sum().clamp(min=1e-12))


def deeplift(task: GradientTask, net: nn.Module, choices: GradientChoices = DEFAULT_CHOICES):
    """DeepLIFT (captum's rescale rule) of every step from the chosen baseline(s), the mean
    over random draws; with its completeness error."""
    starts = task.baselines(choices)
    parts = None
    for b_src, b_tgt in starts:

        def lift(f, inputs, targets, cut, b_src=b_src, b_tgt=b_tgt):
            g = len(targets)
            bases = (b_src.expand(g, -1, -1), b_tgt[:, :cut].expand(g, -1, -1))
            with warnings.catch_warnings():  # captum says it hooks the non-linear modules
                warnings.filterwarnings("ignore", message="Setting forward, backward hooks")
                return DeepLift(f).attribute(inputs, baselines=bases, target=targets)

        done = by_groups(task, net, lift)
        parts = done if parts is None else [a + b for a, b in zip(parts, done)]
    parts = [a / len(starts) for a in parts]  # (T, ., D) each
    return Gradients(_scores(parts, choices.aggregation), _completeness(task, parts, starts))


def gradient_shap(task: GradientTask, net: nn.Module, choices: GradientChoices = DEFAULT_CHOICES):
    """GradientSHAP of every step: ``choices.steps`` seeded samples from the chosen
    baseline(s) (K of them: the random draws, or the one baseline); with its completeness
    error (the expected value's: it holds on average over the samples)."""
    starts = task.baselines(choices)
    pool = [torch.cat([b[i] for b in starts]) for i in (0, 1)]  # (K, S, D), (K, T, D)

    def shap(f, inputs, targets, cut):
        bases = (pool[0], pool[1][:, :cut])
        return GradientShap(f).attribute(
            inputs, baselines=bases, n_samples=choices.steps, stdevs=0.0, target=targets
        )

    with seeded():
        parts = by_groups(task, net, shap, SHAP_GROUP)
    return Gradients(_scores(parts, choices.aggregation), _completeness(task, parts, starts))


CAPTUM = {"saliency": saliency, "deeplift": deeplift, "gradient-shap": gradient_shap}


def captum_gradients(
    task: GradientTask, net: nn.Module, method: str, choices: GradientChoices = DEFAULT_CHOICES
) -> Gradients:
    """One of CAPTUM_METHODS on a task; ``net``: the model's torch module (``model``)."""
    return CAPTUM[method](task, net, choices)
