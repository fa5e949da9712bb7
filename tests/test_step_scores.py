"""Step scores beside an attribution (issue 51, item 2): each equal to its definition on the
model's own logits from ids, the same on the page and in the command."""

from __future__ import annotations

import json
import math

import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution.contrast import foil_ids
from core.attribution.step_scores import step_scores
from core.model.checked_translation import translate_sentence

SENTENCE, TARGET, FOIL = "i'm home .", "je suis chez moi .", "je suis chez elle ."


def _logp(m, src_ids, out_ids) -> torch.Tensor:
    """(T, V) log p after ``out_ids``'s own prefix: the model's recorded pass from ids."""
    return m.forced(src_ids, out_ids).logits[0].float().log_softmax(-1)


@pytest.fixture(scope="module")
def forced(tiny_model):
    return translate_sentence(tiny_model, SENTENCE, target=TARGET)


def test_each_score_is_its_definition_on_the_models_own_logits(tiny_model, forced):
    s = step_scores(tiny_model, forced)
    logp = _logp(tiny_model, forced.src_ids, forced.out_ids)  # (T, V)
    rows = torch.arange(len(forced.out_ids))
    taken = logp[rows, forced.out_ids]
    assert s.probability == pytest.approx(taken.exp().tolist(), abs=1e-6)
    assert s.entropy == pytest.approx((-(logp.exp() * logp).sum(-1)).tolist(), abs=1e-5)
    assert s.rank == [int((row > v).sum()) + 1 for row, v in zip(logp, taken)]
    nll = (-taken).tolist()
    by_hand = [math.exp(sum(nll[: t + 1]) / (t + 1)) for t in range(len(nll))]
    assert s.perplexity == pytest.approx(by_hand, rel=1e-5)
    shown = len(forced.token_probs)  # what the translation itself says of its tokens
    assert s.probability[:shown] == pytest.approx(forced.token_probs, abs=1e-5)
    assert s.rank[:shown] == forced.ranks
    assert s.tokens[:shown] == forced.output_tokens


def test_against_a_contrast_the_kl_is_zero_until_the_prefixes_differ(tiny_model, forced):
    foil = foil_ids(tiny_model, forced, FOIL)
    s = step_scores(tiny_model, forced, foil)
    first = next(i for i, (a, b) in enumerate(zip(forced.out_ids, foil)) if a != b)
    assert s.kl[: first + 1] == pytest.approx([0.0] * (first + 1), abs=1e-6)
    assert s.kl[first + 1] > 0  # after the alternative word, another prefix
    logp = _logp(tiny_model, forced.src_ids, forced.out_ids)
    logq = _logp(tiny_model, forced.src_ids, foil)
    t = first + 1
    by_hand = float((logp[t].exp() * (logp[t] - logq[t])).sum())
    assert s.kl[t] == pytest.approx(by_hand, abs=1e-6)
    rows = torch.arange(len(foil))
    diff = (logp[rows, forced.out_ids].exp() - logp[rows, foil].exp()).tolist()
    assert s.probability_difference == pytest.approx(diff, abs=1e-6)
    assert s.contrast_tokens[first] == "elle"


def test_a_hugging_face_model_is_scored_through_the_interface(hf_loaded):
    hm = hf_loaded["marian"]
    t = translate_sentence(hm, "i am cold .")
    s = step_scores(hm, t)
    assert len(s.probability) == len(t.out_ids) and all(0 < p <= 1 for p in s.probability)
    assert s.probability[: len(t.token_probs)] == pytest.approx(t.token_probs, abs=1e-5)


def test_the_command_prints_the_same_scores(val_checkpoint, capsys):
    from core.model.opened import open_model

    args = ["--checkpoint", str(val_checkpoint), "--target", TARGET, "--contrast", FOIL]
    assert attribute_cmd.main([*args, "--method", "grad-input", SENTENCE]) == 0
    printed = json.loads(capsys.readouterr().out)["step_scores"]
    lm = open_model(str(val_checkpoint))
    t = translate_sentence(lm, SENTENCE, target=TARGET)
    assert printed == step_scores(lm, t, foil_ids(lm, t, FOIL)).to_json()
    assert set(printed) >= {"probability", "rank", "entropy", "perplexity", "kl"}


def test_the_attribution_section_shows_the_step_scores(studio_dirs):
    from tests.helpers import assert_clean, run_page_script

    at = run_page_script("attention.py", {"sentence": SENTENCE, "section": "attribution"})
    assert_clean(at)
    (panel,) = [x for x in at.expander if x.label.startswith("Step scores")]
    assert "Perplexity of the whole output" in panel.label
    table = panel.dataframe[0].value
    assert list(table.columns[:3]) == ["step", "token", "probability"]
    assert table["rank"].min() >= 1 and (table["entropy"] >= 0).all()
