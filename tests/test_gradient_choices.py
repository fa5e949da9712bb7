"""The gradient methods' choices (issue 51, item 1): baseline, steps and rule, aggregation,
function; each as its definition, the defaults as the studio always computed them, the page
and the command the same."""

from __future__ import annotations

import json

import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution.explain import explain, sentence_json
from core.attribution.gradients import (
    DEFAULT_CHOICES,
    GradientChoices,
    baseline_ids,
    embedding_task,
    integrated_gradients,
)
from core.attribution.methods import AttributionError, attribute
from core.model.checked_translation import translate_sentence

SENTENCE = "i'm home ."


@pytest.fixture(scope="module")
def pass_of(tiny_model):
    t = translate_sentence(tiny_model, SENTENCE)
    return t, tiny_model.forced(t.src_ids, t.out_ids)


def test_the_defaults_are_what_the_studio_always_computed(tiny_model, pass_of):
    t, _ = pass_of
    for method in ("grad-input", "integrated-gradients"):
        a = attribute(tiny_model, t.src_ids, t.out_ids, method)
        b = attribute(tiny_model, t.src_ids, t.out_ids, method, choices=GradientChoices())
        assert (a.raw == b.raw).all() and "choices" not in a.extra


def test_a_token_baseline_is_that_tokens_embedding_from_ids(tiny_model, pass_of):
    """The UNK baseline's function value equals the model's own computation on UNK ids."""
    t, p = pass_of
    task = embedding_task(tiny_model, p)
    unk = GradientChoices(baseline="unk")
    [(src_emb, tgt_emb)] = task.baselines(unk)
    at_baseline = task.log_probs(src_emb, tgt_emb)[0]  # (T,)
    src, tgt_in = (torch.full_like(x, tiny_model.unk_id) for x in (p.src, p.tgt_in))
    logp = tiny_model.run(src, tgt_in).float().log_softmax(-1)[0]  # (T, V) from ids
    own = logp.gather(-1, p.out_ids[0][:, None])[:, 0]
    assert torch.allclose(at_baseline, own, atol=1e-5)
    kept = baseline_ids(tiny_model, p.tgt_in, tiny_model.unk_id, keep=True)
    assert kept[0, 0] == p.tgt_in[0, 0] and (kept[0, 1:] == tiny_model.unk_id).all()


@pytest.mark.parametrize("function", ["log-prob", "prob"])
def test_integrated_gradients_from_unk_is_complete_for_each_function(tiny_model, pass_of, function):
    """Each row sums to f(x) - f(baseline) (the error reported), f = log p or p."""
    _, p = pass_of
    choices = GradientChoices(baseline="unk", steps=64, function=function)
    g = integrated_gradients(embedding_task(tiny_model, p, choices=choices), choices=choices)
    assert g.completeness < 0.05
    task = embedding_task(tiny_model, p, choices=choices)
    [start] = task.baselines(choices)
    change = task.logp - task.log_probs(*start)[0].detach()  # (T,)
    causal = torch.cat([torch.ones(p.output_length, p.source_length), p.tgt_mask[0, 0].float()], 1)
    sums = (g.scores * causal).sum(-1)
    assert float((sums - change).abs().sum() / change.abs().sum()) < 0.05


def test_the_aggregations_are_their_definitions_over_captums_attributions(tiny_model, pass_of):
    from captum.attr import InputXGradient

    from core.attribution.gradients import grad_input

    _, p = pass_of
    task = embedding_task(tiny_model, p)
    T = task.output_length
    inputs = tuple(x.detach().expand(T, -1, -1).clone().requires_grad_() for x in task.embeddings)
    with torch.enable_grad():
        parts = InputXGradient(task.log_probs).attribute(inputs, target=list(range(T)))
    by_hand = {
        "sum": torch.cat([a.sum(-1) for a in parts], 1),
        "l2": torch.cat([a.norm(dim=-1) for a in parts], 1),
        "abs-sum": torch.cat([a.abs().sum(-1) for a in parts], 1),
    }
    for name, expected in by_hand.items():
        got = grad_input(task, GradientChoices(aggregation=name)).scores
        assert torch.allclose(got, expected.detach(), atol=1e-6), name


