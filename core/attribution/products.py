"""Batched matrix products in the layout the CPU runs fastest, for the gradient passes.

Attention's products with a narrow result, P @ V and, in the backward pass, dS @ K and
P^T @ dO ((.., N, N) @ (.., N, Dh), Dh a head's width), run two to three times slower on a
CPU's batched GEMM than the same product transposed, (V^T @ P^T)^T (a 2-core AMD EPYC, one
thread: 2.6 ms against 1.3 ms for 200 products of 128 x 128 by 128 x 8). ``NarrowProducts``
is a ``torch.overrides.TorchFunctionMode`` under which every batched ``matmul`` of two
tensors with the same batch dimensions (the attention of every family: eager attention's
``torch.matmul``, the studio's ``@``) goes through ``Product``, whose forward and backward
products each take the faster of the two layouts. The sums are the same; only their order
within a product changes (float32 rounding, about 1e-7 of the value).

Shape key: (..., m, k) @ (..., k, n) -> (..., m, n).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}


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


class NarrowProducts(TorchFunctionMode):
    """Within the block, batched matrix products go through ``Product`` (see the module)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in MATMULS and not kwargs and _batched_pair(args):
            return Product.apply(*args)
        return func(*args, **kwargs)
