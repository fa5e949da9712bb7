"""Attribution of a decoder-only language model over its one attention, each method checked
against the model's own computation: gradients at the embeddings (the ids path), raw
attention and rollout (``output_attentions``), norm-based and ALTI+ (token terms that rebuild
the model's own residual after attention), value zeroing (the model's v projection zeroed)."""

from __future__ import annotations

import copy
import unittest.mock

import numpy as np
import pytest
import torch

from core.attribution.methods import AttributionError, attribute, method_name
from core.attribution.terms import sublayer_terms
from core.model import lm_sites
from core.model.architectures import architecture_of
from tests.lm_tiny import LM_FAMILIES
from tests.test_lm_conformance import SETTINGS, SOURCE, TARGET, own_pass


@pytest.fixture(scope="module", params=LM_FAMILIES)
def lm(request, lm_loaded):
    return lm_loaded[request.param]


def test_the_embeddings_path_equals_the_ids_path(lm):
    src = torch.tensor([lm.source(SOURCE).ids])
    tgt_in = torch.tensor([lm.decoder_inputs(lm.target_ids(TARGET))])
    with torch.no_grad():
        logp = lm.run(src, tgt_in).float().log_softmax(-1)
        embeddings = lm.embeddings(src, tgt_in)
        copies = tuple(e.expand(3, -1, -1) for e in embeddings)  # as the gradient methods batch
        again = lm.log_probs_from_embeddings(src, tgt_in, *copies)
        steps = torch.tensor([0, 2])
        some = torch.stack(lm.log_probs_at(src, tgt_in, *copies, steps), 1)  # (3, P, V)
    assert embeddings[0].shape == (1, src.size(1), lm.cfg.d_model)
    own = lm.model.get_input_embeddings()(src)  # the sentence's token embeddings
    assert torch.allclose(embeddings[0], own, atol=1e-6)
    assert torch.allclose(again, logp.expand(3, -1, -1), atol=1e-5)
    assert torch.allclose(some, logp[:, steps].expand(3, -1, -1), atol=1e-5)


def test_gradient_methods_explain_the_source_and_the_prefix(lm):
    t = lm.translate(SOURCE, SETTINGS)
    for method in ("grad-input", "integrated-gradients"):
        if refused(lm, method):  # Gemma 2's integrated gradients: no convergence from 0
            continue
        a = attribute(lm, t.src_ids, t.out_ids, method)
        S, T = len(t.src_ids), len(t.out_ids)
        assert a.contributions.shape == (T, S + T)
        w = a.contributions
        assert np.allclose(w.sum(-1), 1.0, atol=1e-5) and (w >= 0).all()
        assert np.all(np.triu(w[:, S:], 1) == 0)  # no step reads a later token
        if method == "integrated-gradients":
            assert a.completeness is not None and abs(a.completeness) < 0.05


def test_integrated_gradients_does_not_converge_for_gemma_2(lm_loaded):
    """Why Gemma 2 refuses integrated gradients: from zero embeddings its norms before and
    after each sub-layer put the whole change at α ≈ 0 (completeness far off)."""
    lm = lm_loaded["gemma2"]
    t = lm.translate(SOURCE, SETTINGS)
    with unittest.mock.patch.object(type(lm), "supports", return_value=None):
        a = attribute(lm, t.src_ids, t.out_ids, "integrated-gradients")
    assert abs(a.completeness) > 0.5


