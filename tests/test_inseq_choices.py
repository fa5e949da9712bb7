"""inseq's remaining choices (issue 67, item 4) on every family of the conformance suite: the
step functions ``logit``, ``crossentropy`` and P-CXMI against a contrast source, each from
the model's own logits from ids; span aggregation; saliency, DeepLIFT and GradientSHAP
against torch.autograd and captum's own classes called directly on a wrapper of the model;
the command's JSON equal to the page's library call."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from captum.attr import DeepLift, GradientShap
from torch import nn

from core import attribute as attribute_cmd
from core.attribution.captum_methods import seeded
from core.attribution.explain import explain, sentence_json, shown
from core.attribution.gradients import GradientChoices
from core.attribution.methods import AttributionError, attribute
from core.attribution.step_scores import contrast_source_ids, step_scores
from core.model.parts import DecodeSettings, TranslationError
from tests import test_conformance, test_lm_conformance
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import LM_FAMILIES

SOURCE, OTHER = "i am cold .", "you are tall ."
SETTINGS = DecodeSettings(max_len=6)
FAMILIES = ("studio", *CONFORMANCE, *LM_FAMILIES)


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    """(family, model) of each family: the studio's tiny model, then the Hugging Face ones."""
    family = request.param
    if family == "studio":
        return family, request.getfixturevalue("tiny_model")
    loaded = "hf_loaded" if family in CONFORMANCE else "lm_loaded"
    return family, request.getfixturevalue(loaded)[family]


def own_logits(family: str, m, src_ids, out_ids) -> torch.Tensor:
    """(T, V) the model's own logits from ids (not through the interface)."""
    src = torch.tensor([list(src_ids)])  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(list(out_ids))])  # (1, T)
    with torch.no_grad():
        if family == "studio":
            return m.model(src, tgt_in)[0][0].float()
        if family in CONFORMANCE:
            return test_conformance.own_pass(m, src, tgt_in)[0][0].float()
        logits, _, _, spans = test_lm_conformance.own_pass(m, list(src_ids), list(out_ids))
        return logits[spans[1]].float()  # the decoder inputs' positions


def translation(m):
    """The model's own translation of SOURCE (a few steps)."""
    return m.translate(SOURCE, SETTINGS)


def test_step_functions_are_their_definitions_from_the_model_s_own_logits(model):
    family, m = model
    t = translation(m)
    other = contrast_source_ids(m, OTHER)
    scores = step_scores(m, t, contrast_source=other)
    ids = torch.tensor(t.out_ids)[:, None]  # (T, 1)
    logits = own_logits(family, m, t.src_ids, t.out_ids)  # (T, V)
    logp = logits.log_softmax(-1).gather(-1, ids)[:, 0]  # (T,)
    against = own_logits(family, m, other, t.out_ids).log_softmax(-1).gather(-1, ids)[:, 0]
    close = dict(rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tensor(scores.logit), logits.gather(-1, ids)[:, 0], **close)
    torch.testing.assert_close(torch.tensor(scores.crossentropy), -logp, **close)
    bits = (against - logp) / np.log(2)  # inseq's pcxmi: -log2(p(y | x) / p(y | x'))
    torch.testing.assert_close(torch.tensor(scores.pcxmi), bits, **close)
    assert scores.contrast_source == m.source_tokens(other)


def test_pcxmi_is_zero_when_the_contrast_source_is_the_source(model):
    _, m = model
    t = translation(m)
    scores = step_scores(m, t, contrast_source=contrast_source_ids(m, SOURCE))
    assert np.allclose(scores.pcxmi, 0.0, atol=1e-6)


@pytest.mark.parametrize("text, words", [("", "empty"), ("a " * 61, "at most 60")])
def test_a_contrast_source_is_bounded_like_every_sentence(tiny_model, text, words):
    with pytest.raises(TranslationError, match=words):
        contrast_source_ids(tiny_model, text)


def embeddings_and_f(m, t):
    """(source and prefix embeddings, f(src_emb, tgt_emb) -> (B, T) log p(y_t) of every step)
    from the model's own ids path with the embeddings put in place."""
    src = torch.tensor([t.src_ids])  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(t.out_ids)])  # (1, T)
    ids = torch.tensor(t.out_ids)  # (T,)

    def f(src_emb, tgt_emb):
        logp = m.log_probs_from_embeddings(src, tgt_in, src_emb, tgt_emb)  # (B, T, V)
        return logp.gather(-1, ids.expand(logp.size(0), -1)[..., None])[..., 0]  # (B, T)

    return m.embeddings(src, tgt_in), f


class OneStep(nn.Module):
    """A function of the embeddings as a module, the model inside (captum's DeepLIFT hooks
    the model's own modules)."""

    def __init__(self, net, fn):
        super().__init__()
        self.net, self.fn = net, fn

    def forward(self, src_emb, tgt_emb):
        return self.fn(src_emb, tgt_emb)  # (B,)


