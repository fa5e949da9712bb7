"""A one-stack model's record (``Record.one_stack``: its one attention over the whole sequence)
read by the analyses every family shares: the sub-layer terms (``core.attribution.terms``),
rollout and raw attention (``core.attribution.mixing`` / ``methods``) and value zeroing
(``core.attribution.value_zeroing``), each checked against the model's own forward from ids
(transformers' ``output_attentions`` / ``output_hidden_states``, its v projection zeroed) on a
tiny decoder-only model (Llama: grouped-query attention; GPT-2: one fused ``c_attn``) and a
tiny masked one (BERT: post-LN, read both ways)."""

from __future__ import annotations

import copy

import pytest
import torch

from core.attribution.compose import normalised
from core.attribution.methods import attention_contributions, mixing_contributions
from core.attribution.terms import sublayer_terms
from core.attribution.value_zeroing import sequence_matrix
from core.model import lm_sites
from core.model.architectures import architecture_of, part

FAMILIES = ("llama", "gpt2", "bert")
SOURCE, TARGET = "i am cold .", "je suis froid ."


@pytest.fixture(scope="module", params=FAMILIES)
def case(request, lm_loaded):
    """(model, its record of one sentence, the ids of its whole sequence)."""
    m = lm_loaded[request.param]
    if m.supports("translate"):  # a masked LM: its sentence's mask filled
        src_ids = m.source(m.example_sentence).ids
        out_ids = m.translate(m.example_sentence, _settings()).out_ids
    else:
        src_ids, out_ids = m.source(SOURCE).ids, m.target_ids(TARGET)
    return m, m.forced(src_ids, out_ids), m.sequence_ids(src_ids, out_ids)


def _settings():
    from core.model.parts import DecodeSettings

    return DecodeSettings(max_len=8)


def own_forward(m, ids):
    """The model's own forward from ids: attentions L x (H, N, N), hidden states L + 1 x (N, D)."""
    with torch.no_grad():
        o = m.model(
            input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True
        )
    return [a[0] for a in o.attentions], [h[0] for h in o.hidden_states]


def test_the_record_holds_the_one_attention_over_the_whole_sequence(case):
    m, p, ids = case
    weights, hidden = own_forward(m, ids)
    whole = p.one_stack
    assert len(whole.attention) == len(weights) == m.cfg.num_decoder_layers
    for i, a in enumerate(whole.attention):
        assert torch.allclose(a.weights[0], weights[i], atol=1e-6)
        assert torch.allclose(a.resid_pre[0], hidden[i], atol=1e-5)
    for i in range(len(weights) - 1):  # the last hidden state is after a pre-LN final norm
        assert torch.allclose(whole.layer_outputs[i][0], hidden[i + 1], atol=1e-5)
    S, T = len(p.src[0]), len(p.tgt_in[0])
    assert whole.cut(torch.ones(len(ids), len(ids))).shape == (T, S + T)


def test_sublayer_terms_rebuild_the_models_own_stream_after_attention(case):
    """``terms.sublayer_terms``, every family's one decomposition: pre-LN, the layer's input
    plus its attention module's output; post-LN (BERT), the norm after the attention."""
    m, p, ids = case
    arch = architecture_of(m.model)
    seen, hooks = {}, []
    for i, layer in enumerate(lm_sites.layers_of(m.model)):
        if arch.norm == "pre":
            module, take = lm_sites.attention_of(layer), (lambda out: out[0][0])
        else:  # BERT: the sub-layer's output is its norm's
            module, take = part(layer, arch.stack().self_attention.norm), (lambda out: out[0])

        def keep(mod, args, out, i=i, take=take):
            seen[i] = take(out)

        hooks.append(module.register_forward_hook(keep))
    try:
        _, hidden = own_forward(m, ids)
    finally:
        for h in hooks:
            h.remove()
    for i, a in enumerate(p.one_stack.attention):
        t = sublayer_terms(m, "decoder_self", i, a)
        expected = hidden[i] + seen[i] if arch.norm == "pre" else seen[i]
        assert torch.allclose(t.output, expected, atol=1e-5)
        assert torch.allclose(t.rebuilt(), expected, atol=1e-5)


def test_rollout_and_raw_attention_are_the_own_weights_cut(case):
    """Rollout (every layer's 0.5 A + 0.5 I, rows renormalised) and one layer's attention over
    the whole sequence, cut to the decoder inputs' rows over [source ; decoder inputs]."""
    m, p, ids = case
    weights, _ = own_forward(m, ids)
    w = torch.stack(weights).double()  # (L, H, N, N)
    whole = p.one_stack
    eye = r = torch.eye(len(ids), dtype=torch.float64)
    for layer in w:
        mix = 0.5 * layer.mean(0) + 0.5 * eye
        r = (mix / mix.sum(1, keepdim=True)) @ r
    assert torch.allclose(
        mixing_contributions(m, p, "rollout").double(), normalised(whole.cut(r)), atol=1e-5
    )
    got = attention_contributions(m, p, 1, "0").double()
    assert torch.allclose(got, normalised(whole.cut(w[1, 0])), atol=1e-5)


def test_value_zeroing_is_the_layer_run_again_without_a_tokens_values(case):
    """Layer 0's matrix: token j's values zeroed at the model's own v projection (a double copy
    of the model), 1 - cos of the layer's output, rows normalised."""
    m, p, ids = case
    model = copy.deepcopy(m.model).double()
    names = architecture_of(m.model).projections
    attn = lm_sites.attention_of(lm_sites.layers_of(model)[0])
    x = torch.tensor([ids])
    N = len(ids)
    with torch.no_grad():
        base = model(input_ids=x, output_hidden_states=True).hidden_states[1][0]  # (N, D)
        moved_by = torch.zeros(N, N, dtype=torch.float64)
        for j in range(N):

            def zero_j(module, args, out, j=j):
                out = out.clone()
                if names.fused:  # GPT-2: v is the last third of c_attn's output
                    out[0, j, 2 * out.size(-1) // 3 :] = 0.0
                else:
                    out[0, j] = 0.0
                return out

            handle = part(attn, names.fused or names.v).register_forward_hook(zero_j)
            try:
                moved = model(input_ids=x, output_hidden_states=True).hidden_states[1][0]
            finally:
                handle.remove()
            moved_by[:, j] = (1 - torch.cosine_similarity(base, moved, dim=-1)).clamp(min=0)
        got = sequence_matrix(m, p, 0)
    assert torch.allclose(got.double(), normalised(moved_by), atol=1e-4)
    scores = mixing_contributions(m, p, "value-zeroing")
    assert torch.allclose(scores.sum(1), torch.ones(scores.size(0)), atol=1e-5)
