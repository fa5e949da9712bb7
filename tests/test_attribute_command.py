"""Faithfulness of attribution methods (occlusion, Spearman, deletion) and ``core.attribute``."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from core import attribute as attribute_cmd
from core.attribution import faithfulness as fa
from core.attribution.methods import GRADIENT_METHODS, METHODS
from core.model.checkpoints import trained_data
from core.model.studio_model import StudioModel
from tests.helpers import TINY, with_validation_split

UNK = StudioModel.unk_id  # what occlusion puts in a word's place

ROW_KEYS = {"method", "name", "spearman", "spearman_ci95", "deletion", "sentences", "seconds"}


@pytest.fixture(autouse=True)
def runs_root(tmp_path, monkeypatch):
    """Cached faithfulness tables go to a temporary runs root."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture(scope="module")
def val_cases(val_checkpoint):
    """(StudioModel, its validation sample, the model's own translations of it)."""
    lm = StudioModel.load(val_checkpoint)
    sample = fa.validation_sample(lm, trained_data(lm.meta, str(TINY)), 6)
    return lm, sample, fa.translate_sample(lm, sample)


def test_occlusion_puts_unk_over_every_piece_of_the_chosen_words():
    spans = [(0, 2), (2, 3), (3, 5)]
    assert fa.occluded([9, 8, 7, 6, 5, 2], spans, [0, 2], UNK) == [3, 3, 7, 3, 3, 2]
    assert fa.occluded([9, 8, 7, 6, 5, 2], spans, [], UNK) == [9, 8, 7, 6, 5, 2]
    assert fa.occluded([9, 8, 7, 6, 5, 2], spans, [1], 42) == [9, 8, 42, 6, 5, 2]  # its unknown


def test_batched_log_probs_equal_the_recorded_pass(val_cases):
    lm, _, cases = val_cases
    case = cases[0]
    p = lm.forced(case.src_ids, case.out_ids)
    again = fa.output_logp(lm, [case.src_ids] * 3, case.out_ids)
    assert np.allclose(again.numpy(), p.logp.numpy()[None], atol=1e-5)


def test_deletion_removes_each_output_token_s_own_top_words():
    case = fa.Case([10, 11, 12, 2], [5, 2], [(0, 1), (1, 2), (2, 3)])
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]])  # (T, W)
    rows = fa.deletion_sources(case, scores, (1, 2), UNK)
    assert rows == [[10, 3, 12, 2], [10, 3, 3, 2], [3, 11, 12, 2], [3, 11, 3, 2]]


def test_spearman_per_token_leaves_out_constant_rows():
    scores = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [3.0, 2.0, 1.0]])
    effects = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1], [0.1, 0.2, 0.3]])
    assert fa.row_spearman(scores, effects) == pytest.approx((1.0 - 1.0) / 2)
    assert np.isnan(fa.row_spearman(scores[1:2], effects[1:2]))


def test_a_method_that_ranks_by_occlusion_itself_is_perfect(val_cases, monkeypatch):
    """Scores equal to the occlusion effects give rho = 1: the measure can tell."""
    lm, _, cases = val_cases
    case = max(cases, key=lambda c: len(c.spans))
    singles = [fa.occluded(case.src_ids, case.spans, [w], UNK) for w in range(len(case.spans))]
    logp = fa.output_logp(lm, [case.src_ids, *singles], case.out_ids).numpy()
    effects = (logp[0] - logp[1:]).T  # (T, W)
    monkeypatch.setattr(fa, "rankings", lambda *a: {"oracle": effects, "anti": -effects})
    result = fa.measure_case(lm, case, [], np.random.default_rng(0), {})
    assert result["oracle"][0] == pytest.approx(1.0) and result["anti"][0] == pytest.approx(-1.0)
    oracle_k1, anti_k1 = np.mean(result["oracle"][1][0]), np.mean(result["anti"][1][0])
    assert oracle_k1 >= anti_k1


