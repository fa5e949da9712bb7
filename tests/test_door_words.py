"""What the analysis once worked out of a model's family and now asks the door or its factory
(issue 65, P8): whether the server may open the model at a path (``core.model.opened
.open_problem``, within ``core.runs.budget.OPEN_BYTES``), a prompted model's template
positions (``core.model.interface.prompt_positions``), a one-stack model's weights over ids
of its own (``token_weights``) and what one output step's stream passes
through (``stream_layout``, which ``core.model.stream_terms`` takes apart)."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from core.model import opened
from core.model.hf_model import load as load_encoder_decoder
from core.model.interface import TranslationModel, prompt_positions, token_weights
from core.model.lm_loading import load as load_language_model
from core.model.parts import StreamTermsError
from core.model.record import attention_site
from core.runs import budget
from tests.hf_tiny import save_tiny
from tests.lm_tiny import save_tiny_lm
from tests.test_budget import TOO_LARGE, open_places
from tests.test_conformance import studio


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """The studio's model post-LN and pre-LN, a tiny Marian and a tiny GPT-2."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    root = tmp_path_factory.mktemp("door_words")
    return {
        "studio post-LN": studio(False),
        "studio pre-LN": studio(True),
        "marian": load_encoder_decoder(save_tiny(root / "marian", "marian")),
        "gpt2": load_language_model(save_tiny_lm(root / "gpt2", "gpt2")),
    }


SUBLAYERS = {  # the sub-layers each model's layers pass the stream through
    "studio post-LN": ["self", "cross", "mlp"],
    "studio pre-LN": ["self", "cross", "mlp"],
    "marian": ["self", "cross", "mlp"],
    "gpt2": ["self", "mlp"],
}


@pytest.mark.parametrize("name", sorted(SUBLAYERS))
def test_each_adapter_says_what_its_stream_passes_through(models, name):
    """Its decoder's (or one stack's) layers, each attention with its hook site and W_o, every
    module one of the model's own; a final norm where pre-LN; the output layer's modules."""
    m = models[name]
    lay = m.stream_layout()
    own = {id(x) for x in m.model.modules()}
    assert len(lay.layers) == m.cfg.num_decoder_layers
    for i, subs in enumerate(lay.layers):
        assert [s.name for s in subs] == SUBLAYERS[name]
        for s in subs:
            assert id(s.norm) in own
            if s.name == "mlp":
                assert s.site is None and s.w_o is None
            else:
                kind = "cross" if s.name == "cross" else "decoder_self"
                assert s.site == attention_site(kind, i) and id(s.w_o) in own
    assert lay.pre == (name != "studio post-LN" and name != "marian")
    assert (lay.final_norm is not None) == lay.pre
    assert lay.head and all(isinstance(x, nn.Module) and id(x) in own for x in lay.head)


def test_the_door_refuses_the_layout_of_a_model_that_does_not_say(models):
    with pytest.raises(StreamTermsError, match="does not say what its stream passes through"):
        TranslationModel.stream_layout(models["studio pre-LN"])


def test_a_prompted_models_template_positions_are_the_doors(models):
    """P: the template's tokens before the source (None for a model that reads no prompt)."""
    lm = models["gpt2"]
    assert prompt_positions(models["studio post-LN"]) is None
    assert prompt_positions(models["marian"]) is None
    P = prompt_positions(lm)
    src = lm.source("i am cold .").ids
    assert P > 0 and lm.sequence_spans(len(src), 3)[0].start <= P
    assert lm.sequence_spans(len(src), 3)[1].stop - P == len(src) + 3


def test_a_one_stack_models_weights_over_its_own_ids_are_its_own_forwards(models):
    """``token_weights``: the model's own ``output_attentions`` over the ids alone (no prompt
    around them); a model of two stacks reads no sequence of its own ids (ValueError)."""
    lm = models["gpt2"]
    ids = [*lm.start_ids(), 5, 9, 11, 5, 9, 11]
    with torch.no_grad():
        own = lm.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    weights = token_weights(lm, ids)  # (L, H, N, N)
    assert weights.shape == (lm.cfg.num_decoder_layers, lm.cfg.num_heads, len(ids), len(ids))
    torch.testing.assert_close(weights, torch.stack(own)[:, 0])
    for name in ("studio post-LN", "marian"):
        with pytest.raises(ValueError, match="one sequence"):
            token_weights(models[name], ids)


def test_the_factory_weighs_a_model_within_the_servers_limits(tmp_path, monkeypatch):
    """The factory answers what ``budget.open_problem`` asks, by where the model lies."""
    place, count = open_places(tmp_path, monkeypatch)
    limits = budget.OPEN_BYTES
    assert limits == {opened.CHECKPOINT: budget.MODEL_BYTES, opened.FOLDER: budget.HF_MODEL_BYTES}
    count(budget.MODEL_BYTES // 4 + 1)
    assert opened.open_problem(place["studio"], limits, budget.model_problem) == TOO_LARGE
    assert opened.open_problem(place["marian"], limits, budget.model_problem) is None
