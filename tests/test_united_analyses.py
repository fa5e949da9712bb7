"""Issue 65's twins, each written once: the function that serves every family is checked on
every configuration of the conformance suites (the studio's post-LN and pre-LN Transformer,
each Hugging Face encoder-decoder, each decoder-only and each masked language model) against
the model's own computation from ids.

- head importance's losses: a batch run again from any head's layer
  (``core.model.resumed.resumable``) equals the whole pass with the same heads removed, and
  ``Measures.losses`` equals each pair's own cross-entropy from the model's logits.
- head importance: one ``head_importance`` for every family, by BLEU and loss or, where the
  capability row says (``importance_bleu``), by the loss alone.
- the q·k view: one ``query_key_view`` (``core.model.record.layer_heads``), checked in
  tests/test_conformance.py (inside a head, over every configuration).
- head roles, asked of the capability table, never of a model's kind.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from core.attention.ablation import HeadSpec
from core.attention.head_measures import Measures
from core.attention.head_roles import head_roles
from core.attention.importance import head_importance, loss_pairs, measure_of
from core.corpus.splits import Split
from core.measure.sample import sample_of
from core.model.batched import forced_batch
from core.model.hf_model import load
from core.model.one_sequence import unpadded
from core.model.parts import DecodeSettings
from core.model.resumed import resumable
from tests import helpers
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES
from tests.test_conformance import studio, target_lang

CONFIGURATIONS = ("studio post-LN", "studio pre-LN", *CONFORMANCE, *LM_FAMILIES, *ENCODER_FAMILIES)


ONE_OF_EACH = ("studio", "marian", "gpt2", "bert")  # one per adapter (the studio's: the tiny
# trained model, whose greedy translations end where a random one's run to their limit)


def model_of(name: str, hf_models, lm_loaded):
    """The model of one configuration."""
    if name.startswith("studio"):
        return studio(name.endswith("pre-LN"))
    if name in CONFORMANCE:
        return load(hf_models[name])
    return lm_loaded[name]


@pytest.fixture(scope="module", params=CONFIGURATIONS)
def m(request, hf_models, lm_loaded):
    """One model of each configuration, every family the door serves."""
    return model_of(request.param, hf_models, lm_loaded)


def pairs_of(m, n: int = 3) -> list[tuple[list[int], list[int]]]:
    """The (ids, labels) pairs a model's loss reads of ``n`` word pairs (``loss_pairs``)."""
    sample = sample_of(m, Split(helpers.word_pairs(n)), n, target_lang(m))
    return loss_pairs(m, sample)


def every_head_layer(m) -> list[tuple[str, int]]:
    """(kind, layer) of every layer holding heads of each kind the model gates."""
    return [(kind, i) for kind in m.head_kinds for i in range(m.layers(kind))]


def test_a_pass_run_again_from_any_heads_layer_is_the_whole_pass(m):
    src, dec, _ = forced_batch(m, pairs_of(m))  # two pairs of unequal lengths: padded
    with torch.no_grad(), m.evaluating():
        whole, again = resumable(m, src, dec)  # (B, T, D)
        assert torch.allclose(whole, m.hidden(src, dec), atol=1e-5)
        for kind, layer in every_head_layer(m):
            assert torch.allclose(again(kind, layer), whole, atol=1e-4)
            gate = torch.ones(m.cfg.num_heads)
            gate[1] = 0.0
            with m.rows_gated({(kind, layer): gate}):
                expected = m.hidden(src, dec)  # (B, T, D) the whole pass, the head removed
                assert torch.allclose(again(kind, layer), expected, atol=1e-4), (kind, layer)


@pytest.mark.parametrize("name", (*LM_FAMILIES, *ENCODER_FAMILIES))
def test_a_one_stack_models_output_positions_are_where_its_own_pass_gives_hidden(name, lm_loaded):
    """The door's ``output_positions``: each row's own forward from ids (its
    ``sequence_ids``, its last hidden state) at its output positions is ``hidden`` (the cut
    ``resumable`` reruns to); in a batch, each row's positions are the same, shifted alike (a
    prompt's source left-padded to the longest)."""
    m = lm_loaded[name]
    src, dec, _ = forced_batch(m, pairs_of(m))  # two pairs of unequal lengths: padded
    batch = m.output_positions(src, dec)
    assert len(batch) == src.size(0)
    for b in range(src.size(0)):
        s, t = (unpadded(x[b : b + 1], m.pad_id)[0] for x in (src, dec))  # the row alone
        ids = m.sequence_ids(s, [*t[1:], m.eos_id])  # what it reads alone
        x = torch.tensor([ids], device=m.device)  # (1, N)
        with torch.no_grad(), m.evaluating():
            own = m.model(input_ids=x, output_hidden_states=True).hidden_states[-1][0]  # (N, D)
            alone = torch.tensor([s]), torch.tensor([t])  # (1, S), (1, T)
            at = m.output_positions(*alone)[0]
            assert torch.allclose(own[at], m.hidden(*alone)[0], atol=1e-5)
        in_batch = batch[b][: len(at)]  # its positions in the batch's sequence: shifted alike
        assert [p - at[0] for p in at] == [p - in_batch[0] for p in in_batch]
    with pytest.raises(ValueError):
        studio(False).output_positions(src, dec)  # two stacks: the decoder's stream is its outputs


