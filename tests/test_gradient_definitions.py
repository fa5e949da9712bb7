"""The gradient methods against their definitions (issue 51, items 1, 5 and 6): the studio's
own integration (one row per integration point, a forward pass per group of steps) gives
captum's numbers on the model's full function; each choice inseq also offers equals inseq's
definition computed by hand, step by step as inseq computes it; the new functions
(entropy, probability difference, KL divergence) and baselines are what they say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.attribution.compose import normalised
from core.attribution.contrast import contrast
from core.attribution.gradients import (
    RULES,
    GradientChoices,
    baseline_ids,
    embedding_task,
    grad_input,
    integrated_gradients,
    path,
)
from core.attribution.methods import AttributionError, attribute
from core.model.checked_translation import translate_sentence
from core.model.parts import DecodeSettings

SENTENCE = "i'm home ."
HF_SOURCE, HF_TARGET = "i am cold the boy is tall .", "je suis froid le garçon est grand ."


@pytest.fixture(scope="module")
def studio_pair(tiny_model):
    t = translate_sentence(tiny_model, SENTENCE)
    return tiny_model, t


@pytest.fixture(scope="module", params=["studio", "marian", "bart"])
def any_pair(request, tiny_model, hf_loaded):
    """(model, translation) of the studio's tiny model and two tiny Hugging Face families."""
    if request.param == "studio":
        return tiny_model, translate_sentence(tiny_model, SENTENCE)
    m = hf_loaded[request.param]
    return m, m.force(HF_SOURCE, HF_TARGET, DecodeSettings())


def full_function(m, p, value=None):
    """(B, S, D), (B, T, D) -> (B, T): log p(y_t) (or ``value`` of (B, T, V) log p) through
    the model's full path, every step projected: what captum differentiated before."""

    def f(src_emb, tgt_emb):
        logp = m.log_probs_from_embeddings(p.src, p.tgt_in, src_emb, tgt_emb)  # (B, T, V)
        if value is not None:
            return value(logp)
        return logp.gather(-1, p.out_ids.expand(logp.size(0), -1)[..., None])[..., 0]

    return f


def copies(task):
    T = task.output_length
    return tuple(x.detach().expand(T, -1, -1).clone().requires_grad_() for x in task.embeddings)


@pytest.mark.parametrize("steps", [2, 7, 32])
def test_the_integration_rules_are_captums(steps):
    from captum.attr._utils.approximation_methods import approximation_parameters

    for rule in RULES:
        sizes, alphas = approximation_parameters(rule)
        ours = path(rule, steps)
        np.testing.assert_allclose(ours[0], alphas(steps), atol=1e-12, err_msg=rule)
        np.testing.assert_allclose(ours[1], sizes(steps), atol=1e-12, err_msg=rule)


@pytest.mark.parametrize("choices", [GradientChoices(), GradientChoices(baseline="unk", steps=9)])
def test_integrated_gradients_are_captums_on_the_full_function(any_pair, choices):
    from captum.attr import IntegratedGradients

    m, t = any_pair
    p = m.forced(t.src_ids, t.out_ids)
    task = embedding_task(m, p, choices=choices)
    inputs = copies(task)
    [start] = task.baselines(choices)
    start = tuple(b.detach().expand_as(x) for b, x in zip(start, inputs))
    parts = IntegratedGradients(full_function(m, p)).attribute(
        inputs, baselines=start, target=list(range(len(t.out_ids))), n_steps=choices.steps
    )
    expected = torch.cat([a.sum(-1) for a in parts], 1).detach()  # (T, S + T)
    got = integrated_gradients(task, choices=choices).scores
    T, S = len(t.out_ids), len(t.src_ids)
    causal = torch.cat([torch.ones(T, S), torch.ones(T, T).tril()], 1)
    torch.testing.assert_close(got * causal, expected * causal, atol=1e-5, rtol=1e-4)


def test_gradient_x_input_is_captums_on_the_full_function(any_pair):
    from captum.attr import InputXGradient

    m, t = any_pair
    p = m.forced(t.src_ids, t.out_ids)
    task = embedding_task(m, p)
    parts = InputXGradient(full_function(m, p)).attribute(
        copies(task), target=list(range(len(t.out_ids)))
    )
    expected = torch.cat([a.sum(-1) for a in parts], 1).detach()
    torch.testing.assert_close(grad_input(task).scores, expected, atol=1e-6, rtol=1e-5)