def test_faithfulness_ranks_methods_with_the_random_baseline_and_is_cached(
    val_checkpoint, runs_root, monkeypatch
):
    lm = StudioModel.load(val_checkpoint)
    first = fa.faithfulness_for(lm, val_checkpoint, 6, ("attention", "alti"), str(TINY))
    assert [r["method"] for r in first.methods if r["method"] == "random"] == ["random"]
    assert {r["method"] for r in first.methods} == {"attention", "alti", "random"}
    for row in first.methods:
        assert set(row) == ROW_KEYS and len(row["deletion"]) == 3
        assert row["spearman"] is None or -1 <= row["spearman"] <= 1
    rhos = [r["spearman"] for r in first.methods if r["spearman"] is not None]
    assert rhos == sorted(rhos, reverse=True)
    assert list((runs_root / ".attribution").glob("*.json"))
    monkeypatch.setattr(fa, "faithfulness", lambda *a, **k: pytest.fail("computed again"))
    again = fa.faithfulness_for(lm, val_checkpoint, 6, ("alti", "attention"), str(TINY))
    assert again.cached and again.methods == first.methods
    assert fa.lookup_faithfulness(val_checkpoint, lm, 5, ("attention", "alti")) is None


def test_the_faithfulness_table_gains_a_row_per_chosen_gradient_method(
    val_checkpoint, runs_root, capsys
):
    """Issue 51, item 6: which baseline is most faithful for this model?"""
    from core.attribution.gradients import GradientChoices

    lm = StudioModel.load(val_checkpoint)
    unk = GradientChoices(baseline="unk", aggregation="l2")
    methods = ("alti", "grad-input", "integrated-gradients")
    result = fa.faithfulness_for(lm, val_checkpoint, 6, methods, str(TINY), choices=unk)
    rows = {r["method"]: r for r in result.methods}
    chosen = [m for m in rows if m.startswith(("grad-input (", "integrated-gradients ("))]
    assert len(chosen) == 2 and {"alti", "grad-input", "integrated-gradients"} <= set(rows)
    ig = rows[f"integrated-gradients ({unk.words('integrated-gradients')})"]
    assert ig["choices"] == unk.to_json() and "from the UNK token's embedding" in ig["name"]
    plain = fa.faithfulness_for(lm, val_checkpoint, 6, methods, str(TINY))  # another key
    assert not plain.cached and len(plain.methods) == 4
    assert fa.lookup_faithfulness(val_checkpoint, lm, 6, methods, choices=unk) is not None
    args = ["--checkpoint", str(val_checkpoint), "--faithfulness", "--sentences", "6"]
    flags = ["--data", str(TINY), "--method", "grad-input"]  # grad-input has no baseline
    assert attribute_cmd.main([*args, *flags, "--aggregation", "l2"]) == 0
    printed = [json.loads(x)["method"] for x in capsys.readouterr().out.splitlines()]
    assert "grad-input" in printed and any(m.startswith("grad-input (") for m in printed)


def test_the_command_prints_one_json_object_per_sentence(val_checkpoint, capsys):
    for method in METHODS:
        args = ["--checkpoint", str(val_checkpoint), "--method", method, "i'm home ."]
        assert attribute_cmd.main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["method"] == method and out["source"][-1] == "<eos>"
        c = np.array(out["contributions"])
        assert c.shape == (len(out["output"]), len(out["source"]) + len(out["prefix"]))
        assert np.allclose(c.sum(1), 1, atol=1e-4) and (c >= 0).all()
        assert np.allclose(out["source_share"], c[:, : len(out["source"])].sum(1), atol=1e-4)
        assert ("raw" in out) == (method in GRADIENT_METHODS)


def test_the_attention_method_takes_a_layer_and_a_head(val_checkpoint, capsys):
    args = ["--checkpoint", str(val_checkpoint), "--method", "attention", "--layer", "0"]
    assert attribute_cmd.main([*args, "--head", "1", "i'm home ."]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["layer"], out["head"]) == (0, "1")