def own_loss(m, pairs, heads) -> float:
    """Mean per-token cross-entropy of the pairs, one at a time, from the logits of the
    model's own pass from ids (``run``) with ``heads`` removed."""
    total, count = 0.0, 0
    gates = {}
    for h in heads:
        gates.setdefault((h.kind, h.layer), torch.ones(m.cfg.num_heads))[h.head] = 0.0
    for pair in pairs:
        src, dec, labels = forced_batch(m, [pair])  # (1, S), (1, T), (1, T)
        with torch.no_grad(), m.rows_gated(gates):
            logits = m.run(src, dec)[0]  # (T, V)
        total += float(F.cross_entropy(logits.float(), labels[0], reduction="sum"))
        count += len(pair[1])
    return total / count


def test_each_head_sets_loss_is_the_models_own_with_those_heads_removed(m):
    pairs = pairs_of(m, 4)
    kind, top = m.head_kinds[-1], m.layers(m.head_kinds[-1]) - 1
    first = m.head_kinds[0]
    sets = [
        [],
        [HeadSpec(first, 0, 1)],
        [HeadSpec(kind, top, 0), HeadSpec(first, 0, 3)],
        [HeadSpec(kind, top, h) for h in range(2)],
        [],
    ]
    sample = sample_of(m, Split(helpers.word_pairs(4)), 4, target_lang(m))
    measures = Measures(m, dataclasses.replace(sample, encoded=pairs))
    with m.evaluating():
        got = measures.losses(sets)
        for heads, loss in zip(sets, got):
            assert loss == pytest.approx(own_loss(m, pairs, heads), abs=1e-4), heads
    assert len({round(x, 6) for x in got}) > 1  # the sets do change the loss


@pytest.mark.parametrize("name", ONE_OF_EACH)
def test_head_importance_is_one_function_for_every_family(name, request, hf_models, lm_loaded):
    """BLEU and loss, or the loss alone where the capability row says so; each head's loss the
    model's own with that head removed (every family's losses: above); the progress reaching
    1 in order."""
    trained = name == "studio"
    m = request.getfixturevalue("tiny_model") if trained else model_of(name, hf_models, lm_loaded)
    sample = sample_of(m, Split(helpers.word_pairs(2)), 2, target_lang(m))
    seen = []
    result = head_importance(m, sample, lambda f, w: seen.append(f), target_lang(m))
    assert result.measured == measure_of(m)
    assert (result.bleu is None) == (m.supports("importance_bleu") is not None)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
    pairs = loss_pairs(m, sample) if result.bleu is None else sample.encoded
    assert result.loss == pytest.approx(own_loss(m, pairs, []), abs=1e-4)
    for row in result.heads[:: max(1, len(result.heads) // 3)]:  # a few heads of each kind
        head = HeadSpec(row["kind"], row["layer"], row["head"])
        assert row["loss"] == pytest.approx(own_loss(m, pairs, [head]), abs=1e-4), head


@pytest.mark.parametrize("name", ("studio post-LN", "marian"))
def test_head_roles_serve_a_model_of_two_stacks_by_attention_kind(name, hf_models, lm_loaded):
    """Issue 65: head roles read each attention over the tokens it reads (they were refused
    for two stacks: "read one attention over a whole sequence"); the numbers against each
    model's own weights are tests/test_head_roles.py's."""
    m = model_of(name, hf_models, lm_loaded)
    t = m.translate("i am cold .", DecodeSettings(max_len=4))
    assert m.supports("head_roles") is None
    r = head_roles(m, t)
    assert [a.kind for a in r.attentions] == ["encoder", "decoder_self", "cross"]
    assert lm_loaded["gpt2"].supports("head_roles") is None
    assert lm_loaded["bert"].supports("head_roles") is None