def inseq_by_hand(m, t, steps: int) -> np.ndarray:
    """inseq 0.7.1's integrated gradients at its defaults, computed as inseq does: one
    captum call per output step y_t, on the source and the prefix y_<t alone, explaining
    p(y_t); the baseline is the UNK token at every position but </s> and the start token
    (inseq keeps those two, not every special: BART's <s> is replaced); a token's
    score the L2 norm of its attribution over the embedding; each step's scores divided by
    their sum over source and prefix. Returns (T, S + T), later prefix columns 0."""
    from captum.attr import IntegratedGradients

    p = m.forced(t.src_ids, t.out_ids)
    specials = torch.tensor(sorted({m.eos_id, m.start_id}))
    unk = [
        torch.where(torch.isin(x, specials), x, torch.full_like(x, m.unk_id))
        for x in (p.src, p.tgt_in)
    ]
    src_emb, tgt_emb = m.embeddings(p.src, p.tgt_in)
    base_src, base_tgt = m.embeddings(*unk)
    T, S = len(t.out_ids), len(t.src_ids)
    rows = np.zeros((T, S + T))
    for step in range(T):
        prefix = p.tgt_in[:, : step + 1]

        def prob(x_src, x_tgt, prefix=prefix, step=step):
            logp = m.log_probs_from_embeddings(p.src, prefix, x_src, x_tgt)  # (B, t+1, V)
            return logp[:, step, int(t.out_ids[step])].exp()  # (B,)

        parts = IntegratedGradients(prob).attribute(
            (src_emb.detach(), tgt_emb[:, : step + 1].detach()),
            baselines=(base_src, base_tgt[:, : step + 1]),
            n_steps=steps,
        )
        scores = torch.cat([a[0].norm(dim=-1) for a in parts])  # (S + t + 1,)
        rows[step, : S + step + 1] = (scores / scores.sum()).detach().numpy()
    return rows


def test_inseqs_integrated_gradients_by_hand_equals_the_studios_with_its_choices(any_pair):
    m, t = any_pair
    inseq = GradientChoices("unk", True, 16, "gausslegendre", "l2", "prob")
    studio = attribute(m, t.src_ids, t.out_ids, "integrated-gradients", choices=inseq)
    np.testing.assert_allclose(studio.contributions, inseq_by_hand(m, t, 16), atol=1e-5)
    S = len(t.src_ids)
    assert studio.contributions[:, S - 1].max() < 1e-6  # </s> kept: it always scores 0
    assert studio.contributions[:, S].max() < 1e-6  # and the start token


def test_keeping_the_specials_keeps_the_end_and_the_start_token_only(hf_loaded):
    """Issue 67, item 1: the baseline kept every special token, so BART's source <s> and its
    forced <s> scored exactly 0 under integrated gradients (inseq's keep only </s> and the
    start token: up to 0.26 apart)."""
    m = hf_loaded["bart"]
    t = m.force(HF_SOURCE, HF_TARGET, DecodeSettings())
    bos = m.tokenizer.bos_token_id  # a special that is neither the end nor the start token
    assert bos in m.special_ids() and bos not in (m.eos_id, m.start_id)
    src, out = [bos, *t.src_ids], [bos, *t.out_ids]  # <s> read on both sides, as BART's
    base = baseline_ids(m, torch.tensor([src]), m.unk_id, keep=True)[0]
    assert base[0] == m.unk_id and base[-1] == m.eos_id
    choices = GradientChoices("unk", True, 16, "gausslegendre", "l2", "prob")
    e = attribute(m, src, out, "integrated-gradients", choices=choices)
    S = len(src)
    assert e.contributions[:, 0].min() > 1e-4  # the source <s> scores
    assert e.contributions[1:, S + 1].min() > 1e-4  # the forced <s>, once it is read
    assert e.contributions[:, S - 1].max() < 1e-6  # </s> kept: 0
    assert e.contributions[:, S].max() < 1e-6  # the start token kept: 0