def test_attention_and_rollout_read_the_one_attentions_rows(lm):
    t = lm.translate(SOURCE, SETTINGS)
    _, weights, _, (source, steps) = own_pass(lm, t.src_ids, t.out_ids)
    w = torch.stack(weights).double().numpy()  # (L, H, N, N)
    S, T = len(t.src_ids), len(t.out_ids)

    def cut(a):  # rows of the decoder inputs over [source ; prefix], renormalised
        rows = np.concatenate([a[steps, source], a[steps, steps]], axis=1)
        return rows / rows.sum(1, keepdims=True)

    got = attribute(lm, t.src_ids, t.out_ids, "attention", layer=1, head="2").contributions
    assert np.allclose(got, cut(w[1, 2]), atol=1e-5)
    mean = attribute(lm, t.src_ids, t.out_ids, "attention", layer=0).contributions
    assert np.allclose(mean, cut(w[0].mean(0)), atol=1e-5)
    eye, r = np.eye(w.shape[-1]), np.eye(w.shape[-1])
    for layer in w:  # rollout by hand: 0.5 A + 0.5 I, rows renormalised, first layer right
        mix = 0.5 * layer.mean(0) + 0.5 * eye
        r = (mix / mix.sum(1, keepdims=True)) @ r
    rolled = attribute(lm, t.src_ids, t.out_ids, "rollout").contributions
    assert rolled.shape == (T, S + T) and np.allclose(rolled, cut(r), atol=1e-5)
    assert np.all(np.triu(rolled[:, S:], 1) == 0)  # no step reads a later token
    with pytest.raises(AttributionError, match="head must be"):
        attribute(lm, t.src_ids, t.out_ids, "attention", layer=0, head="9")


def refused(lm, *methods) -> bool:
    """Whether the family's row refuses these methods (a parallel residual: Falcon, Phi; an
    attention output normalised again: Gemma 2); then ``attribute`` refuses each in its one
    line."""
    problems = [lm.supports(method) for method in methods]
    if not any(problems):
        return False
    t = lm.translate(SOURCE, SETTINGS)
    for method, problem in zip(methods, problems):
        assert problem == architecture_of(lm.model).refuses[method] and "\n" not in problem
        with pytest.raises(AttributionError) as err:
            attribute(lm, t.src_ids, t.out_ids, method)
        assert str(err.value) == problem
    return True


def test_each_attention_sub_layer_is_the_sum_of_its_token_terms(lm):
    """Norm-based and ALTI+ read a pre-LN layer as y_i = x_i + sum_j v_ij + b_O: the terms
    rebuild the model's own residual after attention (its attention module's output added
    to the layer's input), every layer."""
    if refused(lm, "norm", "alti", "value-zeroing"):
        return
    src_ids, out_ids = lm.source(SOURCE).ids, lm.target_ids(TARGET)
    ids = lm.sequence_ids(src_ids, out_ids)
    recorded = lm.forced(src_ids, out_ids).one_stack.attention  # the record's, every layer
    seen = {}
    hooks = [
        lm_sites.attention_of(layer).register_forward_hook(
            lambda mod, args, out, i=i: seen.__setitem__(i, out[0][0])
        )
        for i, layer in enumerate(lm_sites.layers_of(lm.model))
    ]
    try:
        with torch.no_grad():
            o = lm.model(
                input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True
            )
            for i in range(len(recorded)):
                x = o.hidden_states[i][0]  # (N, D) the layer's input
                t = sublayer_terms(lm, "decoder_self", i, recorded[i])
                assert torch.allclose(t.weights, o.attentions[i][0], atol=1e-6)
                inside = "residual_inside" in architecture_of(lm.model).quirks  # BLOOM's
                assert torch.allclose(t.output, seen[i] if inside else x + seen[i], atol=1e-5)
                assert torch.allclose(t.rebuilt(), t.output, atol=1e-5)
    finally:
        for h in hooks:
            h.remove()


def test_norm_based_and_alti_roll_out_over_the_one_attention(lm):
    if refused(lm, "norm", "alti", "value-zeroing"):
        return
    from core.attribution.mixing import alti_scores

    t = lm.translate(SOURCE, SETTINGS)
    S, T = len(t.src_ids), len(t.out_ids)
    ids = lm.sequence_ids(t.src_ids, t.out_ids)
    source, steps = lm.sequence_spans(S, T)
    recorded = lm.forced(t.src_ids, t.out_ids).one_stack.attention
    with torch.no_grad():
        r = torch.eye(len(ids), dtype=torch.float64)
        for i in range(len(recorded)):  # ALTI by hand
            terms = sublayer_terms(lm, "decoder_self", i, recorded[i])
            pieces = terms.keys.clone()
            pieces[range(len(ids)), range(len(ids))] += terms.residual  # the own token's
            scores = alti_scores(pieces, terms.output).double()
            r = (scores / scores.sum(1, keepdim=True)) @ r
    rows = torch.cat([r[steps, source], r[steps, steps]], dim=1)
    expected = (rows / rows.sum(1, keepdim=True)).numpy()
    alti = attribute(lm, t.src_ids, t.out_ids, "alti").contributions
    assert alti.shape == (T, S + T) and np.allclose(alti, expected, atol=1e-5)
    for method in ("alti", "norm"):
        got = attribute(lm, t.src_ids, t.out_ids, method).contributions
        assert np.allclose(got.sum(1), 1, atol=1e-5) and np.all(got >= 0)
        assert np.all(np.triu(got[:, S:], 1) == 0)  # no step reads a later token
    assert not np.allclose(attribute(lm, t.src_ids, t.out_ids, "norm").contributions, alti)


