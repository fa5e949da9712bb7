"""Batched products in the CPU's faster layout (issue 67, item 2: integrated gradients' speed):
the same products and gradients as ``torch.matmul``'s, and the gradient methods' figures with
them equal to the figures without, on every family of the conformance suite and the studio's
model."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch

from core.attribution import products
from core.attribution.gradients import GradientChoices
from core.attribution.methods import attribute, method_problem
from core.attribution.products import NarrowProducts, Product
from core.model.parts import DecodeSettings
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import LM_FAMILIES
from tests.test_batched_gradients import model_of

SHAPES = (  # (a, b): a narrow result (attention's P @ V), a wide one (q k^T), three dimensions
    ((2, 3, 9, 9), (2, 3, 9, 4)),
    ((2, 3, 9, 4), (2, 3, 4, 9)),
    ((5, 6, 7), (5, 7, 2)),
)


@pytest.mark.parametrize("shapes", SHAPES)
def test_product_and_its_gradients_equal_matmul(shapes):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    out = Product.apply(a, b)
    want = torch.matmul(a, b)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert out.is_contiguous()
    grad = torch.randn(want.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(out, (a, b), grad)
    for x, y in zip(got, torch.autograd.grad(want, (a, b), grad)):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(Product.apply, (a, b))


def test_the_mode_routes_batched_products_only():
    a, b = torch.randn(2, 3, 5, 4, requires_grad=True), torch.randn(2, 3, 4, 2)
    with NarrowProducts():
        assert type((a @ b).grad_fn).__name__ == "ProductBackward"
        assert type(torch.matmul(a, b).grad_fn).__name__ == "ProductBackward"
        broadcast = torch.matmul(a, torch.randn(4, 2))  # a broadcast operand: as it was
        assert type(broadcast.grad_fn).__name__ != "ProductBackward"
        assert torch.matmul(a[0, 0], b[0, 0]).grad_fn is not None  # two dimensions: as it was
    assert type((a @ b).grad_fn).__name__ != "ProductBackward"  # only within the block


@pytest.mark.parametrize("family", ["studio", *CONFORMANCE, *LM_FAMILIES])
def test_gradient_methods_give_the_figures_of_plain_products(
    family, tiny_model, hf_loaded, lm_loaded
):
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    method = "integrated-gradients"  # gradient × input where a model refuses it (T5, Gemma 2):
    if method_problem(m, method):  # the same passes at one point
        method = "grad-input"
    t = m.force(*pairs[1], DecodeSettings())
    choices = GradientChoices(steps=3)
    with mock.patch.object(Product, "apply", wraps=Product.apply) as used:
        got = attribute(m, t.src_ids, t.out_ids, method, choices=choices)
    with mock.patch.object(products, "_batched_pair", lambda args: False):
        plain = attribute(m, t.src_ids, t.out_ids, method, choices=choices)
    if family in ("marian", "bart", "gpt2", "llama"):  # eager attention's matmul (the studio's
        assert used.call_count > 0  # own model runs its fused attention when it reads no map)
    np.testing.assert_allclose(got.raw, plain.raw, atol=1e-5, rtol=1e-4)
    rows = np.abs(plain.raw).sum(-1) >= 1e-3  # (T,) rows of a scale to normalise
    np.testing.assert_allclose(
        got.contributions[rows], plain.contributions[rows], atol=1e-5, rtol=1e-4
    )
