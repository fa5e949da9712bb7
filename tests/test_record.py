"""The one recorded pass (core.model.record, ``TranslationModel.record``): the model's own
forward, every part of it kept through its hook sites, one sentence or a batch; what every
teacher-forced analysis reads."""

from __future__ import annotations

import pytest
import torch

from core.model.record import KINDS, SIDES
from tests import helpers
from tests.helpers import model_and_batch


@pytest.fixture(params=[False, True], ids=["post-LN", "pre-LN"])
def case(request):
    """A seeded toy model in eval mode (behind the interface) and a padded batch."""
    model, src, tgt = model_and_batch(norm_first=request.param)
    return helpers.studio_adapter(model), src, tgt


def test_the_record_is_the_models_own_forward(case):
    m, src, tgt = case
    with torch.no_grad():
        r = m.record(src, tgt)
        logits, maps = m.model(src, tgt, need_weights=True)
        fast = m.run(src, tgt)  # the fused path, nothing recorded
    assert torch.equal(r.logits, logits)
    assert torch.allclose(r.logits, fast, atol=1e-5)
    for kind in KINDS:
        assert torch.allclose(getattr(r.maps(), kind), getattr(maps, kind), atol=1e-6)


def test_every_sublayer_hands_its_output_to_the_next(case):
    """The record's parts chain as the forward does: each sub-layer's output is the next one's
    input, each recorded attention output makes its sub-layer's output, and each layer's
    output is its FFN sub-layer's (rebuilt here from the model's own modules)."""
    m, src, tgt = case
    model = m.model
    with torch.no_grad():
        r = m.record(src, tgt)
    E, L = model.cfg.num_encoder_layers, model.cfg.num_decoder_layers
    assert {kind: len(r.attention[kind]) for kind in KINDS} == {
        "encoder": E,
        "decoder_self": L,
        "cross": L,
    }
    assert {side: (len(r.layer_inputs[side]), len(r.layer_outputs[side])) for side in SIDES} == {
        "encoder": (E, E),
        "decoder": (L, L),
    }

    def added(addnorm, a) -> torch.Tensor:
        """The sub-layer's output from its input and the attention's recorded output."""
        z = a.resid_pre + a.output
        return z if addnorm.norm_first else addnorm.ln(z)

    def ffn(addnorm, layer, x) -> torch.Tensor:
        """The FFN sub-layer of ``layer`` on x."""
        return addnorm(x, lambda h: (layer.ffn(h), None))[0]

    with torch.no_grad():
        for i, (layer, a) in enumerate(zip(model.encoder.layers, r.attention["encoder"])):
            assert torch.equal(a.resid_pre, r.layer_inputs["encoder"][i])
            assert torch.allclose(a.resid_post, added(layer.addnorm1, a), atol=1e-6)
            assert torch.allclose(
                ffn(layer.addnorm2, layer, a.resid_post), r.layer_outputs["encoder"][i], atol=1e-6
            )
            if i:
                assert torch.equal(r.layer_outputs["encoder"][i - 1], a.resid_pre)
        assert torch.equal(model.encoder.final_ln(r.layer_outputs["encoder"][-1]), r.memory)
        for i, layer in enumerate(model.decoder.layers):
            s, c = r.attention["decoder_self"][i], r.attention["cross"][i]
            assert torch.equal(s.resid_pre, r.self_inputs[i])
            assert torch.allclose(s.resid_post, added(layer.addnorm1, s), atol=1e-6)
            assert torch.equal(s.resid_post, c.resid_pre)
            assert torch.equal(c.resid_pre, r.cross_inputs[i])
            assert torch.allclose(c.resid_post, added(layer.addnorm2, c), atol=1e-6)
            out = ffn(layer.addnorm3, layer, c.resid_post)
            assert torch.allclose(out, r.decoder_outputs[i], atol=1e-6)
            if i:
                assert torch.equal(r.decoder_outputs[i - 1], s.resid_pre)
    assert len(r.stream("decoder")) == L + 1
    assert torch.equal(r.stream("decoder")[-1], r.decoder_outputs[-1])
    cross = r.attention["cross"][0]
    assert torch.equal(cross.keys, r.memory) and cross.weights.shape[-1] == src.size(1)


def test_a_batch_records_what_each_sentence_records_alone(case):
    m, src, tgt = case
    with torch.no_grad():
        batch = m.record(src, tgt)
        one = m.record(src[1:2], tgt[1:2])
    assert torch.allclose(batch.logits[1], one.logits[0], atol=1e-5)
    for kind in KINDS:
        assert torch.allclose(
            batch.attention[kind][0].weights[1], one.attention[kind][0].weights[0], atol=1e-6
        )


def test_one_sentence_forced_on_its_output(case):
    m, src, _ = case
    ids = [i for i in src[0].tolist() if i]
    r = m.forced(ids, [5, 6, 2])
    assert r.tgt_in.tolist() == [[1, 5, 6]] and r.out_ids.tolist() == [[5, 6, 2]]
    expected = r.logits[0].log_softmax(-1)[[0, 1, 2], [5, 6, 2]]
    assert torch.allclose(r.logp, expected) and r.output_length == 3
    with pytest.raises(ValueError, match="no output"):
        m.forced(ids, [])
