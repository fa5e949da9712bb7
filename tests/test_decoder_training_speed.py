"""The decoder-only trainer's fast path on a CPU (``core.model.trainee.training_attention``):
its loss pass runs the eager attention (torch's fused CPU kernel is several times slower at
these lengths, bench/decoder_mfu.py), and its loss and gradients are those of the fused path
and of the plain full-sequence computation, within float rounding; decoding keeps SDPA."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from core.corpus.vocab import Vocab
from core.model import trainee
from core.model.config import ModelConfig
from core.model.trainee import DecoderTrainee, left_padded
from tests.helpers import loss_and_grads, trainee_batch

V = 40  # the tiny vocabulary: the 4 specials and 36 tokens


def tiny_trainee(dropout: float = 0.0) -> DecoderTrainee:
    """A seeded 2-layer decoder-only model, 4 heads over 2 key/value heads."""
    cfg = ModelConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, num_heads=4,
                      num_kv_heads=2, num_decoder_layers=2, d_ff=64, dropout=dropout,
                      max_positions=64, arch="decoder-only")  # fmt: skip
    torch.manual_seed(0)
    return DecoderTrainee(cfg).train()


def fused_reference(model: DecoderTrainee, src, tgt_in, tgt_out, smoothing: float):
    """The loss as a plain loop writes it: the Llama with SDPA over the whole sequence, every
    position's logits, cross-entropy with the pad ignored (no studio shortcut)."""
    left, real = left_padded(src, Vocab.pad_id)  # (B, S) each
    ids = torch.cat([left, tgt_in], dim=1)  # (B, S+T)
    mask = torch.cat([real, tgt_in != Vocab.pad_id], dim=1).long()  # (B, S+T)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, S+T)
    labels = torch.cat([torch.full_like(left, Vocab.pad_id), tgt_out], dim=1)  # (B, S+T)
    model.lm.set_attn_implementation("sdpa")
    logits = model.lm(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                           ignore_index=Vocab.pad_id, label_smoothing=smoothing)  # fmt: skip


def test_a_cpu_training_pass_runs_the_eager_attention(monkeypatch):
    """On a CPU the loss pass calls no fused attention (it did before: 2 layers, 1 call
    each); the model keeps SDPA for what comes after (greedy decoding calls it)."""
    calls, fused = [], F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    model = tiny_trainee()
    src, tgt_in, tgt_out = trainee_batch(padded=True)
    model.loss_terms(src, tgt_in, tgt_out)[0].backward()
    assert calls == []
    assert trainee.training_attention(torch.device("cpu")) == "eager"
    assert trainee.training_attention(torch.device("cuda")) == "sdpa"
    model.eval().greedy_decode(src, max_len=3)
    assert calls, "decoding runs SDPA as before"


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_and_gradients_are_the_fused_full_sequence_ones(padded, smoothing):
    """float32: the studio's loss (eager attention, logits at the loss positions only) and
    its gradients equal the plain loop's (SDPA, every position's logits) within rounding; a
    wrong mask, position or row would move them by far more."""
    model = tiny_trainee()
    src, tgt_in, tgt_out = trainee_batch(padded)
    args = (src, tgt_in, tgt_out, smoothing)
    ours, our_grads = loss_and_grads(model, lambda: model.loss_terms(*args)[0])
    want, want_grads = loss_and_grads(model, lambda: fused_reference(model, *args))
    assert ours == pytest.approx(want, abs=1e-5)
    for mine, theirs in zip(our_grads, want_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


def test_under_bf16_autocast_the_loss_and_gradients_agree_within_bf16_rounding():
    """The trainer's precision: the same computation in bf16 within bf16's rounding."""
    model = tiny_trainee()
    src, tgt_in, tgt_out = trainee_batch(padded=True)
    args = (src, tgt_in, tgt_out, 0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, our_grads = loss_and_grads(model, lambda: model.loss_terms(*args)[0])
        want, want_grads = loss_and_grads(model, lambda: fused_reference(model, *args))
    assert ours == pytest.approx(want, rel=1e-2)
    for mine, theirs in zip(our_grads, want_grads, strict=True):
        scale = float(theirs.abs().max()) + 1e-12
        assert float((mine - theirs).abs().max()) / scale < 0.05


def test_the_check_sees_a_wrong_computation():
    """The comparison can fail: the loss without the source's padding mask differs."""
    model = tiny_trainee()
    src, tgt_in, tgt_out = trainee_batch(padded=True)
    with torch.no_grad():
        want = fused_reference(model, src, tgt_in, tgt_out, 0.0)
        ids = torch.cat([src, tgt_in], dim=1)  # the padding left where it was, attended
        logits = model.lm(input_ids=ids).logits[:, src.size(1) :]  # (B, T, V)
        wrong = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
    assert abs(float(wrong) - float(want)) > 1e-3
