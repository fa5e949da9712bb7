"""A model's layers run again from any layer's input (``core.model.layer_runs``: TransformerLens's
``start_at_layer`` / ``stop_at_layer``): on every family of the conformance suite (the studio's
Transformer, pre- and post-LN; each tiny Hugging Face encoder-decoder; each tiny decoder-only
and masked model with its real checkpoints' flags: RoPE, grouped-query attention, ALiBi, T5's
position bias), the stack run from layer k's input, taken from the record, gives the record's
last layer output and logits, and stopped at layer j the record's output of layer j - 1; the
layers below k are not run, and a copy of the stream at a larger batch reads the kept inputs
broadcast."""

from __future__ import annotations

import pytest
import torch

from core.attribution import value_zeroing
from core.model.hf_model import load
from core.model.layer_runs import LayerInputs, layer_calls
from core.model.record import SIDES
from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES
from tests.test_conformance import CONFIGURATIONS, batch, perturbed, studio

ATOL = 1e-5


@pytest.fixture(scope="module", params=CONFIGURATIONS)
def two_stacks(request, hf_models):
    """(an encoder-decoder of each configuration, its record of one sentence, (src, tgt_in))."""
    if request.param.startswith("studio"):
        m = studio(request.param.endswith("pre-LN"))
    else:
        m = load(hf_models[request.param])
        perturbed(m.model, 2)
    src, tgt_in, out = batch(m)
    return m, m.forced(src[0].tolist(), out[0].tolist()), (src, tgt_in)


@pytest.fixture(scope="module", params=(*LM_FAMILIES, *ENCODER_FAMILIES))
def one_stack(request, lm_loaded):
    """(a decoder-only or masked model of each family, its record, (src, tgt_in))."""
    m = lm_loaded[request.param]
    if m.supports("translate"):  # a masked LM: its sentence's mask filled
        from core.model.parts import DecodeSettings

        src_ids = m.source(m.example_sentence).ids
        out_ids = m.translate(m.example_sentence, DecodeSettings(max_len=8)).out_ids
    else:
        src_ids, out_ids = m.source("i am cold .").ids, m.target_ids("je suis froid .")
    p = m.forced(src_ids, out_ids)
    return m, p, (p.src, p.tgt_in)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal within ``ATOL`` (the largest difference in the message of a failing assert)."""
    return torch.allclose(a, b, atol=ATOL)


def check_stack(kept: LayerInputs, inputs: list, outputs: list, side: str) -> None:
    """From every layer k's input: to the end the last output, stopped at j layer j - 1's."""
    L = len(outputs)
    for k in range(L):
        got = kept.run(side, k, inputs[k])
        assert close(got, outputs[-1]), (side, k, (got - outputs[-1]).abs().max())
        for j in range(k + 1, L + 1):
            assert close(kept.run(side, k, inputs[k], stop=j), outputs[j - 1]), (side, k, j)
        assert torch.equal(kept.run(side, k, inputs[k], stop=k), inputs[k])  # no layer run


def test_an_encoder_decoder_runs_from_any_layer_as_the_whole_pass(two_stacks):
    m, p, (src, tgt_in) = two_stacks
    with torch.no_grad():
        kept = layer_calls(m, src, tgt_in)
        for side in SIDES:
            check_stack(kept, p.layer_inputs[side], p.layer_outputs[side], side)
            last = kept.run(side, 1, p.layer_inputs[side][1])  # (1, S|T, D)
            if side == "decoder":
                assert close(m.lens(last), p.logits)
            else:  # the encoder's output, through its final norm, read by the decoder
                memory = m.encode(src)
                assert close(m.run(src, tgt_in, memory=memory), p.logits)


def test_a_one_stack_model_runs_from_any_layer_as_the_whole_pass(one_stack):
    m, p, (src, tgt_in) = one_stack
    whole = p.one_stack
    inputs = [whole.attention[0].resid_pre, *whole.layer_outputs[:-1]]  # L x (1, N, D)
    with torch.no_grad():
        kept = layer_calls(m, src, tgt_in)
        check_stack(kept, inputs, whole.layer_outputs, "sequence")
        last = kept.run("sequence", 1, inputs[1])  # (1, N, D)
        assert close(m.lens(last[:, whole.steps]), p.logits)
        copies = kept.run("sequence", 1, inputs[1].expand(3, -1, -1))  # (3, N, D): broadcast
        assert all(close(c[None], whole.layer_outputs[-1]) for c in copies)  # ALiBi's too


def test_the_layers_below_the_start_are_not_run_and_a_batch_reads_the_kept_inputs(two_stacks):
    m, p, (src, tgt_in) = two_stacks
    ran: list[str] = []
    watch = [(f"{side}.{i}.in", lambda x, name: ran.append(name)) for side in SIDES for i in (0, 1)]
    with torch.no_grad():
        kept = layer_calls(m, src, tgt_in)  # every layer's call, once
        assert "decoder.1" in kept.calls and kept.depth("decoder") == 2
        copies = p.layer_inputs["decoder"][1].expand(3, -1, -1)  # (3, T, D)
        with m.hooks(watch):
            got = kept.run("decoder", 1, copies, stop=2)  # (3, T, D)
    assert ran == ["decoder.1.in"]
    assert got.shape[0] == 3 and all(close(g[None], p.layer_outputs["decoder"][1]) for g in got)


def test_a_run_is_refused_inside_a_capture_and_past_the_stack(two_stacks):
    m, p, (src, tgt_in) = two_stacks
    with torch.no_grad():
        kept = layer_calls(m, src, tgt_in)
        with pytest.raises(ValueError, match="layers 1..9 of encoder"):
            kept.run("encoder", 1, p.layer_inputs["encoder"][1], stop=9)
        with LayerInputs(), pytest.raises(RuntimeError):
            kept.run("encoder", 0)


def batches_at(m, site: str, run) -> list[int]:
    """The batch sizes that reach ``site`` while ``run()`` runs."""
    seen: list[int] = []
    with m.hooks([(site, lambda x, name: seen.append(x.size(0)))]):
        run()
    return seen


def test_value_zeroings_copies_start_at_the_zeroed_layer(two_stacks):
    """Issue 65 item 2: a layer's zeroed copies run that layer alone; the layers below it run
    once, at the sentence's batch of 1 (they ran once per copy, L² layer passes in all)."""
    m, p, _ = two_stacks
    below = {
        "encoder.0.self.v": lambda: value_zeroing.encoder_matrix(m, p, 1),
        "decoder.0.self.v": lambda: value_zeroing.decoder_step(m, p, 1),
    }
    for site, run in below.items():
        assert set(batches_at(m, site, run)) == {1}, site
    assert max(batches_at(m, "encoder.1.self.v", below["encoder.0.self.v"])) > 1  # the copies


def test_a_one_stack_models_zeroed_copies_start_at_the_zeroed_layer(one_stack):
    m, p, _ = one_stack
    run = lambda: value_zeroing.sequence_matrix(m, p, 1)  # noqa: E731
    assert set(batches_at(m, "decoder.0.self.v", run)) == {1}
    assert max(batches_at(m, "decoder.1.self.v", run)) > 1  # the copies
