"""The one recorded pass (core.model.record): the model's own forward, every part of it kept,
one sentence or a batch; what every teacher-forced analysis reads."""

from __future__ import annotations

import pytest
import torch

from core.model.record import KINDS, SUBLAYERS, forced_logits, record, teacher_forced
from tests.helpers import model_and_batch


@pytest.fixture(params=[False, True], ids=["post-LN", "pre-LN"])
def case(request):
    """A seeded toy model in eval mode and a padded batch."""
    model, src, tgt = model_and_batch(norm_first=request.param)
    return model, src, tgt


def test_the_record_is_the_models_own_forward(case):
    model, src, tgt = case
    with torch.no_grad():
        r = record(model, src, tgt)
        logits, maps = model(src, tgt, need_weights=True)
    assert torch.equal(r.logits, logits)
    fast = forced_logits(model, src, tgt)  # the fused path, nothing recorded
    assert torch.allclose(r.logits, fast, atol=1e-5)
    for kind in KINDS:
        assert torch.allclose(getattr(r.maps(), kind), getattr(maps, kind), atol=1e-6)


def test_every_sublayer_hands_its_output_to_the_next(case):
    """The record's parts chain as the forward does: each sub-layer's output is the next one's
    input, and each decoder layer's output is its FFN sub-layer's."""
    model, src, tgt = case
    with torch.no_grad():
        r = record(model, src, tgt)
    L = model.cfg.num_decoder_layers
    assert {name: len(r.sublayers[name]) for name in SUBLAYERS} == {
        "encoder_attention": model.cfg.num_encoder_layers,
        "encoder_ffn": model.cfg.num_encoder_layers,
        "decoder_self": L,
        "cross": L,
        "decoder_ffn": L,
    }
    for a, f in zip(r.sublayers["encoder_attention"], r.sublayers["encoder_ffn"]):
        assert torch.equal(a.output, f.input)
    for i in range(L):
        s, c, f = (r.sublayers[n][i] for n in ("decoder_self", "cross", "decoder_ffn"))
        assert torch.equal(s.output, c.input) and torch.equal(c.output, f.input)
        assert torch.equal(f.output, r.decoder_outputs[i])
        if i:
            assert torch.equal(r.sublayers["decoder_ffn"][i - 1].output, s.input)
    cross = r.attention["cross"][0]
    assert torch.equal(cross.keys, r.memory) and cross.weights.shape[-1] == src.size(1)


def test_a_batch_records_what_each_sentence_records_alone(case):
    model, src, tgt = case
    with torch.no_grad():
        batch = record(model, src, tgt)
        one = record(model, src[1:2], tgt[1:2])
    assert torch.allclose(batch.logits[1], one.logits[0], atol=1e-5)
    for kind in KINDS:
        assert torch.allclose(
            batch.attention[kind][0].weights[1], one.attention[kind][0].weights[0], atol=1e-6
        )


def test_one_sentence_forced_on_its_output(case):
    model, src, _ = case
    ids = [i for i in src[0].tolist() if i]
    r = teacher_forced(model, ids, [5, 6, 2])
    assert r.tgt_in.tolist() == [[1, 5, 6]] and r.out_ids.tolist() == [[5, 6, 2]]
    expected = r.logits[0].log_softmax(-1)[[0, 1, 2], [5, 6, 2]]
    assert torch.allclose(r.logp, expected) and r.output_length == 3
    with pytest.raises(ValueError, match="no output"):
        teacher_forced(model, ids, [])
