"""Dropout whose masks cost a quarter of the random draws: 16-bit uniforms cut from 64-bit words.

On the CPU ``F.dropout`` draws one random number per element (``bernoulli_``, from a
serial Mersenne Twister): at d2l's size that was 20 % of a bf16 training step. Here one
64-bit draw gives four independent 16-bit uniforms u in [-32768, 32768), and an element
is dropped when u < round(p · 65536) − 32768, that is with probability p' = round(p · 65536)
/ 65536 (|p' − p| ≤ 7.7e-6); kept elements are scaled by 1 / (1 − p'), so the expected
output is the input, exactly as in ``F.dropout``. The same masks come from the same seed
(the draws use torch's default generator, which checkpoints save and resume restores).

``masks="bernoulli"`` is torch's own dropout, the masks of runs made before 25 November
2026 (the same seed then gives the same model). Off the CPU both are torch's own: a GPU's
fused dropout kernel is already cheap.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MASKS = ("bits", "bernoulli")  # ModelConfig.dropout_masks: how dropout draws its masks
LEVELS = 1 << 16  # a 16-bit uniform takes this many values


def drop_rate(p: float) -> float:
    """The rate the 16-bit masks drop at: p rounded to a multiple of 1 / 65536."""
    return round(p * LEVELS) / LEVELS


def keep_mask(shape: torch.Size, p: float, dtype=torch.float32, device=None) -> torch.Tensor:
    """1 (kept) with probability 1 − ``drop_rate(p)``, else 0; of ``shape`` and ``dtype``.

    Written by the comparison straight into ``dtype``: a boolean mask, then ``masked_fill``
    or a cast, takes three to seven times longer on the CPU.
    """
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)  # (ceil(n / 4),)
    words.random_(-(1 << 63), None)  # every 64-bit value equally likely
    uniforms = words.view(torch.int16)[:n].view(shape)  # (...) four per word
    keep = torch.empty(shape, dtype=dtype, device=device)
    return torch.ge(uniforms, round(p * LEVELS) - LEVELS // 2, out=keep)


class BitsDropout(torch.autograd.Function):
    """x · keep_mask / (1 − p'); the gradient through the same mask and scale."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        """x (...) -> (...)."""
        keep = keep_mask(x.shape, p, x.dtype, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - drop_rate(p))
        return x.mul(keep).mul_(ctx.scale)  # as F.dropout: input · mask · scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """d out / d x = keep · scale."""
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None


def dropout(x: torch.Tensor, p: float, training: bool, masks: str = "bits") -> torch.Tensor:
    """Dropout of rate ``p`` while training; ``masks`` picks how its masks are drawn."""
    if not training or p == 0.0:
        return x
    if masks == "bernoulli" or x.device.type != "cpu" or drop_rate(p) in (0.0, 1.0):
        return F.dropout(x, p, True)
    return BitsDropout.apply(x, p)


class Dropout(nn.Module):
    """``nn.Dropout`` with a choice of masks (see the module's docstring)."""

    def __init__(self, p: float, masks: str = "bits"):
        super().__init__()
        self.p, self.masks = p, masks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(...) -> (...)."""
        return dropout(x, self.p, self.training, self.masks)

    def extra_repr(self) -> str:
        """Shown by print(model)."""
        return f"p={self.p}, masks={self.masks}"
