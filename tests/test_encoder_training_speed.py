"""The encoder (BERT) trainer's fast path on a CPU, as the decoder's
(``core.model.attention_path.training_attention``, tests/test_decoder_training_speed.py): its
masked-LM loss pass runs the eager attention (torch's fused CPU kernel is slower at these lengths,
docs/training.md), its loss and gradients are those of the fused path and of transformers'
own ``BertForMaskedLM(labels=...)`` loss, within float rounding, and the model keeps SDPA
for what comes after."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from core.corpus.vocab import Vocab
from core.model import attention_path, trainee
from core.model.config import ModelConfig
from core.model.encoder_trainee import EncoderTrainee
from tests.helpers import loss_and_grads, trainee_batch

V = 40  # the tiny vocabulary: the 4 specials and 36 tokens (the mask is id 40)
MASK_SEED = 7  # the training mask's draw (torch's own generator), the same for both paths


def tiny_encoder(dropout: float = 0.0) -> EncoderTrainee:
    """A seeded 2-layer BERT-style encoder, 4 heads."""
    cfg = ModelConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, num_heads=4,
                      num_encoder_layers=2, d_ff=64, dropout=dropout, max_positions=64,
                      arch="encoder")  # fmt: skip
    torch.manual_seed(0)
    return EncoderTrainee(cfg).train()


def ours(model: EncoderTrainee, src, tgt_in, tgt_out, smoothing: float) -> torch.Tensor:
    """The studio's loss pass, its training mask drawn from MASK_SEED."""
    torch.manual_seed(MASK_SEED)
    return model.loss_terms(src, tgt_in, tgt_out, smoothing)[0]


def fused_reference(model: EncoderTrainee, src, tgt_in, tgt_out, smoothing: float):
    """The loss as a plain loop writes it: the same masked inputs through transformers'
    ``BertForMaskedLM`` on SDPA, every position's logits, cross-entropy of the labels (-100
    ignored)."""
    ids, types = model.joined(src, tgt_out)  # (B, N) each
    torch.manual_seed(MASK_SEED)
    inputs, labels = model.masked(ids)  # (B, N) each
    model.lm.set_attn_implementation("sdpa")
    logits = model.lm(
        input_ids=inputs, attention_mask=(ids != Vocab.pad_id).long(), token_type_ids=types
    ).logits  # (B, N, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                           label_smoothing=smoothing)  # fmt: skip


def test_a_cpu_training_pass_runs_the_eager_attention(monkeypatch):
    """On a CPU the loss pass calls no fused attention (it did before: 2 layers, 1 call
    each); the model is on SDPA again after it."""
    calls, fused = [], F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    model = tiny_encoder()
    src, tgt_in, tgt_out = trainee_batch(padded=True)
    ours(model, src, tgt_in, tgt_out, 0.0).backward()
    assert calls == []
    assert model.lm.config._attn_implementation == "sdpa"
    model.lm.bert(input_ids=src)  # a pass outside the loss: SDPA, as before
    assert calls, "a pass outside the loss runs SDPA as before"


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_and_gradients_are_the_fused_full_sequence_ones(padded, smoothing):
    """float32: the studio's loss (eager attention, logits at the masked tokens only) and its
    gradients equal the plain loop's (SDPA, every position's logits) within rounding."""
    model = tiny_encoder()
    args = (*trainee_batch(padded), smoothing)
    mine, my_grads = loss_and_grads(model, lambda: ours(model, *args))
    want, want_grads = loss_and_grads(model, lambda: fused_reference(model, *args))
    assert mine == pytest.approx(want, abs=1e-5)
    for a, b in zip(my_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_under_bf16_autocast_the_loss_and_gradients_agree_within_bf16_rounding():
    """The trainer's precision: the same computation in bf16 within bf16's rounding."""
    model = tiny_encoder()
    args = (*trainee_batch(padded=True), 0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mine, my_grads = loss_and_grads(model, lambda: ours(model, *args))
        want, want_grads = loss_and_grads(model, lambda: fused_reference(model, *args))
    assert mine == pytest.approx(want, rel=1e-2)
    largest = max(float(b.abs().max()) for b in want_grads)
    for a, b in zip(my_grads, want_grads, strict=True):  # the keys' bias: 0 up to rounding
        scale = max(float(b.abs().max()), 1e-3 * largest)
        assert float((a - b).abs().max()) / scale < 0.05


def test_the_check_sees_a_wrong_computation():
    """The comparison can fail: the loss with the padding attended (no attention mask)
    differs by more than its tolerance (the tiny model's padding moves it little)."""
    model = tiny_encoder()
    src, tgt_in, tgt_out = trainee_batch(padded=True)
    with torch.no_grad():
        want = fused_reference(model, src, tgt_in, tgt_out, 0.0)
        ids, types = model.joined(src, tgt_out)
        torch.manual_seed(MASK_SEED)
        inputs, labels = model.masked(ids)
        logits = model.lm(input_ids=inputs, token_type_ids=types).logits  # padding attended
        wrong = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    assert float(wrong) != pytest.approx(float(want), abs=1e-5)


def test_the_choice_is_the_decoders():
    """One function picks the path for both trainees: eager on a CPU, SDPA elsewhere."""
    assert trainee.training_attention is attention_path.training_attention
    assert attention_path.training_attention(torch.device("cpu")) == "eager"
    assert attention_path.training_attention(torch.device("cuda")) == "sdpa"