def test_choices_it_cannot_compute_are_named(tiny_model, pass_of):
    t, _ = pass_of
    bad = GradientChoices(baseline="blurred", steps=1, rule="simpson")
    with pytest.raises(AttributionError) as e:
        attribute(tiny_model, t.src_ids, t.out_ids, "integrated-gradients", choices=bad)
    assert "baseline must be one of" in str(e.value) and "steps must be" in str(e.value)
    assert "rule must be one of" in str(e.value)


def test_a_result_names_its_choices_and_the_command_prints_the_same(
    tiny_model, tiny_checkpoint, pass_of, capsys, monkeypatch
):
    t, _ = pass_of
    choices = GradientChoices(baseline="unk", keep_specials=True, steps=16, aggregation="l2")
    e = explain(tiny_model, t, "integrated-gradients", choices=choices)
    out = e.to_json()
    assert out["choices"] == choices.to_json()
    assert out["choices_words"].startswith("from the UNK token's embedding, specials kept")
    assert "choices" not in explain(tiny_model, t, "integrated-gradients").to_json()
    flags = ["--baseline", "unk", "--keep-specials", "--steps", "16", "--aggregation", "l2"]
    args = ["--checkpoint", str(tiny_checkpoint), "--method", "integrated-gradients", *flags]
    assert attribute_cmd.main([*args, SENTENCE]) == 0
    printed = json.loads(capsys.readouterr().out)
    here = sentence_json(tiny_model, t, "integrated-gradients", choices=choices)
    for key in ("contributions", "raw", "choices", "choices_words", "step_scores"):
        assert printed[key] == here[key], key
    assert DEFAULT_CHOICES.to_json()["steps"] == 32


def test_the_page_offers_the_choices_and_names_them(studio_dirs):
    from tests.helpers import assert_clean, plain, run_page_script

    query = {"sentence": SENTENCE, "section": "attribution", "method": "integrated-gradients"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    at.selectbox(key="atr_baseline").set_value("unk").run()
    at.selectbox(key="atr_aggregation").set_value("l2").run()
    assert_clean(at)
    assert not at.error
    words = [plain(c.value) for c in at.caption if "Computed with" in c.value]
    assert words and "from the UNK token's embedding" in words[0] and "L2 norm" in words[0]


def test_the_page_draws_unnormalised_scores_signed_and_random_baselines(studio_dirs):
    from tests.helpers import assert_clean, plain, run_page_script

    query = {"sentence": SENTENCE, "section": "attribution", "method": "integrated-gradients"}
    at = run_page_script("attention.py", query)
    at.selectbox(key="atr_normalisation").set_value("none").run()
    at.selectbox(key="atr_baseline").set_value("uniform").run()
    at.number_input(key="atr_samples").set_value(2).run()
    assert_clean(at)
    assert not at.error
    words = [plain(c.value) for c in at.caption if "Computed with" in c.value]
    assert "uniformly random embeddings, 2 draws" in words[0] and "not normalised" in words[0]
    fig = next(c for c in at.get("plotly_chart") if "score=" in c.proto.spec)
    assert '"zmin":-' in fig.proto.spec.replace(" ", "")  # signed: the scale centred on 0


def test_the_contrast_explains_a_probability_difference_on_the_page(studio_dirs):
    from tests.helpers import assert_clean, run_page_script

    query = {"sentence": SENTENCE, "section": "attribution", "method": "grad-input"}
    at = run_page_script("attention.py", query)
    before = [c.proto.spec for c in at.get("plotly_chart") if "rather than" in c.proto.spec]
    at.radio(key="atr_contrast_function").set_value("prob").run()
    assert_clean(at)
    after = [c.proto.spec for c in at.get("plotly_chart") if "rather than" in c.proto.spec]
    assert before and after and before != after


def test_the_command_explains_the_kl_divergence_of_a_contrast(tiny_checkpoint, pass_of, capsys):
    t, _ = pass_of
    args = ["--checkpoint", str(tiny_checkpoint), "--method", "grad-input", "--function", "kl"]
    assert attribute_cmd.main([*args, SENTENCE]) == 2  # no contrast: one line why
    assert "needs an alternative" in capsys.readouterr().err
    foil = "je suis à la porte ."  # words the tiny model knows (an unknown one is refused)
    assert attribute_cmd.main([*args, "--contrast", foil, SENTENCE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["choices"]["function"] == "kl" and "KL" in out["choices_words"]
    first = out["contrast_steps"][0]
    assert first >= 1 and out["step_scores"]["kl"][first] > 0