def causal(t) -> np.ndarray:
    """(T, S + T) 1 where output token t may read the column."""
    S, T = len(t.src_ids), len(t.out_ids)
    return np.concatenate([np.ones((T, S)), np.tril(np.ones((T, T)))], axis=1)


def test_saliency_is_the_absolute_gradient_by_hand(model):
    _, m = model
    t = translation(m)
    (e_src, e_tgt), f = embeddings_and_f(m, t)
    rows = []
    for step in range(len(t.out_ids)):
        x = (e_src.detach().clone().requires_grad_(), e_tgt.detach().clone().requires_grad_())
        grads = torch.autograd.grad(f(*x)[0, step], x)  # (1, S, D), (1, T, D)
        rows.append(torch.cat([g[0].abs().norm(dim=-1) for g in grads]))  # (S + T,)
    expected = torch.stack(rows).numpy() * causal(t)  # (T, S + T)
    a = attribute(m, t.src_ids, t.out_ids, "saliency", choices=GradientChoices(aggregation="l2"))
    assert np.allclose(a.raw, expected, rtol=1e-4, atol=1e-6)
    assert np.allclose(a.contributions.sum(1), 1, atol=1e-5) and (a.contributions >= 0).all()


def captum_rows(m, t, method: str, samples: int = 32) -> np.ndarray:
    """(T, S + T) captum's own DeepLift or GradientShap from zero embeddings, one step at a
    time on a wrapper of the model (the prefix after the step cut off, as the library's
    rows read it: a causal decoder's later steps change nothing before them), summed over D."""
    (e_src, e_tgt), f = embeddings_and_f(m, t)
    rows = []
    with seeded():
        for step in range(len(t.out_ids)):
            cut = step + 1

            def log_p(src_emb, tgt_emb, step=step, cut=cut):  # (B,) with the prefix cut
                rest = e_tgt[:, cut:].expand(tgt_emb.size(0), -1, -1).detach()
                return f(src_emb, torch.cat([tgt_emb, rest], 1))[:, step]

            inputs = (e_src.detach().clone(), e_tgt[:, :cut].detach().clone())
            zero = tuple(torch.zeros_like(x) for x in inputs)
            wrapper = OneStep(m.model, log_p)
            if method == "deeplift":
                parts = DeepLift(wrapper).attribute(inputs, baselines=zero)
            else:
                shap = GradientShap(wrapper)
                parts = shap.attribute(inputs, baselines=zero, n_samples=samples, stdevs=0.0)
            later = torch.zeros(len(t.out_ids) - cut)
            rows.append(torch.cat([parts[0][0].sum(-1), parts[1][0].sum(-1), later]).detach())
    return torch.stack(rows).numpy() * causal(t)


@pytest.mark.parametrize("method", ["deeplift", "gradient-shap"])
def test_deeplift_and_gradient_shap_equal_captum_s_own_classes(model, method):
    _, m = model
    t = translation(m)
    if m.supports(method):
        pytest.skip(m.supports(method))
    few = GradientChoices(steps=4)  # GradientSHAP's samples (DeepLIFT takes none)
    a = attribute(m, t.src_ids, t.out_ids, method, choices=few)
    assert np.allclose(a.raw, captum_rows(m, t, method, samples=4), rtol=1e-4, atol=1e-5)
    again = attribute(m, t.src_ids, t.out_ids, method, choices=few)
    assert np.array_equal(a.raw, again.raw)  # seeded: the same each time
    assert a.completeness is not None


def test_deeplift_reports_how_far_it_is_from_completeness(model):
    """captum's rules act on nn.ReLU/Softmax/... modules only: through layer norms, GELU
    and attention's products DeepLIFT passes the plain gradient, so completeness is not
    exact on a transformer; the error reported is the one computed here."""
    _, m = model
    t = translation(m)
    a = attribute(m, t.src_ids, t.out_ids, "deeplift")
    (e_src, e_tgt), f = embeddings_and_f(m, t)
    with torch.no_grad():
        change = f(e_src, e_tgt)[0] - f(torch.zeros_like(e_src), torch.zeros_like(e_tgt))[0]
    delta = a.raw.sum(1) - change.numpy()
    expected = np.abs(delta).sum() / np.abs(change.numpy()).sum()
    assert a.completeness == pytest.approx(expected, rel=1e-3, abs=1e-5)


def by_hand(c: np.ndarray, rows, cols) -> np.ndarray:
    """entry (i, j): the mean over the rows of group i of the sum over the columns of group j."""
    return np.array([[np.mean([sum(c[r, k] for k in C) for r in R]) for C in cols] for R in rows])


