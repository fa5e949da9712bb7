"""Decoding: cached == uncached greedy, beam 1 == greedy, maps of the chosen output."""

from __future__ import annotations

import copy

import pytest
import torch

from core.corpus.vocab import Vocab
from core.model.blocks import subsequent_mask
from core.model.decode import beam_search, greedy_decode, teacher_forced, translate, translate_batch
from core.model.parts import TranslationError
from tests.helpers import greedy_decode_uncached


def test_cached_greedy_equals_uncached(random_model):
    """Feeding one token per step with a key/value cache gives the same output."""
    model, _, _ = random_model
    src = torch.tensor([[4, 5, 6, 2, 0], [7, 8, 9, 10, 2]])
    cached, _, _ = greedy_decode(model, src, 12)
    plain = greedy_decode_uncached(model, src, 12)
    assert torch.equal(cached, plain[:, : cached.size(1)])


def test_greedy_without_scores_keeps_no_log_probabilities(random_model):
    """scores=False: the same ids, and no (B, T, V) log-probabilities held to the end."""
    model, _, _ = random_model
    src = torch.tensor([[4, 5, 6, 2, 0], [7, 8, 9, 10, 2]])
    ids, logp, _ = greedy_decode(model, src, 12)
    lean, none, _ = greedy_decode(model, src, 12, scores=False)
    assert torch.equal(ids, lean) and none is None and logp.shape[:2] == ids.shape


def test_beam_size_one_equals_greedy(random_model):
    """A beam of one is greedy decoding."""
    model, _, _ = random_model
    for row in ([4, 5, 6, 2], [9, 8, 2], [10, 2]):
        src = torch.tensor([row])
        greedy, _, _ = greedy_decode(model, src, 10)
        ids = greedy[0].tolist()
        ids = ids[: ids.index(2) + 1] if 2 in ids else ids
        assert beam_search(model, src, 10, beam_size=1, alpha=0.0) == ids


@pytest.mark.parametrize("row", [[4, 5, 6, 2], [10, 2]])
def test_wider_beam_scores_at_least_greedy(random_model, row):
    """With no length penalty a wider beam never finds a worse finished hypothesis."""
    model = copy.deepcopy(random_model[0])
    with torch.no_grad():
        model.decoder.dense.bias[Vocab.eos_id] += 2.0  # a likelier <eos>: hypotheses finish
    src = torch.tensor([row])

    def score(ids):
        logp, _ = teacher_forced(model, src, ids)
        return logp[0].gather(-1, torch.tensor(ids)[:, None]).sum().item()

    greedy = beam_search(model, src, 8, beam_size=1, alpha=0.0)
    wide = beam_search(model, src, 8, beam_size=5, alpha=0.0)
    assert greedy[-1] == wide[-1] == Vocab.eos_id  # both finished
    assert score(wide) >= score(greedy) - 1e-5


def test_step_by_step_maps_equal_one_pass_over_the_output(random_model):
    """Maps assembled across cached steps equal one explicit pass over the model's output."""
    model, src_vocab, tgt_vocab = random_model
    t = translate(model, src_vocab, tgt_vocab, "I am cold.", max_len=6)
    ids = tgt_vocab.encode(t.output_tokens)
    src = torch.tensor([src_vocab.encode(t.src_tokens[:-1]) + [2]])
    _, maps = teacher_forced(model, src, ids)
    assert torch.allclose(t.attention.decoder_self, maps.decoder_self[:, 0], atol=1e-5)
    assert torch.allclose(t.attention.cross, maps.cross[:, 0], atol=1e-5)
    assert torch.allclose(t.attention.encoder, maps.encoder[:, 0], atol=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_translation_fields(random_model, beam):
    """Tokens, per-step top-k, and (L, H, T, .) maps that are causal and sum to 1."""
    model, src_vocab, tgt_vocab = random_model
    t = translate(model, src_vocab, tgt_vocab, "you are tall!", beam_size=beam, topk=3)
    T, S = len(t.output_tokens), len(t.src_tokens)
    assert t.src_tokens == ["you", "are", "tall", "!", "<eos>"]
    assert t.src_unknown == [False, False, False, True, False]
    assert t.decoder_inputs[0] == "<bos>" and len(t.decoder_inputs) == T
    assert len(t.topk) == T and all(len(k) == 3 for k in t.topk)
    assert all(k[0][1] >= k[1][1] >= k[2][1] for k in t.topk)
    assert t.attention.encoder.shape == (2, 4, S, S)
    assert t.attention.decoder_self.shape == (2, 4, T, T)
    assert t.attention.cross.shape == (2, 4, T, S)
    assert torch.all(t.attention.decoder_self[..., ~subsequent_mask(T)] == 0)
    assert torch.allclose(t.attention.cross.sum(-1), torch.ones(2, 4, T), atol=1e-5)


def test_empty_and_unknown_input_give_clear_errors(random_model):
    """Empty or all-unknown sentences raise TranslationError with advice."""
    model, src_vocab, tgt_vocab = random_model
    with pytest.raises(TranslationError, match="empty"):
        translate(model, src_vocab, tgt_vocab, "   ")
    with pytest.raises(TranslationError, match="vocabulary"):
        translate(model, src_vocab, tgt_vocab, "xylophone zebra")


def test_over_long_input_is_truncated_with_a_warning(random_model):
    """A sentence longer than the positional table is cut, and the user is told."""
    model, src_vocab, tgt_vocab = random_model
    long = " ".join(["i am cold"] * 300)
    t = translate(model, src_vocab, tgt_vocab, long, max_len=5)
    assert len(t.src_tokens) == model.cfg.max_positions
    assert any("first" in w for w in t.warnings)


def test_output_length_guard(random_model):
    """max_len bounds the output; not reaching <eos> is reported."""
    model, src_vocab, tgt_vocab = random_model
    t = translate(model, src_vocab, tgt_vocab, "i am cold", max_len=3)
    assert len(t.output_tokens) <= 3
    stopped = t.output_tokens[-1] != "<eos>"
    assert stopped == any("maximum output length" in w for w in t.warnings)


def test_batched_translation_keeps_order(random_model):
    """translate_batch returns one translation per input, in input order."""
    model, src_vocab, tgt_vocab = random_model
    sources = [["i", "am", "cold", "."], ["you"], ["you", "are", "tall"]]
    batch = translate_batch(model, src_vocab, tgt_vocab, sources, batch_size=2, max_len=8)
    single = [
        translate(model, src_vocab, tgt_vocab, " ".join(s), max_len=8).tokens for s in sources
    ]
    assert batch == single
