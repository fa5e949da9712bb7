"""ALTI's decomposition of a Hugging Face encoder-decoder (core.attribution.hf_terms): every
sub-layer's terms sum to its real output, pre-LN and post-LN read from the pass itself, and
the norm-based method and ALTI+ give rows as the studio's model does."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from core.attribution import hf_terms
from core.attribution.hugging_face import attribute, method_problem
from core.model import hugging_face as hf
from core.model.decode import DecodeSettings
from core.model.hf_folder import HFModelError
from core.model.hf_inside import layers_of
from tests.hf_tiny import FAMILIES

PRE_LN = {"marian": False, "bart": False, "t5": True, "m2m_100": True}


def pass_of(hm) -> tuple[list[int], list[int]]:
    """(source ids, output ids) of the model's own greedy translation of a test sentence."""
    src = hf.encode_source(hm, "the boy is tall .")[0].tolist()
    settings = DecodeSettings(max_len=6, target_lang="__fr__" if "__fr__" in str(hm.meta) else "")
    out = hf.generate(hm, torch.tensor([src]), settings, settings.target_lang or None)
    return src, out[0, 1:].tolist()


def next_norm(layer: nn.Module, kind: str) -> nn.Module:
    """The norm that reads the stream right after one attention sub-layer (pre-LN)."""
    if hasattr(layer, "layer"):  # T5: self, (cross,) feed-forward
        return layer.layer[{"encoder": 1, "decoder_self": 1, "cross": 2}[kind]].layer_norm
    return layer.encoder_attn_layer_norm if kind == "decoder_self" else layer.final_layer_norm


@pytest.mark.parametrize("family", FAMILIES)
def test_every_sub_layers_terms_sum_to_its_real_output(hf_loaded, family):
    hm = hf_loaded[family]
    src, out = pass_of(hm)
    seen = hf_terms.seen_sublayers(hm, src, out)
    terms = hf_terms.all_terms(hm, src, out)
    streams: dict = {}  # what the next norm of each pre-LN sub-layer read
    handles = []
    for kind in hf_terms.KINDS:
        stack = hm.model.get_encoder() if kind == "encoder" else hm.model.get_decoder()
        for i, layer in enumerate(layers_of(stack)):

            def keep(module, args, output, key=(kind, i)) -> None:  # returns None: no change
                streams.setdefault(key, args[0][0])

            handles.append(next_norm(layer, kind).register_forward_hook(keep))
    try:
        with torch.no_grad():
            src_t, dec_t = hf.forced_inputs(hm, src, out)
            hm.model(input_ids=src_t, decoder_input_ids=dec_t)
    finally:
        for h in handles:
            h.remove()
    for kind in hf_terms.KINDS:
        for i, (t, s) in enumerate(zip(terms[kind], seen[kind])):
            assert torch.allclose(t.rebuilt(), t.output, atol=1e-5), (kind, i)
            assert torch.equal(s.read, s.norm_out) == PRE_LN[family]  # found from the pass
            if PRE_LN[family]:  # the output is the stream the next sub-layer reads
                assert torch.allclose(t.output, streams[(kind, i)], atol=1e-5), (kind, i)
            else:  # the norm read the residual sum, and its output is the sub-layer's
                assert torch.allclose(s.norm_in, s.read + s.attended, atol=1e-5)
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


def test_a_post_norm_other_than_layernorm_is_refused_in_one_line(hf_loaded):
    hm = hf_loaded["marian"]
    src, out = pass_of(hm)
    seen = hf_terms.seen_sublayers(hm, src, out)["encoder"][0]
    module = hm.model.get_encoder().layers[0].self_attn
    with pytest.raises(HFModelError, match="derived for LayerNorm only"):
        hf_terms.sublayer_terms(module, nn.Identity(), seen)  # post-LN, an unknown norm
    assert method_problem(hm, "value-zeroing") is None  # every method reads it


def one_by_one(hm, src, dec, kind: str, index: int, n: int) -> torch.Tensor:
    """1 - cos of layer ``index``'s output when token j's values of ``kind`` are zeroed, one
    full pass per j (no batch of copies, no early stop): (T, n), not normalised."""
    from core.model.hf_inside import attention_modules

    v = attention_modules(hm.model, kind)[index]
    v = getattr(v, "v_proj", None) or v.v
    stack = hm.model.get_encoder() if kind == "encoder" else hm.model.get_decoder()
    layer = layers_of(stack)[index]

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
def test_value_zeroing_in_one_batch_equals_zeroing_one_token_at_a_time(hf_loaded, family):
    from core.attribution import hf_value_zeroing
    from core.attribution.compose import normalised

    hm = dataclasses.replace(hf_loaded[family], model=copy.deepcopy(hf_loaded[family].model))
    hm.model.double()  # random tiny models move y by ~1e-6 in cos: float32 noise otherwise
    src_ids, out_ids = pass_of(hm)
    src, dec = hf.forced_inputs(hm, src_ids, out_ids)
    S, T = src.size(1), dec.size(1)
    encoder, steps = hf_value_zeroing.value_zeroing_steps(hm, src_ids, out_ids)
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
