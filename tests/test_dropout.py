"""Cheap dropout masks (core.model.dropout) and the CPU training path: the same computation.

Every speed change is checked against the plain step: the same rate and expectation as
F.dropout, the same masks from the same seed, the gradient through the same mask, and a
training step on the explicit attention path equal to SDPA's on the same batch.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.model.blocks import MultiHeadAttention
from core.model.config import ModelConfig
from core.model.dropout import LEVELS, BitsDropout, Dropout, drop_rate, dropout, keep_mask
from core.model.transformer import Transformer
from core.training.settings import add_setting_flags, settings_from_args


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_masks_drop_at_the_rate_asked(p):
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([1000, 1000]), p)
    assert keep.dtype == torch.float32 and set(keep.unique().tolist()) == {0.0, 1.0}
    assert abs(drop_rate(p) - p) <= 0.5 / LEVELS
    # 1e6 Bernoulli draws: the rate is within 5 standard deviations of 1 - p'
    sd = (p * (1 - p) / 1e6) ** 0.5
    assert abs(keep.mean().item() - (1 - drop_rate(p))) < 5 * sd


def test_the_four_uniforms_of_a_word_are_independent():
    torch.manual_seed(1)
    keep = keep_mask(torch.Size([400_000, 4]), 0.5)  # each row: one 64-bit word's 4 uniforms
    rates = keep.mean(0)  # (4,) every 16-bit lane at the rate
    assert torch.all((rates - 0.5).abs() < 0.005)
    both = (keep[:, 0] * keep[:, 1]).mean().item()  # lanes 0 and 1 together: 1/4
    assert abs(both - 0.25) < 0.005
    neighbours = (keep[:-1, 3] * keep[1:, 0]).mean().item()  # across words
    assert abs(neighbours - 0.25) < 0.005


def test_output_and_gradient_are_f_dropouts_formula_with_its_mask():
    x = torch.randn(64, 7, 32, requires_grad=True)
    torch.manual_seed(3)
    y = BitsDropout.apply(x, 0.2)
    torch.manual_seed(3)
    keep = keep_mask(x.shape, 0.2)  # the same draws
    scale = 1 / (1 - drop_rate(0.2))
    torch.testing.assert_close(y, x.detach() * keep * scale, rtol=0, atol=0)
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * keep * scale, rtol=0, atol=0)


def test_bf16_keeps_its_dtype_and_the_expectation():
    torch.manual_seed(4)
    x = torch.ones(2000, 500, dtype=torch.bfloat16)
    y = dropout(x, 0.1, training=True)
    assert y.dtype == torch.bfloat16
    assert abs(y.float().mean().item() - 1.0) < 0.01  # E[y] = x
    assert set(y.unique().tolist()) == {0.0, torch.tensor(1 / 0.9, dtype=torch.bfloat16).item()}


def test_same_seed_same_masks_and_off_when_not_training():
    x = torch.randn(10, 20)
    torch.manual_seed(5)
    a = dropout(x, 0.3, True)
    torch.manual_seed(5)
    b = dropout(x, 0.3, True)
    assert torch.equal(a, b)
    assert dropout(x, 0.3, False) is x and dropout(x, 0.0, True) is x
    state = torch.get_rng_state()  # a resumed run restores this state
    c = dropout(x, 0.3, True)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.3, True), c)


def test_bernoulli_masks_are_torchs_own():
    x = torch.randn(16, 9, 8)
    torch.manual_seed(6)
    ours = Dropout(0.25, "bernoulli").train()(x)
    torch.manual_seed(6)
    assert torch.equal(ours, F.dropout(x, 0.25, True))
    assert "masks=bernoulli" in repr(Dropout(0.25, "bernoulli"))


def test_bernoulli_attention_in_training_is_sdpas_with_its_masks():
    """dropout_masks='bernoulli' trains exactly as runs made before the bits masks."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, 0.3, "bernoulli").train()
    x = torch.randn(3, 5, 16)
    torch.manual_seed(7)
    out, _ = mha(x, x, x)
    torch.manual_seed(7)
    q, k, v = mha.project(x, x, x)
    ref = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.testing.assert_close(out, mha.W_o(mha.merge_heads(ref)), rtol=0, atol=0)


def _tiny(dropout_p=0.0, masks="bits"):
    cfg = ModelConfig(31, 29, d_model=32, num_heads=4, d_ff=48, dropout=dropout_p)
    cfg.dropout_masks = masks
    torch.manual_seed(0)
    return Transformer(cfg)


def _loss_and_grads(model, train: bool, amp: bool):
    model.train(train)
    model.zero_grad(set_to_none=True)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 31, (6, 7), generator=g)
    tgt = torch.randint(4, 29, (6, 9), generator=g)
    src[0, 5:] = tgt[1, 6:] = 0  # padding on both sides
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = model.loss(src, tgt[:, :-1], tgt[:, 1:], 0.1)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("amp", [False, True])
def test_training_step_on_the_explicit_path_equals_sdpas(amp):
    """With dropout off, train mode (explicit attention) and eval mode (SDPA) are one step."""
    model = _tiny()
    loss_explicit, grads_explicit = _loss_and_grads(model, True, amp)
    loss_sdpa, grads_sdpa = _loss_and_grads(model, False, amp)
    tol = dict(rtol=2e-2, atol=2e-2) if amp else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss_explicit, loss_sdpa, **tol)
    for name, grad in grads_explicit.items():
        torch.testing.assert_close(grad, grads_sdpa[name], **tol, msg=name)


def test_every_dropout_site_of_a_step_draws_bits_masks_replayed_from_the_seed(monkeypatch):
    """All 18 sites of a 2+2 model draw keep_mask; the same seed gives the same step."""
    model = _tiny(0.2)
    torch.manual_seed(11)
    loss_a, grads_a = _loss_and_grads(model, True, False)
    calls = []
    real = keep_mask

    def recorded(shape, p, dtype=torch.float32, device=None):
        calls.append(tuple(shape))
        return real(shape, p, dtype, device)

    monkeypatch.setattr("core.model.dropout.keep_mask", recorded)
    torch.manual_seed(11)
    loss_b, grads_b = _loss_and_grads(model, True, False)
    assert torch.equal(loss_a, loss_b)
    assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)
    # embeddings 2, encoder 2 x (attention weights + 2 AddNorm), decoder 2 x (2 + 3)
    assert len(calls) == 2 + 2 * 3 + 2 * 5


def test_dropout_masks_is_a_checked_setting_with_a_flag():
    bad = ModelConfig(10, 10, dropout_masks="coin")
    assert any("dropout_masks" in p for p in bad.problems())
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="small")
    add_setting_flags(parser)
    cfg = settings_from_args(parser.parse_args(["--dropout-masks", "bernoulli"]))
    assert cfg["model"]["dropout_masks"] == "bernoulli"