def test_the_entropy_explained_is_the_steps_entropy(studio_pair):
    m, t = studio_pair
    p = m.forced(t.src_ids, t.out_ids)
    entropy = full_function(m, p, lambda logp: -(logp.exp() * logp).sum(-1))
    task = embedding_task(m, p, choices=GradientChoices(function="entropy"))
    inputs = copies(task)
    T = len(t.out_ids)
    out = entropy(*inputs)  # (T, T)
    grads = torch.autograd.grad(out.diagonal().sum(), inputs)
    expected = torch.cat([(g * x).sum(-1) for g, x in zip(grads, inputs)], 1).detach()
    torch.testing.assert_close(grad_input(task).scores, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(task.logp, out.diagonal().detach(), atol=1e-6, rtol=1e-5)
    with pytest.raises(AttributionError, match="needs an alternative"):
        attribute(m, t.src_ids, t.out_ids, "grad-input", choices=GradientChoices(function="kl"))
    assert T


@pytest.mark.parametrize("function", ["prob", "kl"])
def test_a_contrast_explains_the_probability_difference_or_the_kl_divergence(studio_pair, function):
    m, t = studio_pair
    foil = list(t.out_ids)
    foil[0] = next(i for i in range(4, 40) if i != foil[0])
    p = m.forced(t.src_ids, t.out_ids)
    logq = m.forced(t.src_ids, foil).logits[0].float().log_softmax(-1).detach()  # (T, V)
    own, other = (torch.tensor([ids]) for ids in (t.out_ids, foil))

    def value(logp):  # (B, T, V) -> (B, T)
        if function == "kl":
            return (logp.exp() * (logp - logq)).sum(-1)
        pick = [
            logp.gather(-1, i.expand(logp.size(0), -1)[..., None])[..., 0] for i in (own, other)
        ]
        return pick[0].exp() - pick[1].exp()

    task = embedding_task(m, p)
    inputs = copies(task)
    out = full_function(m, p, value)(*inputs)  # (T, T)
    grads = torch.autograd.grad(out.diagonal().sum(), inputs)
    T, S = len(t.out_ids), len(t.src_ids)
    expected = torch.cat([(g * x).sum(-1) for g, x in zip(grads, inputs)], 1).detach()
    expected = expected * torch.cat([torch.ones(T, S), torch.ones(T, T).tril()], 1)
    a = contrast(m, t, foil, "grad-input", GradientChoices(function=function))
    compared = [0] if function == "prob" else list(range(1, T))  # KL: after the prefixes part
    assert a.extra["contrast_steps"] == compared
    np.testing.assert_allclose(a.raw[compared], expected[compared].numpy(), atol=1e-6)
    assert not a.raw[[s for s in range(T) if s not in compared]].any()
    with pytest.raises(AttributionError, match="cannot contrast"):
        contrast(m, t, foil, "grad-input", GradientChoices(function="entropy"))


def test_no_normalisation_keeps_the_scores_as_aggregated(studio_pair):
    m, t = studio_pair
    raw = attribute(m, t.src_ids, t.out_ids, "integrated-gradients")
    kept = GradientChoices(normalisation="none")
    plain = attribute(m, t.src_ids, t.out_ids, "integrated-gradients", choices=kept)
    np.testing.assert_array_equal(plain.contributions, raw.raw)
    np.testing.assert_allclose(
        raw.contributions, normalised(torch.tensor(raw.raw).abs()), atol=1e-7
    )
    assert (plain.contributions < 0).any()  # signed: what a row's own sum means is kept


@pytest.mark.parametrize("baseline", ["uniform", "expected"])
def test_random_baselines_are_averaged_seeded_and_complete(studio_pair, baseline):
    m, t = studio_pair
    choices = GradientChoices(baseline=baseline, steps=48, samples=3)
    p = m.forced(t.src_ids, t.out_ids)
    task = embedding_task(m, p, choices=choices)
    starts = task.baselines(choices)
    assert len(starts) == 3 and not torch.equal(starts[0][0], starts[1][0])
    if baseline == "uniform":  # within the sentence's embedding range, per dimension
        low = task.embeddings[0].amin(dim=(0, 1))
        assert (starts[0][0] >= low - 1e-6).all()
    g = integrated_gradients(task, choices=choices)
    assert g.completeness < 0.05  # each row sums to f(x) - mean f(baseline)
    again = integrated_gradients(embedding_task(m, p, choices=choices), choices=choices)
    torch.testing.assert_close(g.scores, again.scores)  # the same draws each time
    one = integrated_gradients(
        task, choices=GradientChoices(baseline=baseline, steps=48, samples=1)
    )
    assert not torch.allclose(g.scores, one.scores)


def test_a_baseline_token_the_tokenizer_lacks_is_named(studio_pair):
    m, t = studio_pair
    with pytest.raises(AttributionError, match="no MASK token"):
        attribute(m, t.src_ids, t.out_ids, "integrated-gradients", choices=GradientChoices("mask"))


def test_the_baselines_offered_are_the_tokens_a_tokenizer_has():
    """Issue 69, item 8: MASK was offered for a tokenizer without a mask token."""
    from types import SimpleNamespace

    from core.attribution.gradients import BASELINES, baselines_of

    every = SimpleNamespace(unk_id=2, pad_id=0, mask_id=4)  # BART's tokenizer has all three
    assert baselines_of(every) == BASELINES
    studio = SimpleNamespace(unk_id=2, pad_id=0, mask_id=None)  # the studio's BPE: no mask
    assert baselines_of(studio) == tuple(b for b in BASELINES if b != "mask")
    bare = SimpleNamespace(unk_id=None, pad_id=None, mask_id=None)
    assert "unk" not in baselines_of(bare) and "zero" in baselines_of(bare)


def test_random_draws_times_steps_are_bounded_and_a_time_limit_stops_the_integral(studio_pair):
    from core.measure.progress import TimeLimit, time_limit

    m, t = studio_pair
    too_many = GradientChoices(baseline="expected", steps=256, samples=8)
    with pytest.raises(AttributionError, match="steps x random draws must be at most 1,024"):
        attribute(m, t.src_ids, t.out_ids, "integrated-gradients", choices=too_many)
    assert not GradientChoices(steps=256, samples=32).problems()  # draws unused from zero
    ticks = iter(range(0, 10**6, 100))
    with time_limit(1, clock=lambda: next(ticks)), pytest.raises(TimeLimit):
        attribute(m, t.src_ids, t.out_ids, "integrated-gradients")
