"""ALTI's decomposition of a Hugging Face encoder-decoder (core.attribution.terms over a
recorded pass, core.model.record): every sub-layer's terms sum to its real output, pre-LN and
post-LN as the pass itself shows them, and the norm-based method and ALTI+ give rows as the
studio's model does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from core.attribution.methods import AttributionError, attribute, method_problem
from core.attribution.terms import TermsError, sublayer_terms
from core.attribution.value_zeroing import value_zeroing_steps
from core.model.hf_model import load
from core.model.parts import DecodeSettings, SublayerNorm
from core.model.record import KINDS
from core.model.sites import attention_modules, layers_of, projections
from tests.hf_tiny import FAMILIES

PRE_LN = {"marian": False, "bart": False, "t5": True, "m2m_100": True}


def pass_of(hm) -> tuple[list[int], list[int]]:
    """(source ids, output ids) of the model's own greedy translation of a test sentence."""
    settings = DecodeSettings(max_len=6, target_lang=hm.language_code("fr") or "")
    t = hm.translate("the boy is tall .", settings)
    return t.src_ids, t.out_ids


def stack_of(hm, kind: str) -> nn.Module:
    """The encoder or the decoder stack holding attention of ``kind``."""
    return hm.model.get_encoder() if kind == "encoder" else hm.model.get_decoder()


def next_norm(layer: nn.Module, kind: str) -> nn.Module:
    """The norm that reads the stream right after one attention sub-layer (pre-LN)."""
    if hasattr(layer, "layer"):  # T5: self, (cross,) feed-forward
        return layer.layer[{"encoder": 1, "decoder_self": 1, "cross": 2}[kind]].layer_norm
    return layer.encoder_attn_layer_norm if kind == "decoder_self" else layer.final_layer_norm


def norms_seen(hm, src: list[int], out: list[int]) -> dict:
    """(kind, layer) -> what plain forward hooks saw of the norms around each attention
    sub-layer in the model's own pass (no hook site): "next_in", the input of the norm
    after it (pre-LN), and "in" / "out" of its own norm."""
    seen: dict = {}
    handles = []
    for kind in KINDS:
        for i, layer in enumerate(layers_of(stack_of(hm, kind))):
            box = seen.setdefault((kind, i), {})

            def after(module, args, output, box=box) -> None:  # returns None: no change
                box.setdefault("next_in", args[0][0])

            def own(module, args, output, box=box) -> None:
                box.setdefault("in", args[0][0])
                box.setdefault("out", output[0])

            handles.append(next_norm(layer, kind).register_forward_hook(after))
            handles.append(hm.sublayer_norm(kind, i).norm.register_forward_hook(own))
    try:
        with torch.no_grad():
            hm.model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([[*out]]))
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("family", FAMILIES)
def test_every_sub_layers_terms_sum_to_its_real_output(hf_loaded, family):
    hm = hf_loaded[family]
    src, out = pass_of(hm)
    p = hm.forced(src, out)
    seen = norms_seen(hm, src, hm.decoder_inputs(out))
    for kind in KINDS:
        for i, a in enumerate(p.attention[kind]):
            t = sublayer_terms(hm, kind, i, a)
            s = seen[(kind, i)]
            norm = hm.sublayer_norm(kind, i)
            assert torch.allclose(t.rebuilt(), t.output, atol=1e-5), (kind, i)
            assert norm.pre == PRE_LN[family]
            # found from the pass: the attention read its norm's output (pre-LN) or not
            assert torch.equal(a.queries[0], s["out"]) == PRE_LN[family]
            if PRE_LN[family]:  # the output is the stream the next sub-layer reads
                assert torch.allclose(s["in"], a.resid_pre[0], atol=1e-6)
                assert torch.allclose(t.output, s["next_in"], atol=1e-5), (kind, i)
            else:  # the norm read the residual sum, and its output is the sub-layer's
                assert torch.equal(a.queries[0], a.resid_pre[0])
                assert torch.allclose(s["in"], a.resid_pre[0] + a.output[0], atol=1e-5)
                assert torch.allclose(t.output, s["out"], atol=1e-5), (kind, i)
            assert t.weights.shape[0] == 4 and torch.allclose(t.weights.sum(-1), torch.ones(1))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", ["norm", "alti"])