def test_spans_are_sums_of_columns_and_means_of_rows(model):
    _, m = model
    t = translation(m)
    e = explain(m, t, "grad-input")
    S, T = len(e.source), len(e.output)
    if S < 4 or T < 3:
        pytest.skip("too short a sentence for two spans")
    merged = shown(e, spans=("0:2,2:4", "0:2"))
    rows = [[0, 1], *([r] for r in range(2, T))]  # the output span 0:2, then one token each
    source = [[0, 1], [2, 3], *([k] for k in range(4, S))]
    prefix = [[0], [1, 2], *([k] for k in range(3, T))]  # decoder inputs 1, 2 read outputs 0, 1
    for matrix, again in ((e.contributions, merged.contributions), (e.attribution.raw, None)):
        expected = np.concatenate(
            [by_hand(matrix[:, :S], rows, source), by_hand(matrix[:, S:], rows, prefix)], 1
        )
        got = again if again is not None else merged.attribution.raw
        assert np.allclose(got, expected, atol=1e-6)
    assert np.allclose(merged.contributions.sum(1), 1, atol=1e-5)
    assert merged.attribution.source_length == S - 2
    assert merged.source[:2] == [" ".join(e.source[0:2]), " ".join(e.source[2:4])]
    assert merged.output[0] == " ".join(e.output[0:2]) and len(merged.output) == T - 1


@pytest.mark.parametrize(
    "spans, words",
    [
        (("0:2,1:3", ""), "overlap"),
        (("0:99", ""), "out of range"),
        (("", "2:2"), "out of range"),
        (("x", ""), "is not a:b"),
    ],
)
def test_bad_spans_are_refused_in_one_line(tiny_model, spans, words):
    e = explain(tiny_model, translation(tiny_model), "alti")
    with pytest.raises(AttributionError, match=words) as caught:
        shown(e, spans=spans)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("family", ["studio", "bart", "gpt2"])
def test_the_command_prints_the_page_s_library_call(family, request, tiny_checkpoint, capsys):
    if family == "studio":
        path, m = tiny_checkpoint, request.getfixturevalue("tiny_model")
    else:
        place = "hf" if family in CONFORMANCE else "lm"
        path = request.getfixturevalue(f"{place}_models")[family]
        m = request.getfixturevalue(f"{place}_loaded")[family]
    for method in ("saliency", "deeplift", "gradient-shap"):
        args = ["--checkpoint", str(path), "--method", method, "--contrast-source", OTHER]
        args += ["--source-spans", "0:2", "--target-spans", "0:2", SOURCE]
        assert attribute_cmd.main(args) == 0
        printed = json.loads(capsys.readouterr().out)
        t = m.translate(SOURCE, DecodeSettings())
        page = sentence_json(m, t, method, contrast_source=OTHER, spans=("0:2", "0:2"))
        printed.pop("seconds"), page.pop("seconds")
        assert printed == page
        assert "pcxmi" in printed["step_scores"] and printed["method"] == method


def test_the_file_mode_reads_a_contrast_source_per_line(tiny_model, tmp_path):
    from core.attribution.file_mode import attribute_file

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{SOURCE}\t\t\t{OTHER}\n{SOURCE}\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs, out, "saliency")
    first, second = (json.loads(x) for x in out.read_text(encoding="utf-8").splitlines())
    t = tiny_model.translate(SOURCE, DecodeSettings())
    own = sentence_json(tiny_model, t, "saliency", contrast_source=OTHER)["step_scores"]
    assert first["step_scores"] == own and first["contrast_source_text"] == OTHER
    assert "pcxmi" not in second["step_scores"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--source-spans", "0:1", "--input", "x.tsv", "--out", "y.jsonl"], "spans name one"),
        (["--contrast-source", "x", "--input", "x.tsv", "--out", "y.jsonl"], "fourth column"),
        (["--faithfulness", "--contrast-source", "x"], "leave out --faithfulness"),
        (["--words", "--source-spans", "0:1", "i am ."], "not both"),
        (["--source-spans", "0:1,0:2", "i am ."], "overlap"),
    ],
)
def test_bad_flags_are_one_line_errors(tiny_checkpoint, capsys, args, message):
    assert attribute_cmd.main(["--checkpoint", str(tiny_checkpoint), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("method", ["saliency", "deeplift", "gradient-shap"])
def test_the_new_methods_contrast_like_the_other_gradient_methods(tiny_model, method):
    from core.attribution.explain import explain_contrast

    t = translation(tiny_model)
    foil = list(t.out_ids)
    foil[0] = next(i for i in range(4, 40) if i != foil[0])  # another word at step 0
    e = explain_contrast(tiny_model, t, foil, method, GradientChoices(steps=4))
    raw = e.attribution.raw
    assert e.attribution.extra["contrast_steps"] == [0]
    assert np.abs(raw[0]).sum() > 0 and (raw[1:] == 0).all()  # only the step compared