def test_the_command_prints_the_faithfulness_table(val_checkpoint, capsys):
    args = ["--checkpoint", str(val_checkpoint), "--faithfulness", "--sentences", "6"]
    assert attribute_cmd.main([*args, "--data", str(TINY), "--method", "rollout"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["method"] for r in rows] in (["rollout", "random"], ["random", "rollout"])
    assert all(set(r) == ROW_KEYS | {"sample"} for r in rows)
    lm = StudioModel.load(val_checkpoint)
    shown = fa.faithfulness_for(lm, val_checkpoint, 6, ("rollout",), str(TINY))  # as the page
    assert shown.cached and shown.sentences == 6 and shown.tokens > shown.sentences
    sample = {"sentences": 6, "tokens": shown.tokens, "skipped": 0, "seconds": shown.seconds}
    for r in rows:  # the figures the page states above its table, read from the same cache
        assert r["sample"] == sample | {"cached": False}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "lime", "hello ."], "unknown method 'lime'"),
        (["   "], "give a sentence"),
        (["--method", "alti", "--method", "norm", "hello ."], "one --method"),
        (["--faithfulness", "--sentences", "0"], "from 1 to 1,000 (got 0)"),
        (["--method", "attention", "--layer", "7", "hello ."], "layer must be"),
        (["--method", "attention", "--head", "x", "hello ."], "--head: must be"),
        (["--input", "p.tsv", "--out", "r.jsonl", "--contrast", "x"], "leave out --contrast"),
        (["--input", "p.tsv", "--out", "r.jsonl", "--target", "x"], "leave out --target"),
        (["--method", "occlusion", "hello ."], "occlusion explains a contrast only"),  # "unknown"
        (["--contrast-source", "", "hello ."], "--contrast-source is blank"),  # was dropped
        (["--contrast-source", "  ", "hello ."], "--contrast-source is blank"),
    ],
)
def test_bad_input_is_a_one_line_error_and_exit_2(val_checkpoint, capsys, args, message):
    assert attribute_cmd.main(["--checkpoint", str(val_checkpoint), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_unreadable_checkpoint_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    assert attribute_cmd.main(["--checkpoint", str(bad), "hello ."]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_model_trained_without_validation_pairs_says_so(tiny_checkpoint, capsys):
    assert attribute_cmd.main(["--checkpoint", str(tiny_checkpoint), "--faithfulness"]) == 2
    assert "validation" in capsys.readouterr().err


def test_a_bpe_model_occludes_whole_words(bpe_run, tmp_path):
    """Faithfulness of a BPE model: a word's pieces are occluded together, scores summed."""
    checkpoint = with_validation_split(bpe_run / "last.pt", tmp_path / "bpe-val.pt")
    lm = StudioModel.load(checkpoint)
    sample = fa.validation_sample(lm, trained_data(lm.meta, str(TINY)), 6)
    cases = fa.translate_sample(lm, sample)
    pieces = [lm.src_vocab.segment(words)[0] for words in sample.sources]
    assert any(len(p) > len(w) for p, w in zip(pieces, sample.sources))  # some word is cut
    for case, words in zip(cases, sample.sources):
        assert len(case.spans) == len(words) and case.spans[-1][1] == len(case.src_ids) - 1
    result = fa.faithfulness(lm, sample, ("alti", "grad-input"))
    assert {r["method"] for r in result.methods} == {"alti", "grad-input", "random"}
    assert result.tokens == sum(len(c.out_ids) for c in cases if c.spans)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--function", "kl", "i'm home ."],
            "kl needs an alternative translation: give --contrast",
        ),
        (["--method", "grad-input", "--function", "kl", "i'm home ."], "give --contrast"),
        (["--faithfulness", "--function", "kl"], "kl compares two translations: leave it out"),
        (["--function", "prob", "i'm home ."], "--function changes only grad-input"),
        (["--aggregation", "l2", "i'm home ."], "leave it out with alti"),
        (["--method", "norm", "--normalisation", "none", "i'm home ."], "--normalisation"),
        (["--method", "grad-input", "--baseline", "unk", "i'm home ."], "--baseline changes"),
        (["--method", "saliency", "--steps", "16", "i'm home ."], "--steps changes only"),
        (["--method", "deeplift", "--steps", "16", "i'm home ."], "--steps changes only"),
        (["--method", "gradient-shap", "--rule", "riemann_left", "i'm home ."], "--rule"),
        (["--method", "alti", "--samples", "4", "i'm home ."], "--samples changes only"),
        (["--method", "integrated-gradients", "--samples", "4", "x ."], "uniform, expected"),
        (["--method", "deeplift", "--keep-specials", "x ."], "--keep-specials changes only"),
        (["--faithfulness", "--method", "rollout", "--baseline", "unk"], "with rollout"),
        (["--faithfulness", "--steps", "8"], "--steps changes only"),  # its default methods
    ],
)
def test_a_choice_no_method_asked_reads_is_refused(val_checkpoint, capsys, args, message):
    """--function kl needs a contrast, and a gradient choice given to a method that does
    not read it is refused in one line, not silently dropped."""
    assert attribute_cmd.main(["--checkpoint", str(val_checkpoint), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--method", "alti", "--baseline", "zero", "--steps", "32", "--function", "log-prob"],
        ["--method", "integrated-gradients", "--baseline", "uniform", "--samples", "4"],
        ["--method", "gradient-shap", "--baseline", "unk", "--keep-specials", "--steps", "8"],
        ["--method", "occlusion", "--contrast", "je suis là .", "--function", "kl"],
        ["--faithfulness", "--baseline", "unk", "--aggregation", "l2"],  # deeplift reads them
        ["--input", "a.tsv", "--out", "b.jsonl", "--method", "saliency", "--function", "kl"],
    ],
)
def test_choices_a_method_reads_and_defaults_are_taken(args):
    parsed = attribute_cmd.build_parser().parse_args(["--checkpoint", "x", *args, "x ."])
    parsed.sentence = [] if parsed.input or parsed.faithfulness else parsed.sentence
    assert attribute_cmd.problem(parsed) is None