def test_value_zeroing_is_the_layer_run_again_without_a_tokens_values(lm):
    """Zeroing token j's value vectors in every head (at the model's own v projection, the
    weights as they are) moves layer 0's output as ``sequence_matrix`` says (the record's
    layer output, the model's own, the base)."""
    if refused(lm, "norm", "alti", "value-zeroing"):
        return
    from core.attribution.compose import normalised
    from core.attribution.value_zeroing import sequence_matrix

    src_ids, out_ids = lm.source(SOURCE).ids, lm.target_ids(TARGET)
    ids = lm.sequence_ids(src_ids, out_ids)
    p = lm.forced(src_ids, out_ids)
    model = copy.deepcopy(lm.model).double()  # by hand: 1 - cos of small moves, exactly
    attn = lm_sites.attention_of(lm_sites.layers_of(model)[0])
    x = torch.tensor([ids])
    with torch.no_grad():
        o = lm.model(input_ids=x, output_attentions=True, output_hidden_states=True)
        assert torch.allclose(p.one_stack.layer_outputs[0][0], o.hidden_states[1][0], atol=1e-5)
        base = model(input_ids=x, output_hidden_states=True).hidden_states[1][0]  # (N, D)
        moved_by = torch.zeros(len(ids), len(ids), dtype=torch.float64)
        names = architecture_of(lm.model).projections
        for j in range(len(ids)):

            def zero_j(module, args, out, j=j):
                out = out.clone()
                if names.layout == "per_head" and names.fused:  # BLOOM: (H, 3, Dh), v third
                    out.view(*out.shape[:-1], lm.cfg.num_heads, 3, -1)[0, j, :, 2] = 0.0
                elif names.fused:  # GPT-2: v is the last third of c_attn's output
                    out[0, j, 2 * out.size(-1) // 3 :] = 0.0
                else:
                    out[0, j] = 0.0
                return out

            proj = getattr(attn, names.v)
            handle = proj.register_forward_hook(zero_j)
            try:
                moved = model(input_ids=x, output_hidden_states=True).hidden_states[1][0]
            finally:
                handle.remove()
            cos = torch.nn.functional.cosine_similarity(base, moved, dim=-1)  # (N,)
            moved_by[:, j] = (1 - cos).clamp(min=0)
        got = sequence_matrix(lm, p, 0)
    assert torch.allclose(got.double(), normalised(moved_by), atol=1e-4)
    assert torch.all(got.triu(1) == 0)  # a later token's values move nothing
    t = lm.translate(SOURCE, SETTINGS)
    scores = attribute(lm, t.src_ids, t.out_ids, "value-zeroing").contributions
    assert np.allclose(scores.sum(1), 1, atol=1e-5) and np.all(scores >= 0)


@pytest.mark.parametrize(
    "family, name",
    [
        ("marian", "Raw cross-attention"),
        ("t5", "Raw cross-attention"),
        ("gpt2", "Raw attention"),
        ("llama", "Raw attention"),
        ("bert", "Raw attention"),
    ],
)
def test_the_attention_method_is_named_for_the_attention_it_reads(
    family, name, hf_loaded, lm_loaded
):
    """A model of one stack has no cross-attention: its attention method reads its one
    attention (``attention_contributions``), and is named so on the page and in faithfulness'
    rows (``method_name``; the capability ``cross_attention`` says why)."""
    m = (hf_loaded if family in ("marian", "t5") else lm_loaded)[family]
    assert method_name(m, "attention") == name
    assert method_name(m, "alti") == "ALTI+"
    assert (m.supports("cross_attention") is None) == (name == "Raw cross-attention")
