"""Batched products in the CPU's faster layout and short softmax rows written out (issue 67,
item 2: integrated gradients' speed): the same products, softmax and gradients as
``torch.matmul``'s and ``torch.softmax``'s, and the gradient methods' figures with them equal
to the figures without, alone and in the file mode's batches, on every family of the
conformance suite and the studio's model."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch

from core.attribution import products
from core.attribution.batched_gradients import attributions
from core.attribution.gradients import GradientChoices
from core.attribution.methods import attribute, method_problem
from core.attribution.products import SHORT_ROW, NarrowProducts, Product, ShortSoftmax
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


@pytest.mark.parametrize("shape", [(3, 4, 7, 15), (5, 1), (2, 9, 9)])
def test_short_softmax_and_its_gradient_equal_torch_softmax(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    x.data[..., 0] = -1e9  # a masked key, as attention masks add
    out, want = ShortSoftmax.apply(x), torch.softmax(x, -1)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    grad = torch.randn(shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(out, x, grad)[0]
    torch.testing.assert_close(got, torch.autograd.grad(want, x, grad)[0], rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(ShortSoftmax.apply, (x.detach()[..., :4].requires_grad_(),))


def test_the_mode_routes_short_float32_softmax_rows_only():
    short = torch.randn(2, 3, 5, SHORT_ROW - 1, requires_grad=True)
    routed = "ShortSoftmaxBackward"
    with NarrowProducts():
        for y in (
            torch.softmax(short, -1),
            torch.nn.functional.softmax(short, dim=-1),
            torch.nn.functional.softmax(short, dim=3, dtype=torch.float32),  # Llama's call
            short.softmax(dim=-1),
        ):
            assert type(y.grad_fn).__name__ == routed
            torch.testing.assert_close(y, torch.softmax(short, -1), rtol=0, atol=1e-6)
        long = torch.randn(2, SHORT_ROW, requires_grad=True)
        assert type(long.softmax(-1).grad_fn).__name__ != routed  # vectorised: as it was
        assert type(short.softmax(1).grad_fn).__name__ != routed  # not the last dimension
        assert type(short.double().softmax(-1).grad_fn).__name__ != routed  # not float32
        halved = torch.nn.functional.softmax(short, dim=-1, dtype=torch.float64)
        assert type(halved.grad_fn).__name__ != routed  # another dtype asked
    assert type(short.softmax(-1).grad_fn).__name__ != routed  # only within the block


def without_short_rows():
    """A context in which the mode leaves every softmax as it was (the code before)."""
    return mock.patch.object(products, "_short_rows", lambda args, kwargs: None)


@pytest.mark.parametrize("family", ["studio", *CONFORMANCE, *LM_FAMILIES])
def test_short_softmax_rows_give_the_figures_of_torch_softmax(
    family, tiny_model, hf_loaded, lm_loaded
):
    """In the file mode's batches (``batched_gradients.attributions``; a pair alone runs the
    same mode), the gradient methods' figures with short rows written out equal those with
    ``torch.softmax``."""
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    method = "integrated-gradients"
    if method_problem(m, method):  # T5, Gemma 2: the same passes at one point
        method = "grad-input"
    ts = [m.force(s, o, DecodeSettings()) for s, o in pairs]
    ids = [(list(t.src_ids), list(t.out_ids)) for t in ts]
    choices = GradientChoices(steps=3)
    with mock.patch.object(ShortSoftmax, "apply", wraps=ShortSoftmax.apply) as used:
        batched = attributions(m, ids, method, choices)
    with without_short_rows():
        before = attributions(m, ids, method, choices)
    if family in ("marian", "bart"):  # eager attention over rows of fewer than 16 keys
        assert used.call_count > 0
    for got, want in zip(batched, before):
        np.testing.assert_allclose(got.raw, want.raw, atol=1e-5, rtol=1e-4)
        rows = np.abs(want.raw).sum(-1) >= 1e-3  # (T,) rows of a scale to normalise
        np.testing.assert_allclose(
            got.contributions[rows], want.contributions[rows], atol=1e-5, rtol=1e-4
        )
