"""The training loss of the output layer: projection to the vocabulary fused with cross-entropy.

At d2l's size (D = 256, FFN 64, V about 10k) the output projection and its loss are the
largest work of a training step, and the (N, V) logits its largest tensor. Written the
usual way (``F.cross_entropy(dense(h).float(), y, label_smoothing=eps)``), autograd makes
up to six more (N, V) tensors and passes over each: the float copy, the log-probabilities,
and in the backward the NLL's zeros, their sum with the smoothing term's gradient, the
log-softmax gradient and its cast back. Here the logits are made once, turned in place, a
few cache-sized rows at a time, into their own gradient while the loss is taken, and then
read by the two backward products only: the same loss and gradients, to float rounding.

Shape key: N real target tokens (N' padded, see ``padded_rows``), D model width, V target
vocabulary, C rows of a chunk.
"""

from __future__ import annotations

import torch
from torch import nn

CHUNK_ROWS = 64  # rows of logits per chunk: 64 x 10k float32 (2.5 MB) stay in L2 cache
ROW_BLOCK = 64  # the products run on a multiple of this many rows (see padded_rows)


def padded_rows(x: torch.Tensor) -> torch.Tensor:
    """(N, D) -> (N', D): zero rows added up to a multiple of ROW_BLOCK.

    Every batch has its own number N of real target tokens. On the CPU, oneDNN keeps a
    compiled kernel per matrix shape (up to 1,024 of them), so a bf16 product over exactly
    N rows grew a training process by about 2 GB within a few hundred steps; over a
    multiple of 64 rows a few dozen shapes recur.
    """
    extra = -x.size(0) % ROW_BLOCK
    return torch.cat([x, x.new_zeros(extra, x.size(1))]) if extra else x  # (N', D)


def cross_entropy_grad_(
    logits: torch.Tensor, bias: torch.Tensor, target: torch.Tensor, smoothing: float
):
    """Per-row label-smoothed cross-entropy of logits (N, V) + bias (V,); they become its gradient.

    Returns the (N,) float32 losses of ``F.cross_entropy((logits + bias).float(), target,
    label_smoothing=smoothing, reduction="none")`` and the (V,) float32 column sums of the
    gradient (the bias's); ``logits`` then hold d mean(losses) / d logits, that is
    (softmax - (1 - eps) one_hot - eps / V) / N, in their own dtype. The bias is added
    here, in cache, rather than by the product: a bf16 addmm first writes the bias into all
    (N, V) outputs, which here takes longer than the product itself.
    """
    N, V = logits.shape
    f32 = dict(dtype=torch.float32, device=logits.device)
    top, z_y, z_mean, total = torch.empty(4, N, 1, **f32)  # per row: max, z[y], mean, sum
    to_target = torch.full((min(N, CHUNK_ROWS), 1), (smoothing - 1.0) / N, **f32)  # (C, 1)
    column_sums = torch.zeros(V, **f32)  # (V,)
    for rows in (slice(i, i + CHUNK_ROWS) for i in range(0, N, CHUNK_ROWS)):
        z, y = logits[rows], target[rows, None]  # (C, V) view, (C, 1)
        work = (z if z.dtype == torch.float32 else z.float()).add_(bias)  # (C, V) float32
        torch.amax(work, -1, keepdim=True, out=top[rows])
        torch.gather(work, 1, y, out=z_y[rows])
        torch.mean(work, -1, keepdim=True, out=z_mean[rows])
        p = work.sub_(top[rows]).exp_()  # (C, V) softmax times its normaliser
        torch.sum(p, -1, keepdim=True, out=total[rows])
        p.div_(total[rows] * N).scatter_add_(1, y, to_target[: len(y)])  # (C, V)
        column_sums += p.sum(0)  # (V,)
        torch.sub(p, smoothing / (V * N), out=z)  # (C, V) the gradient, in the logits' dtype
    nll = top + total.log() - z_y  # (N, 1) logsumexp - z[y]
    losses = (nll - smoothing * (z_mean - z_y)).squeeze(1)  # (N,)
    return losses, column_sums - smoothing / V


class ProjectedCrossEntropy(torch.autograd.Function):
    """Mean label-smoothed cross-entropy of ``hidden @ weight.T + bias`` against ``target``.

    Under autocast the products run in its dtype and the bias and softmax in float32, as
    ``F.cross_entropy(dense(hidden).float(), ...)`` does (up to where bf16 rounds).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, smoothing):
        """hidden (N, D), weight (V, D), bias (V,), target (N,) ids -> mean loss ()."""
        kind = hidden.device.type
        amp = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
        N = hidden.size(0)
        h = padded_rows(hidden.to(amp or hidden.dtype))  # (N', D) in the products' dtype
        w = weight.to(h.dtype)  # (V, D)
        logits = h @ w.t()  # (N', V), the bias comes in the loss's pass; 0 on padding rows
        losses, d_bias = cross_entropy_grad_(logits[:N], bias.float(), target, smoothing)
        ctx.save_for_backward(h, w, logits, d_bias)  # logits now hold their gradient
        ctx.dtypes, ctx.rows = (hidden.dtype, weight.dtype, bias.dtype), N
        return losses.mean()

    @staticmethod
    def backward(ctx, grad_loss):
        """Gradients of hidden (N, D), weight (V, D) and bias (V,) from the stored one."""
        h, w, grad_logits, d_bias = ctx.saved_tensors  # (N', D), (V, D), (N', V), (V,)
        hidden_dtype, weight_dtype, bias_dtype = ctx.dtypes
        N = ctx.rows
        d_hidden = d_weight = None
        if ctx.needs_input_grad[0]:
            d_hidden = (grad_logits @ w)[:N].to(hidden_dtype) * grad_loss  # (N, D)
        if ctx.needs_input_grad[1]:
            d_weight = (grad_logits.t() @ (h * grad_loss)).to(weight_dtype)  # (V, D)
        return d_hidden, d_weight, (d_bias * grad_loss).to(bias_dtype), None, None


def projected_cross_entropy(
    hidden: torch.Tensor, dense: nn.Linear, target: torch.Tensor, smoothing: float = 0.0
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy of ``dense(hidden)``; hidden (N, D), target (N,)."""
    return ProjectedCrossEntropy.apply(hidden, dense.weight, dense.bias, target, smoothing)