def test_the_parser_s_defaults_are_the_default_choices():
    from core.attribution.gradients import DEFAULT_CHOICES, choices_from

    parsed = attribute_cmd.build_parser().parse_args(["--checkpoint", "x", "x ."])
    assert choices_from(parsed) == DEFAULT_CHOICES


def test_the_documented_examples_pass_the_flag_checks():
    """Every ``python -m core.attribute`` line of docs/commands.md parses and is not refused."""
    docs = (Path(__file__).parents[1] / "docs" / "commands.md").read_text(encoding="utf-8")
    lines = re.findall(r"^python -m core\.attribute (.+)$", docs, re.M)
    assert len(lines) >= 8
    for line in lines:
        parsed = attribute_cmd.build_parser().parse_args(shlex.split(line))
        assert attribute_cmd.problem(parsed) is None, line


def test_the_help_names_the_defaults():
    helped = " ".join(attribute_cmd.build_parser().format_help().split())
    assert "(default: alti; grad-input with --contrast)" in helped
    assert "--baseline BASELINE one of zero, unk, pad, mask, uniform, expected (default: zero)" in (
        helped
    )
    assert "GradientSHAP's samples (default: 32)" in helped and "integration points" in helped


def test_a_prompted_models_attribution_reads_the_pages_template_and_length(lm_models, capsys):
    """Audit: the Attribution section reads the template box and Max output length; the
    command had neither flag, so it could not print what the page showed."""
    from core.attribution.explain import sentence_json
    from core.model.checked_translation import translate_sentence
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings

    template = "Say: {src} x\nFrench:"
    argv = ["--checkpoint", str(lm_models["gpt2"]), "--method", "alti", "--max-len", "3"]
    assert attribute_cmd.main([*argv, "--prompt", template, "the boy"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    lm = open_model(str(lm_models["gpt2"]), prompt=template)
    t = translate_sentence(lm, "the boy", DecodeSettings(max_len=3, prompt=template))
    page = sentence_json(lm, t, "alti")  # what the section shows, from the same library
    assert len(out["output"]) == 3 and out["output"] == page["output"]
    assert np.allclose(out["contributions"], page["contributions"], atol=1e-6)
