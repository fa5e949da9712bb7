"""Token attribution (core.attribution): exact decompositions, normalised rows, hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.attribution.explain import explain, in_words
from core.attribution.gradients import IG_STEPS, embedding_task, integrated_gradients
from core.attribution.methods import METHODS, AttributionError, attribute
from core.attribution.terms import sublayer_terms
from core.corpus.bpe import join_pieces, word_spans
from core.model.checked_translation import translate_sentence
from core.model.config import ModelConfig
from core.model.studio_model import StudioModel
from core.model.transformer import Transformer
from tests import helpers
from tests.helpers import model_and_batch

SRC, OUT = [4, 5, 6, 7, 8, 2], [5, 6, 7, 8, 2]  # ids of a toy sentence and its "translation"


def shaken(norm_first: bool) -> StudioModel:
    """A seeded toy model whose norms and biases are far from their initial 1 and 0."""
    model, _, _ = model_and_batch(norm_first)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.Linear)):
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
    return helpers.studio_adapter(model)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference relative to the largest value of b."""
    return float((a - b).abs().max().detach() / b.abs().max().detach())


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_the_recorded_pass_is_the_model_s_own_forward(norm_first):
    m = shaken(norm_first)
    p = m.forced(SRC, OUT)
    logits, _ = m.model(p.src, p.tgt_in)
    expected = logits[0].log_softmax(-1).gather(-1, p.out_ids[0][:, None])[:, 0]
    torch.testing.assert_close(p.logp, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_every_sublayer_is_rebuilt_from_its_token_terms(norm_first):
    """The ALTI+ decomposition is exact: sum of terms = the real sub-layer output (1e-4),
    the real output computed here by the model's own modules from the recorded input."""
    m = shaken(norm_first)
    model = m.model
    p = m.forced(SRC, OUT)
    checked = 0
    for i, (layer, x) in enumerate(zip(model.encoder.layers, p.encoder_inputs)):
        t = sublayer_terms(m, "encoder", i, p.attention["encoder"][i])
        with torch.no_grad():
            real = layer.addnorm1(x, lambda h, a=layer.attention: a(h, h, h, p.src_mask))[0][0]
        assert relative(t.rebuilt(), real) < 1e-4 and relative(t.output, real) < 1e-6
        checked += 1
    for i, layer in enumerate(model.decoder.layers):
        own = sublayer_terms(m, "decoder_self", i, p.attention["decoder_self"][i])
        with torch.no_grad():
            real = layer.addnorm1(
                p.self_inputs[i],
                lambda h, a=layer.self_attention: a(h, h, h, p.tgt_mask),
            )[0][0]
        assert relative(own.rebuilt(), real) < 1e-4
        assert relative(own.rebuilt(), p.cross_inputs[i][0]) < 1e-4
        cross = sublayer_terms(m, "cross", i, p.attention["cross"][i])
        with torch.no_grad():
            real = layer.addnorm2(
                p.cross_inputs[i],
                lambda h, a=layer.cross_attention: a(h, p.memory, p.memory, p.src_mask),
            )[0][0]
        assert relative(cross.rebuilt(), real) < 1e-4
        checked += 2
    assert checked == 2 + 3 * 2


def test_the_decomposition_holds_on_a_trained_model(tiny_model):
    p = tiny_model.forced(SRC[:3] + [2], [5, 6, 2])
    for i, a in enumerate(p.attention["encoder"]):
        t = sublayer_terms(tiny_model, "encoder", i, a)
        assert relative(t.rebuilt(), t.output) < 1e-4


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_rows_are_non_negative_sum_to_one_and_never_see_later_tokens(method, norm_first):
    a = attribute(shaken(norm_first), SRC, OUT, method)
    c, S, T = a.contributions, len(SRC), len(OUT)
    assert c.shape == (T, S + T) and a.source_length == S
    assert (c >= 0).all() and np.allclose(c.sum(1), 1.0, atol=1e-5)
    later = np.triu(np.ones((T, T), dtype=bool), k=1)  # prefix token j > t: not yet read
    assert (c[:, S:][later] == 0).all()
    assert np.allclose(a.source_share + c[:, S:].sum(1), 1.0, atol=1e-5)
    if method in ("grad-input", "integrated-gradients"):
        assert a.raw.shape == c.shape and np.allclose(
            np.abs(a.raw) / np.abs(a.raw).sum(1, keepdims=True), c, atol=1e-5
        )


def hand_model() -> StudioModel:
    """One block each, D = 2, one head; uniform attention; W_V = W_O = I; no biases, no FFN.

    Token embeddings are set so the layers read x = [a, -a] (positions zeroed), which the
    layer norm keeps: everything can be followed with pencil and paper.
    """
    cfg = ModelConfig(
        8,
        8,
        d_model=2,
        num_heads=1,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=1,
        dropout=0.0,
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.zero_()
            if name.endswith(("W_v.weight", "W_o.weight")):
                p.copy_(torch.eye(2))
            if ".ln.weight" in name:
                p.fill_(1.0)
        for side in (model.encoder, model.decoder):
            side.pos_encoding.table.zero_()
        scale = 1 / math.sqrt(2)  # the embedding is multiplied by sqrt(D) = sqrt(2)
        model.encoder.embedding.weight[4] = torch.tensor([1.0, -1.0]) * scale
        model.encoder.embedding.weight[5] = torch.tensor([3.0, -3.0]) * scale
        model.decoder.embedding.weight[1] = torch.tensor([2.0, -2.0]) * scale  # <bos>
    return helpers.studio_adapter(model)


@pytest.mark.parametrize(
    "method, expected",
    [
        # uniform weights on both source tokens; nothing before <bos>
        ("attention", [0.5, 0.5, 0.0]),
        # encoder: (A + I) / 2 = [[.75, .25], [.25, .75]]; cross: half own state, a quarter
        # each encoder output -> source .25 * (.75 + .25) each, <bos> .5
        ("rollout", [0.25, 0.25, 0.5]),
        # encoder row 0: ||.5 x0|| + ||x0|| : ||.5 x1|| = 1.5 : 1.5; row 1: .5 : 4.5 (x1 = 3 x0)
        # -> R = [[.5, .5], [.1, .9]]; cross: ||h|| : ||.5 m0|| : ||.5 m1|| = 2 : 1 : 1
        # -> source .25 R0 + .25 R1 = [.15, .35], <bos> .5
        ("norm", [0.15, 0.35, 0.5]),
        # encoder row 0: z = 3 x0, s = 3: T(x0) = T(x1) = [.5, -.5], y = [1, -1];
        # c = ||y||1 - ||y - T||1 = 2 - 1 = 1 each -> [.5, .5]; row 1: z = 5 x0, s = 5:
        # T(x0) = [.1, -.1], T(x1) = [.9, -.9] -> c = .2, 1.8 -> [.1, .9].
        # cross: z = [2, -2], s = 2: T(own) = [.5, -.5], T(m0) = T(m1) = [.25, -.25]
        # -> c = 1, .5, .5 -> own .5, m0 .25, m1 .25 -> source [.15, .35], <bos> .5
        ("alti", [0.15, 0.35, 0.5]),
    ],
)
def test_a_hand_built_model_gives_the_contributions_worked_out_by_hand(method, expected):
    a = attribute(hand_model(), [4, 5], [6], method)
    np.testing.assert_allclose(a.contributions[0], expected, atol=1e-4)


def test_alti_and_norm_part_ways_when_the_layer_norm_rescales():
    """ALTI measures the normalised output, norm-based the vectors before the norm."""
    m = hand_model()
    with torch.no_grad():
        m.model.encoder.embedding.weight[5] = torch.tensor([3.0, 1.0])  # not [a, -a]
    alti = attribute(m, [4, 5], [6], "alti").contributions[0]
    norm = attribute(m, [4, 5], [6], "norm").contributions[0]
    assert not np.allclose(alti, norm, atol=1e-3)


def test_value_zeroing_a_token_whose_values_are_already_zero_changes_nothing():
    model, _, _ = model_and_batch(False)
    layer = model.encoder.layers[0]
    with torch.no_grad():
        layer.attention.W_v.bias.zero_()
    x = torch.randn(1, 5, model.cfg.d_model, generator=torch.Generator().manual_seed(0))
    x[0, 2] = 0.0  # its value vector W_v x + b_v is zero
    m = helpers.encoder_matrix_at(helpers.studio_adapter(model), x)  # (S, S)
    assert m[:, 2].abs().max() < 1e-5 and m.sum(1).allclose(torch.ones(5))  # float32 rounding
    assert (np.delete(m.numpy(), 2, axis=1) > 1e-4).all()  # every other token moves something


def test_integrated_gradients_is_complete_within_five_percent(tiny_model):
    t = translate_sentence(tiny_model, "i'm home .")
    p = tiny_model.forced(t.src_ids, t.out_ids)
    g = integrated_gradients(embedding_task(tiny_model, p), IG_STEPS)
    assert g.completeness is not None and g.completeness < 0.05
    a = attribute(tiny_model, t.src_ids, t.out_ids, "integrated-gradients")
    assert a.completeness < 0.05


def test_the_attention_method_shows_the_chosen_layer_and_head(home_translation, tiny_model):
    t, maps = home_translation
    S = len(t.src_ids)
    for layer, head in [(0, "0"), (1, "1"), (1, "mean")]:
        a = attribute(tiny_model, t.src_ids, t.out_ids, "attention", layer, head)
        shown = maps.cross[layer].mean(0) if head == "mean" else maps.cross[layer, int(head)]
        np.testing.assert_allclose(a.contributions[:, :S], shown, atol=1e-5)
    with pytest.raises(AttributionError, match="layer"):
        attribute(tiny_model, t.src_ids, t.out_ids, "attention", 9, "0")
    with pytest.raises(AttributionError, match="unknown method"):
        attribute(tiny_model, t.src_ids, t.out_ids, "lime")


@pytest.mark.parametrize("method", ["alti", "grad-input", "value-zeroing"])
def test_a_bpe_model_s_pieces_merge_into_words_with_rows_still_summing_to_one(bpe_run, method):
    lm = StudioModel.load(bpe_run / "last.pt")
    t = translate_sentence(lm, "we are eating apples .")
    e = explain(lm, t, method)
    w = in_words(e)
    assert w.source == join_pieces(e.source) and w.output == join_pieces(e.output)
    assert len(w.source) < len(e.source)  # some word of the sentence is cut into pieces
    assert w.contributions.shape == (len(w.output), len(w.source) + len(w.prefix))
    assert np.allclose(w.contributions.sum(1), 1.0, atol=1e-5) and (w.contributions >= 0).all()
    assert not any(tok.startswith("##") for tok in (*w.source, *w.output, *w.prefix))
    first = [a for a, _ in word_spans(e.output)]  # a word's share: the mean of its pieces'
    means = [e.source_share[a:b].mean() for a, b in word_spans(e.output)]
    assert len(first) == len(w.output) and np.allclose(w.source_share, means, atol=1e-5)


def test_explained_json_and_table_agree(home_translation, tiny_model):
    t, _ = home_translation
    e = explain(tiny_model, t, "grad-input")
    out = e.to_json()
    assert out["source"] == t.src_tokens and out["output"] == t.output_tokens
    assert np.allclose(out["contributions"], e.contributions, atol=1e-6)
    assert np.allclose(out["raw"], e.attribution.raw, atol=1e-6)
    table = e.frame()
    assert list(table["output"]) == t.output_tokens
    assert np.allclose(table["source share"], out["source_share"], atol=1e-6)