def test_norm_based_and_alti_rows_are_distributions_over_what_came_before(
    hf_loaded, family, method
):
    hm = hf_loaded[family]
    assert method_problem(hm, method) is None
    src, out = pass_of(hm)
    a = attribute(hm, src, out, method)
    S, T = len(src), len(out)
    assert a.contributions.shape == (T, S + T)
    assert (a.contributions >= 0).all() and np.allclose(a.contributions.sum(1), 1, atol=1e-5)
    assert np.allclose(np.triu(a.prefix, 1), 0, atol=1e-6)  # no row reads a later token


def test_a_post_norm_other_than_layernorm_is_refused_in_one_line(hf_loaded, monkeypatch):
    hm = dataclasses.replace(hf_loaded["marian"])  # the same model, its own adapter
    src, out = pass_of(hm)
    a = hm.forced(src, out).attention["encoder"][0]
    unknown = SublayerNorm(False, nn.Identity())  # post-LN, an unknown norm
    monkeypatch.setattr(hm, "sublayer_norm", lambda kind, layer: unknown)
    with pytest.raises(TermsError, match="derived for LayerNorm only") as err:
        sublayer_terms(hm, "encoder", 0, a)
    assert "\n" not in str(err.value)
    with pytest.raises(AttributionError, match="derived for LayerNorm only"):
        attribute(hm, src, out, "alti")
    assert method_problem(hf_loaded["marian"], "value-zeroing") is None  # every method reads it


def one_by_one(hm, src, dec, kind: str, index: int, n: int) -> torch.Tensor:
    """1 - cos of layer ``index``'s output when token j's values of ``kind`` are zeroed, one
    full pass per j (no batch of copies, no early stop): (T, n), not normalised."""
    _, _, v, _ = projections(attention_modules(hm.model, kind)[index])
    layer = layers_of(stack_of(hm, kind))[index]

    def output(j: int | None) -> torch.Tensor:
        seen = {}

        def keep(m, a, o) -> None:
            seen.setdefault("y", o)

        hooks = [layer.register_forward_hook(keep)]
        if j is not None:

            def zero(m, a, o, j=j):
                o = o.clone()
                o[:, j] = 0.0
                return o

            hooks.append(v.register_forward_hook(zero))
        try:
            with torch.no_grad():
                hm.model(input_ids=src, decoder_input_ids=dec, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        y = seen["y"]
        return (y[0] if isinstance(y, tuple) else y)[0]  # (T, D)

    base = output(None)
    return torch.stack(
        [1 - torch.nn.functional.cosine_similarity(base, output(j), dim=-1) for j in range(n)], 1
    ).clamp(min=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_value_zeroing_in_one_batch_equals_zeroing_one_token_at_a_time(hf_models, family):
    from core.attribution.compose import normalised

    hm = load(hf_models[family])  # a model of its own: the shared one is never changed
    hm.model.double()  # random tiny models move y by ~1e-6 in cos: float32 noise otherwise
    src_ids, out_ids = pass_of(hm)
    src, dec = torch.tensor([src_ids]), torch.tensor([hm.decoder_inputs(out_ids)])
    S, T = src.size(1), dec.size(1)
    encoder, steps = value_zeroing_steps(hm, hm.forced(src_ids, out_ids))
    assert torch.allclose(
        encoder[1], normalised(one_by_one(hm, src, dec, "encoder", 1, S)), atol=1e-5
    )
    cross = one_by_one(hm, src, dec, "cross", 0, S)  # (T, S)
    own = one_by_one(hm, src, dec, "decoder_self", 0, T) * torch.ones(T, T).tril()
    rows = normalised(torch.cat([own, cross], 1))
    assert torch.allclose(steps[0].prefix, rows[:, :T], atol=1e-5)
    assert torch.allclose(steps[0].source, rows[:, T:], atol=1e-5)
    a = attribute(hm, src_ids, out_ids, "value-zeroing")
    assert (a.contributions >= 0).all() and np.allclose(a.contributions.sum(1), 1, atol=1e-5)
