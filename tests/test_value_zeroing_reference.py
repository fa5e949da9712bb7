"""Value zeroing (core.attribution.value_zeroing) against its definition (Mohebbi et al. 2023).

The authors' code (github.com/hmohebbi/ValueZeroing, scoring/value_zeroing.py and
modeling/customized_modeling_bert.py) runs one layer per token j, from the previous layer's
original output, with j's projected value vectors (bias included) set to zero in every head,
and scores C_ij = cosine distance between the layer's output (FFN and norms included) with and
without the zeroing; rows are normalised to sum to 1. Here: (a) a layer whose attention reads
one key only gives the answer known in advance; (b) a reference written from the definition,
one pass of the model's own layer per zeroed token through forward hooks, matches the
batched implementation for encoder layers and decoder layers (self- and cross-attention).

Shape key: S source tokens, T decoder steps, D model width.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.attribution import value_zeroing
from core.model.transformer import Transformer
from tests import helpers
from tests.helpers import toy_model_config

SRC, OUT = [4, 5, 6, 7, 8, 2], [5, 6, 7, 2]  # a toy sentence (<eos> = 2) and its "translation"


def shaken(norm_first: bool) -> Transformer:
    """A seeded toy model in float64, weights large enough that every zeroing moves y well
    above rounding, norms and biases far from their initial 1 and 0."""
    torch.manual_seed(5)
    model = Transformer(toy_model_config(norm_first=norm_first)).double().eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.mul_(3.0)
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.Linear)):
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
    return model


# ----------------------------------------------------------------------------- (a) known answer


def one_key_layer(key: int):
    """A post-LN model (D = 16, 4 heads), its first encoder layer and an input x (1, 5, D)
    whose every query puts all its weight on token ``key`` in every head: softmax of 0 vs 1e4
    is exactly 0."""
    torch.manual_seed(0)
    model = Transformer(toy_model_config(norm_first=False)).eval()
    layer, D = model.encoder.layers[0], model.cfg.d_model
    x = torch.randn(1, 5, D, generator=torch.Generator().manual_seed(1))
    x[0, :, 0] = 0.0
    x[0, key, 0] = 1.0  # only the key token has a first coordinate
    with torch.no_grad():
        mha = layer.attention
        mha.W_q.weight.zero_()
        mha.W_q.bias.fill_(1e4)  # every query: 1e4 in every coordinate
        mha.W_k.weight.zero_()
        mha.W_k.weight[:, 0] = 1.0  # key j: x_j[0] in every coordinate
        mha.W_k.bias.zero_()
    return model, layer, x


@pytest.mark.parametrize("key", [0, 3])
def test_a_layer_reading_one_key_gives_all_its_mixing_to_that_key(key):
    model, layer, x = one_key_layer(key)
    mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    _, w = layer(x, mask, need_weights=True)
    assert torch.equal(w[0, :, :, key], torch.ones(4, 5))  # the premise: one key, exactly
    m = helpers.encoder_matrix_at(helpers.studio_adapter(model), x)  # (S, S)
    expected = torch.zeros(5, 5)
    expected[:, key] = 1.0  # zeroing any other token's values leaves every output as it was
    torch.testing.assert_close(m, expected, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- (b) reference


def layer_inputs(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> dict:
    """The arguments every encoder and decoder layer is called with in the model's own
    forward, caught by pre-hooks: {"encoder": [(x, mask)], "decoder": [(x, memory, ...)]}."""
    seen: dict = {"encoder": [], "decoder": []}
    hooks = [
        layer.register_forward_pre_hook(lambda m, args, side=side: seen[side].append(args))
        for side, stack in (("encoder", model.encoder), ("decoder", model.decoder))
        for layer in stack.layers
    ]
    try:
        with torch.no_grad():
            model(src, tgt_in)
    finally:
        for h in hooks:
            h.remove()
    return seen


def zeroing_token(mha, j: int):
    """Hooks on ``mha`` for one pass: its values go through W_v on their own (a copy of the
    values tensor, so the model cannot stack W_v with W_k), and W_v's output (B, Tk, D), bias
    included, has token j's row zeroed: token j's value vector in every head."""

    def unstacked(module, args):
        queries, keys, values, *rest = args
        return (queries, keys, values.clone(), *rest)

    def zero(module, args, out):
        out = out.clone()
        out[:, j] = 0.0
        return out

    return [mha.register_forward_pre_hook(unstacked), mha.W_v.register_forward_hook(zero)]


def output_without(layer, args, mha=None, j: int | None = None) -> torch.Tensor:
    """The layer's own forward on ``args``, token j's values in ``mha`` zeroed: (T, D)."""
    hooks = [] if mha is None else zeroing_token(mha, j)
    try:
        with torch.no_grad():
            return layer(*args)[0][0]
    finally:
        for h in hooks:
            h.remove()


def distances(layer, args, mha, n: int) -> torch.Tensor:
    """(T, n) cosine distance between the layer's output and its output with token j's
    values zeroed, one pass per j."""
    base = output_without(layer, args)  # (T, D)
    moved = [output_without(layer, args, mha, j) for j in range(n)]
    return torch.stack([1 - F.cosine_similarity(base, y, dim=-1) for y in moved], dim=1)


def rows_of(scores: torch.Tensor) -> torch.Tensor:
    """Rows of non-negative scores (T, n) divided by their sums."""
    return scores / scores.sum(1, keepdim=True)


def reference(model: Transformer):
    """Every layer's value-zeroing matrix, from the definition: encoder (S, S) each, decoder
    (T, T + S) each (later decoder tokens 0: a query never reads them)."""
    src, out = torch.tensor([SRC]), torch.tensor([OUT])
    tgt_in = torch.cat([torch.ones(1, 1, dtype=torch.long), out[:, :-1]], 1)  # <bos> = 1
    seen = layer_inputs(model, src, tgt_in)
    S, T = src.size(1), tgt_in.size(1)
    encoder = [
        rows_of(distances(layer, args, layer.attention, S))
        for layer, args in zip(model.encoder.layers, seen["encoder"])
    ]
    decoder = []
    for layer, args in zip(model.decoder.layers, seen["decoder"]):
        own = distances(layer, args, layer.self_attention, T) * torch.ones(T, T).tril()
        source = distances(layer, args, layer.cross_attention, S)  # (T, S)
        decoder.append(rows_of(torch.cat([own, source], dim=1)))
    return encoder, decoder


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_the_batched_matrices_equal_zeroing_one_token_per_pass(norm_first):
    model = shaken(norm_first)
    m = helpers.studio_adapter(model)
    encoder, decoder = value_zeroing.value_zeroing_steps(m, m.forced(SRC, OUT))
    want_encoder, want_decoder = reference(model)
    T = len(OUT)
    assert len(encoder) == len(want_encoder) and len(decoder) == len(want_decoder)
    for got, want in zip(encoder, want_encoder):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for step, want in zip(decoder, want_decoder):
        torch.testing.assert_close(step.prefix, want[:, :T], rtol=0, atol=1e-5)
        torch.testing.assert_close(step.source, want[:, T:], rtol=0, atol=1e-5)
    every = [*encoder, *(torch.cat([s.prefix, s.source], 1) for s in decoder)]
    assert all(float(m.max()) < 0.99 for m in every)  # the rows spread: not a trivial match
