"""Removing heads of a model that reads a token sequence (the shipped induction model): its
sequence is scored teacher-forced with and without the heads (the loss and first choices on
its repeat), never decoded freely from its start token: ``python -m core.ablate --heads``
prints what the Remove heads section shows (its AppTest: tests/test_app_sequence_sections.py),
equal to the model's own forward from ids with the head's columns of W_o zeroed."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from core import ablate as ablate_cmd
from core.attention.task_sequence import task_sequence
from core.model import sites
from core.model.opened import open_model
from tests.helpers import ROOT

SHIPPED = ROOT / "checkpoints" / "induction-2l.hf"  # the shipped induction model
HEAD = "decoder_self:0:0"  # the previous-token head its induction head reads through


@pytest.fixture(scope="module")
def lm():
    return open_model(str(SHIPPED))


def command_lines(*extra: str) -> list[dict]:
    args = ablate_cmd.build_parser().parse_args(["--checkpoint", str(SHIPPED), *extra])
    return [json.loads(line) for line in ablate_cmd.run(args)]


def own_repeat_loss(model: torch.nn.Module, lm, sequence: str) -> tuple[float, int]:
    """(mean -log p, first choices) on the repeat, from ``model``'s own forward from ids."""
    out = lm.target_ids(sequence)  # the tokens, then the end token
    ids = torch.tensor([[lm.start_id, *out[:-1]]])  # (1, N): what the pass reads
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0].float().log_softmax(-1)  # (N, V)
    half = (len(out) - 1) // 2
    target = torch.tensor(out[half:-1])  # the repeat's tokens
    rows = logp[half : len(out) - 1]  # (half, V): the steps that predict them
    taken = rows.gather(-1, target[:, None])[:, 0]
    return -taken.mean().item(), int((rows.argmax(-1) == target).sum())


def test_the_command_scores_the_forced_sequence_as_the_model_computes_it(lm):
    sequence = task_sequence(lm)
    base, cut = command_lines("--heads", HEAD)
    assert base["heads"] == "" and cut["heads"] == HEAD
    assert base["repeat"] and base["scored"] == base["tokens"] // 2 == 16
    loss, firsts = own_repeat_loss(lm.model, lm, sequence)
    assert base["loss"] == pytest.approx(loss, abs=1e-5) and base["firsts"] == firsts
    zeroed = copy.deepcopy(lm.model)  # the head's columns of W_o zeroed by hand
    layer = sites.layers_of(sites.stack(zeroed, "decoder"))[0]
    w_o = sites.output_projection_of(layer, "decoder_self").weight  # (D, H * Dh)
    dh = w_o.size(1) // lm.cfg.num_heads
    with torch.no_grad():
        w_o[:, 0:dh] = 0
    loss, firsts = own_repeat_loss(zeroed, lm, sequence)
    assert cut["loss"] == pytest.approx(loss, abs=1e-5) and cut["firsts"] == firsts
    assert cut["loss"] > base["loss"] + 0.5  # the previous-token head carries the repeat


def test_the_command_refuses_heads_on_a_model_that_reads_sentences():
    args = ["--checkpoint", "checkpoints/fra-eng-small.pt", "--heads", "cross:0:0"]
    with pytest.raises(ablate_cmd.CommandError, match="reads sentences"):
        ablate_cmd.run(ablate_cmd.build_parser().parse_args(args))
