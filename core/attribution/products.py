"""Batched matrix products and short softmax rows the way the CPU runs them fastest, for the
gradient passes.

Attention's products with a narrow result, P @ V and, in the backward pass, dS @ K and
P^T @ dO ((.., N, N) @ (.., N, Dh), Dh a head's width), run two to three times slower on a
CPU's batched GEMM than the same product transposed, (V^T @ P^T)^T (a 2-core AMD EPYC, one
thread: 2.6 ms against 1.3 ms for 200 products of 128 x 128 by 128 x 8). ``NarrowProducts``
is a ``torch.overrides.TorchFunctionMode`` under which every batched ``matmul`` of two
tensors with the same batch dimensions (the attention of every family: eager attention's
``torch.matmul``, the studio's ``@``) goes through ``Product``, whose forward and backward
products each take the faster of the two layouts. The sums are the same; only their order
within a product changes (float32 rounding, about 1e-7 of the value). ``Product`` keeps its
operands contiguous, copied once by the forward pass (eager attention hands it transposed
views) rather than by each of the output steps' backward passes that read them (8 % of
tiny Marian's whole-file integrated gradients).

PyTorch's CPU softmax runs rows shorter than its vector width (16 floats with AVX-512) one
float at a time: over (1024, 4, 15) scores its forward and backward take 5 and 20 times as
long as over rows of 16 (1.9 ms against 0.3 ms forward, the same AMD EPYC), and a short
pair's attention rows are that short (about 15 keys). Under the mode a float32 softmax over
a last dimension of fewer than ``SHORT_ROW`` floats on the CPU goes through ``ShortSoftmax``:
the same function written out (max, exp, sum, divide; backward y (g - Σ g y)), four to five
times faster there, equal within float32's rounding (about 2e-7).

Shape key: (..., m, k) @ (..., k, n) -> (..., m, n); softmax over (..., k).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}
SOFTMAXES = {torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax}
SHORT_ROW = 16  # PyTorch's CPU softmax is vectorised over rows of at least this many floats


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(..., m, k) @ (..., k, n), as (b^T @ a^T)^T where the result is narrower than tall
    (n < m: the CPU's batched GEMM is slow on a narrow result)."""
    if b.size(-1) < a.size(-2):
        return torch.matmul(b.transpose(-2, -1), a.transpose(-2, -1)).transpose(-2, -1)
    return torch.matmul(a, b)


class Product(torch.autograd.Function):
    """a @ b whose forward and backward products each take ``bmm``'s layout."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()  # copied once: every step's backward reads them
        ctx.save_for_backward(a, b)
        return bmm(a, b).contiguous()  # (..., m, n)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, b = ctx.saved_tensors
        da = bmm(grad, b.transpose(-2, -1)) if ctx.needs_input_grad[0] else None  # (., m, k)
        db = bmm(a.transpose(-2, -1), grad) if ctx.needs_input_grad[1] else None  # (., k, n)
        return da, db


def _batched_pair(args) -> bool:
    """Whether ``args`` are two float tensors of at least 3 dimensions with the same batch
    dimensions (no broadcasting: ``Product`` gives no gradient of a broadcast operand)."""
    if len(args) != 2 or not all(isinstance(x, torch.Tensor) for x in args):
        return False
    a, b = args
    return (
        a.dim() == b.dim() >= 3
        and a.shape[:-2] == b.shape[:-2]
        and a.dtype == b.dtype
        and a.is_floating_point()
    )


class ShortSoftmax(torch.autograd.Function):
    """softmax over the last dimension, written out (fast on the CPU for short rows)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        e = (x - x.amax(-1, keepdim=True)).exp_()  # (..., k)
        y = e.div_(e.sum(-1, keepdim=True))  # (..., k)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return (grad - (grad * y).sum(-1, keepdim=True)).mul_(y)  # (..., k)


def _short_rows(args, kwargs) -> torch.Tensor | None:
    """The input of a softmax call (``torch.softmax``, ``F.softmax``, ``Tensor.softmax``)
    that ``ShortSoftmax`` computes as asked: float32 on the CPU, over a last dimension of
    fewer than SHORT_ROW floats, no other dtype asked; else None."""
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(x, torch.Tensor) or not isinstance(dim, int) or x.dim() == 0:
        return None
    short = x.dtype == torch.float32 and x.device.type == "cpu" and x.size(-1) < SHORT_ROW
    last = dim in (-1, x.dim() - 1) and kwargs.get("dtype") in (None, torch.float32)
    return x if short and last and len(args) <= 2 else None


class NarrowProducts(TorchFunctionMode):
    """Within the block, batched matrix products go through ``Product`` and short softmax
    rows through ``ShortSoftmax`` (see the module)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in MATMULS and not kwargs and _batched_pair(args):
            return Product.apply(*args)
        if func in SOFTMAXES and (x := _short_rows(args, kwargs)) is not None:
            return ShortSoftmax.apply(x)
        return func(*args, **kwargs)
