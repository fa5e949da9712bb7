"""Per-layer weight and gradient norms (each metrics record) and weight and gradient
distributions (each evaluation), so a user sees a layer die or explode.

Groups: the two embeddings, each encoder and decoder layer, the output layer (a decoder-only
model: its embedding, each layer, the final norm, the output layer). Norms are
the L2 norm over all of a group's parameters (weights) and of their gradients from the
last step. Distributions are summarised as TensorBoard summarises them: the values at
TensorBoard's nine percentiles (minimum, the normal distribution's ±1.5σ, ±1σ, ±0.5σ
points, median, maximum; read from a fine histogram, as TensorBoard reads them from its
buckets), and a histogram auto-ranged to the group's own minimum and maximum
(``HIST_BINS`` equal bins) with the count, sum and sum of squares TensorBoard's histogram
record holds. Runs from before these were logged carry fixed-bin weight
histograms (``histograms``, 40 bins over [-1, 1]); the figures still read them.
"""

from __future__ import annotations

import torch
from torch import nn

# TensorBoard's distribution percentiles, in basis points (its compressed histograms).
BASIS_POINTS = (0, 668, 1587, 3085, 5000, 6915, 8413, 9332, 10000)
HIST_BINS = 20  # equal bins between a group's minimum and maximum, at each evaluation
FINE = 64  # the percentiles are read from a histogram this many times finer
SIGNIFICANT = 6  # digits kept of each logged value (a metrics record stays small)


def layer_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """The model's parameters by group, in the order of the forward pass, as the model groups
    them (``parameter_groups``: the Transformer's two embeddings, layers and output layer; a
    decoder-only trainee's embedding, layers, final norm and output layer)."""
    return model.parameter_groups()


@torch.no_grad()
def layer_norms(model: nn.Module) -> dict[str, dict[str, float]]:
    """{"weights": {group: norm}, "grads": {group: norm of the last step's gradients}}."""
    weights, grads = {}, {}
    for name, params in layer_groups(model).items():
        weights[name] = float(torch.linalg.vector_norm(torch.cat([p.flatten() for p in params])))
        gs = [p.grad.flatten() for p in params if p.grad is not None]
        if gs:
            grads[name] = float(torch.linalg.vector_norm(torch.cat(gs).float()))
    return {"weights": weights, "grads": grads}


def _short(x: float) -> float:
    """``x`` to SIGNIFICANT digits (as JSON writes it: no more)."""
    return float(f"{x:.{SIGNIFICANT}g}")


def summary(values: torch.Tensor) -> dict:
    """A distribution as TensorBoard keeps it: a histogram over [min, max] in HIST_BINS equal
    bins with the count, sum and sum of squares of the values, and the values at BASIS_POINTS
    read from a histogram FINE times finer (TensorBoard reads its percentiles from its buckets
    too): exact at 0 and 100 %, within (max − min) / (HIST_BINS · FINE) between. One pass
    over the values, no sort (a sort of 8 M weights took a second at every evaluation)."""
    v = values.detach().flatten().float().cpu()  # (n,)
    lo, hi = float(v.min()), float(v.max())
    n = len(v)
    if hi > lo:
        fine = torch.histc(v, bins=HIST_BINS * FINE, min=lo, max=hi).double()  # (bins * FINE,)
        counts = fine.view(HIST_BINS, FINE).sum(dim=1)  # (HIST_BINS,)
        points = _percentiles(fine, lo, hi, n)
    else:  # one value
        counts, points = torch.tensor([float(n)]), [lo] * len(BASIS_POINTS)
    return {
        "percentiles": [_short(p) for p in points],
        "counts": [int(c) for c in counts.round().tolist()],
        "num": n,
        "sum": _short(float(v.sum(dtype=torch.float64))),
        "sum_squares": _short(float(v.square().sum(dtype=torch.float64))),
    }


def _percentiles(fine: torch.Tensor, lo: float, hi: float, n: int) -> list[float]:
    """The values at BASIS_POINTS of a fine histogram over [lo, hi] of n values, linear
    within the bin each falls in; exactly lo and hi at 0 and 100 %."""
    width = (hi - lo) / len(fine)
    below = torch.cumsum(fine, 0) - fine  # (bins,) values before each bin
    out = []
    for bp in BASIS_POINTS:
        if bp in (0, 10_000):
            out.append(lo if bp == 0 else hi)
            continue
        rank = bp / 10_000 * n
        b = int(torch.searchsorted(below + fine, torch.tensor(rank, dtype=fine.dtype)))
        b = min(b, len(fine) - 1)
        inside = (rank - float(below[b])) / max(float(fine[b]), 1.0)
        out.append(lo + width * (b + min(max(inside, 0.0), 1.0)))
    return out


@torch.no_grad()
def distributions(model: nn.Module) -> dict:
    """{"weights": {group: summary}, "grads": {group: summary of the last step's gradients}}
    (a group without gradients is left out of "grads")."""
    weights, grads = {}, {}
    for name, params in layer_groups(model).items():
        weights[name] = summary(torch.cat([p.detach().float().flatten() for p in params]))
        gs = [p.grad.detach().float().flatten() for p in params if p.grad is not None]
        if gs:
            grads[name] = summary(torch.cat(gs))
    return {"weights": weights, "grads": grads}
