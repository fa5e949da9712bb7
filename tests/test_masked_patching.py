"""Activation patching on masked language models (BERT, RoBERTa, DistilBERT, ELECTRA: tiny
random models with their hub checkpoints' flags, ``tests/lm_tiny.py``): the question is read
at the two sentences' first mask (``core.attention.patching_question``), and every figure is
checked against the model's own forward from ids, heads replaced by hand at its own output
projection; attribution and path patching share the question; the page and the command give
the library's figures."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from core import patch as patch_cmd
from core.attention import patch_sites, patching
from core.attention.attribution_patching import attribution_patch
from core.attention.patch_sites import Component
from core.attention.patching import ask, patch
from core.attention.patching_question import MASKED_EXAMPLE, example_pair, last_logits, mask_text
from core.attention.path_patching import LOGITS, path_patch
from core.model import lm_sites
from core.model.masked import MaskedModel
from core.model.parts import TranslationError
from tests.lm_tiny import ENCODER_FAMILIES

ANSWERS = ("he", "you")  # one piece each in every tiny vocabulary, in the mask's place


@pytest.fixture(scope="module", params=ENCODER_FAMILIES)
def mlm(request, lm_loaded) -> MaskedModel:
    return lm_loaded[request.param]


def pair(m) -> tuple[str, str]:
    """A clean and a corrupted sentence a word apart, one length in every tiny vocabulary,
    their mask at one position."""
    mask = mask_text(m)
    return f"the boy is {mask} .", f"the girl is {mask} ."


def own_metric(m, ids: torch.Tensor, answers: tuple[int, int], at: int, hook=None) -> float:
    """logit(answer) - logit(wrong) at position ``at`` by the model's own forward from ids
    (``hook``: a forward pre-hook on (layer, head)'s output projection, (layer, fn))."""
    handle = None
    if hook is not None:
        layer, fn = hook
        dense = lm_sites.output_projection_of(lm_sites.layers_of(m.model)[layer])
        handle = dense.register_forward_pre_hook(fn)
    try:
        with torch.no_grad(), m.evaluating():
            logits = m.model(input_ids=ids).logits[0, at]  # (V,)
    finally:
        if handle is not None:
            handle.remove()
    return float(logits[answers[0]] - logits[answers[1]])


def question(m, **asked):
    clean, corrupt = pair(m)
    with m.evaluating():
        return ask(m, clean, corrupt, **({"answers": ANSWERS} | asked))


# ----------------------------------------------------------------------------- the question


def test_the_metric_at_the_first_mask_is_the_models_own(mlm):
    q = question(mlm)
    at = q.clean[0].tolist().index(mlm.mask_id)
    assert q.tgt_in.tolist() == [[mlm.mask_id]]  # no prefix: the mask is the one input
    for src in (q.clean, q.corrupt):
        with torch.no_grad(), mlm.evaluating():
            got = float(q.metric(last_logits(mlm, src, q.tgt_in))[0])
        assert got == pytest.approx(own_metric(mlm, src, q.answers, at), abs=1e-5)
    result = patch(mlm, *pair(mlm), [], answers=ANSWERS)
    assert result.clean_metric == pytest.approx(own_metric(mlm, q.clean, q.answers, at), abs=1e-5)
    assert result.corrupt_metric == pytest.approx(
        own_metric(mlm, q.corrupt, q.answers, at), abs=1e-5
    )
    assert (result.answer, result.wrong, result.chosen) == (*mlm.target_tokens(q.answers), True)
    assert result.prefix == [mask_text(mlm)] and result.sequence == result.clean


def test_unasked_the_answers_are_each_runs_likeliest_fill(mlm):
    clean, corrupt = pair(mlm)
    sentences = [f"{clean} {mask_text(mlm)} ."] * 2  # a second mask: the first one is read
    sentences[1] = sentences[1].replace("boy", "girl")
    ids = [torch.tensor([mlm.source(s).ids]) for s in sentences]
    at = ids[0][0].tolist().index(mlm.mask_id)
    with torch.no_grad():
        best = [int(mlm.model(input_ids=x).logits[0, at].argmax()) for x in ids]
    if best[0] == best[1]:  # a random model may fill both the same: said in one line
        with pytest.raises(TranslationError, match="Both runs answer"):
            patch(mlm, *sentences, [])
        return
    result = patch(mlm, *sentences, [])
    assert [result.answer, result.wrong] == mlm.target_tokens(best) and not result.chosen


@pytest.mark.parametrize(
    ("clean", "corrupt", "prefix", "message"),
    [
        ("the boy is tall .", "the girl is tall .", None, "neither sentence has one"),
        ("the boy is {mask} .", "the girl is tall .", None, "the corrupted sentence has none"),
        ("the boy {mask} tall .", "the boy is tall {mask}", None, "must sit at the same positions"),
        ("the boy is {mask} .", "the girl is {mask} .", "le", "after no target prefix"),
    ],
)
def test_a_question_without_one_mask_in_both_is_refused_before_any_pass(
    mlm, monkeypatch, clean, corrupt, prefix, message
):
    monkeypatch.setattr(mlm, "hidden", lambda *a, **k: pytest.fail("a pass ran"))
    mask = mask_text(mlm)
    clean, corrupt = (s.format(mask=mask) for s in (clean, corrupt))
    assert len(mlm.source(clean).ids) == len(mlm.source(corrupt).ids)
    with pytest.raises(TranslationError, match=message) as e:
        patch(mlm, clean, corrupt, prefix=prefix, answers=ANSWERS)
    assert "\n" not in str(e.value)


def test_an_answer_is_one_piece_in_the_masks_place(mlm):
    clean = pair(mlm)[0]
    at = mlm.source(clean).ids.index(mlm.mask_id)
    filled = [mlm.source(clean.replace(mask_text(mlm), w)).ids[at] for w in ANSWERS]
    assert question(mlm).answers == tuple(filled)  # as the sentence reads it there
    with pytest.raises(TranslationError, match="“went to” is more than one word"):
        question(mlm, answers=("he", "went to"))


# ----------------------------------------------------------------------------- patching


def test_patching_a_layers_whole_output_gives_the_clean_metric_and_nothing_gives_none(mlm):
    clean, corrupt = pair(mlm)
    layers = mlm.layers("encoder_stream")
    at = mlm.source(clean).ids.index(mlm.mask_id)
    every = [Component("encoder_stream", i) for i in range(layers)]  # every position
    last = layers - 1
    at_mask = [Component("encoder_stream", last, position=at)]  # the one position read
    elsewhere = [Component("encoder_stream", last, position=0)]  # nothing reads it but itself
    result = patch(mlm, clean, corrupt, every + at_mask + elsewhere, answers=ANSWERS)
    gap = result.gap
    moved = [r["effect"] * gap for r in result.rows]  # m_patched - m_corrupt, in logits
    for got in moved[: layers + 1]:
        assert got == pytest.approx(gap, abs=1e-5)  # the clean run's metric: effect 1
    assert moved[-1] == pytest.approx(0.0, abs=1e-5)
    with torch.no_grad(), mlm.evaluating():  # nothing patched: the receiving run's own values
        q = question(mlm)
        sites = [patch_sites.site(c, mlm) for c in every]
        _, own = patching._recorded(mlm, sites, q.corrupt, q.tgt_in)
        metrics = patching.patched_metrics(mlm, every, own, q.corrupt, q.tgt_in, q.answers)
    assert metrics.tolist() == pytest.approx([result.corrupt_metric] * layers, abs=1e-5)
    kinds = {c.kind for c in patching.components(mlm, 7, 1, sequence_len=7)}
    assert kinds == {"encoder", "encoder_stream"}  # its one stream: the sentence's


@pytest.mark.parametrize("where", ["every position", "the mask"])
def test_one_heads_patch_is_its_output_replaced_at_the_output_projection(mlm, where):
    q = question(mlm)
    at = q.clean[0].tolist().index(mlm.mask_id)
    layer, head = 0, 1
    position = None if where == "every position" else at
    width = mlm.cfg.d_model // mlm.cfg.num_heads
    columns = slice(head * width, (head + 1) * width)
    rows = slice(None) if position is None else position
    kept = {}

    def keep(module, args):
        kept["x"] = args[0].detach().clone()  # (1, S, D): every head's output, before W_o

    def put(module, args):
        x = args[0].clone()
        x[0, rows, columns] = kept["x"][0, rows, columns]
        return (x, *args[1:])

    own_metric(mlm, q.clean, q.answers, at, (layer, keep))
    by_hand = own_metric(mlm, q.corrupt, q.answers, at, (layer, put))
    c = Component("encoder", layer, head, position=position)
    result = patch(mlm, *pair(mlm), [c], answers=ANSWERS)
    got = result.corrupt_metric + result.rows[0]["effect"] * result.gap
    assert abs(by_hand - result.corrupt_metric) > 1e-5  # the head moves the metric
    assert got == pytest.approx(by_hand, abs=1e-6)
    noised = patch(mlm, *pair(mlm), [c], answers=ANSWERS, direction="noise")  # the other way
    own_metric(mlm, q.corrupt, q.answers, at, (layer, keep))
    by_hand = own_metric(mlm, q.clean, q.answers, at, (layer, put))
    got = noised.clean_metric - noised.rows[0]["effect"] * noised.gap
    assert got == pytest.approx(by_hand, abs=1e-6)


def test_every_selection_patches_on_a_masked_model(mlm):
    result = patch(mlm, *pair(mlm), answers=ANSWERS, selection=tuple(patching.SELECTIONS))
    N = len(result.clean)
    assert result.axes()["encoder"] == result.clean and result.axes()["decoder_mlp"] == result.clean
    counts = {}
    for r in result.rows:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    L, H = mlm.layers("encoder"), mlm.cfg.num_heads
    assert counts == {"encoder": L * H * (1 + N + 4), "decoder_mlp": L * N, "encoder_stream": L * N}
    assert all(abs(r["effect"]) < 1e6 for r in result.rows)


# ----------------------------------------------------------------------------- the two others


def test_attribution_patching_estimates_the_first_order_term_beside_real_patching(mlm):
    result = attribution_patch(mlm, *pair(mlm), answers=ANSWERS)
    real = patch(mlm, *pair(mlm), answers=ANSWERS)
    rows = result.patching.rows
    assert [{k: v for k, v in r.items() if k != "estimate"} for r in rows] == real.rows
    errors = [abs(r["estimate"] - r["effect"]) for r in rows]
    assert result.largest_error == pytest.approx(max(errors))
    print(f"{mlm.model_type}: Spearman {result.spearman}, largest error {result.largest_error:.3f}")
    q = question(mlm)
    chosen = [Component("encoder", 0, 1), Component("encoder_stream", 0, position=2)]
    estimated = attribution_patch(mlm, *pair(mlm), chosen, exact=False, answers=ANSWERS)
    for c, row in zip(chosen, estimated.patching.rows):  # the slope, by central differences
        h = 1e-3
        slope = (_moved(mlm, q, c, h) - _moved(mlm, q, c, -h)) / (2 * h)
        assert row["estimate"] * estimated.patching.gap == pytest.approx(slope, rel=2e-2, abs=5e-4)


def _moved(m, q, c: Component, eps: float) -> float:
    """The corrupted run's metric with ``c`` moved ``eps`` of the way to the clean run's."""
    site = patch_sites.site(c, m)
    with torch.no_grad():
        _, d = patching._recorded(m, [site], q.clean, q.tgt_in)
        _, r = patching._recorded(m, [site], q.corrupt, q.tgt_in)
    where = slice(None) if c.position is None else c.position

    def hook(x, name):
        x = x.clone()
        if c.kind in patching.KINDS:
            x[:, :, c.head] = r[site][:, :, c.head] + eps * (d[site] - r[site])[:, :, c.head]
        else:
            x[:, where] = r[site][:, where] + eps * (d[site] - r[site])[:, where]
        return x

    with torch.no_grad(), m.evaluating(), m.hooks([(site, hook)]):
        return float(q.metric(last_logits(m, q.corrupt, q.tgt_in))[0])


def test_path_patching_to_the_logits_from_a_last_layer_head_is_activation_patching(mlm):
    sender = Component("encoder", mlm.layers("encoder") - 1, mlm.cfg.num_heads - 1)
    path = path_patch(mlm, *pair(mlm), LOGITS, [sender], answers=ANSWERS)
    real = patch(mlm, *pair(mlm), [sender], answers=ANSWERS)
    assert path.patching.rows[0]["effect"] * real.gap == pytest.approx(
        real.rows[0]["effect"] * real.gap, abs=1e-5
    )
    upstream = path_patch(mlm, *pair(mlm), [Component("encoder", 0, 0)], [sender], answers=ANSWERS)
    assert upstream.patching.rows[0]["effect"] == pytest.approx(0.0, abs=1e-6)


# ----------------------------------------------------------------------------- command, page


def test_the_command_prints_the_librarys_figures(lm_models, lm_loaded, capsys):
    m = lm_loaded["bert"]
    clean, corrupt = pair(m)
    args = ["--checkpoint", str(lm_models["bert"]), "--clean", clean, "--corrupt", corrupt]
    assert patch_cmd.main([*args, "--answers", *ANSWERS]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    done = patch(m, clean, corrupt, answers=ANSWERS)
    assert lines[:-1] == done.rows and lines[-1] == done.summary()
    assert patch_cmd.main([*args, "--answers", *ANSWERS, "--method", "attribution"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    estimated = attribution_patch(m, clean, corrupt, answers=ANSWERS)
    assert lines[:-1] == estimated.patching.rows and lines[-1] == estimated.summary()
    assert patch_cmd.main([*args, "--prefix", "le", "--answers", *ANSWERS]) == 2
    err = capsys.readouterr().err
    assert "after no target prefix" in err and err.count("\n") == 1


def test_the_example_pair_holds_the_models_own_mask(mlm):
    clean, corrupt = example_pair(mlm)
    assert mask_text(mlm) in clean and mask_text(mlm) in corrupt
    assert len(mlm.source(clean).ids) == len(mlm.source(corrupt).ids)


def test_the_page_offers_and_runs_patching_on_a_masked_model(studio_dirs, lm_models):
    from tests.helpers import assert_clean, plain, run_page_script

    shutil.copytree(lm_models["bert"], studio_dirs["checkpoints"] / "bert")
    query = {"model": "checkpoints/bert/", "sentence": "the boy is [MASK] .", "section": "patch"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert at.radio(key="at_section").value == "patch" and not at.warning
    at.button(key="at_patch_example").click().run()
    assert_clean(at)
    assert at.text_input(key="at_corrupt").value == example_pair_of_bert()[1]
    at.checkbox(key="at_patch_ask").check().run()
    assert not [b for b in at.text_input if b.key == "at_patch_prefix"]  # no step to choose
    at.text_input(key="at_patch_answer").set_value(ANSWERS[0])
    at.text_input(key="at_patch_wrong").set_value(ANSWERS[1]).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    shown = plain(" ".join(m.value for m in at.markdown))
    assert "At the first [MASK] (position 2)" in shown and "“he” (clean)" in shown
    assert len(at.get("plotly_chart")) == 2  # the heads, the stream
    at.radio(key="at_patch_method").set_value("attribution").run()
    assert_clean(at)
    assert "against real patching: Spearman" in plain(" ".join(m.value for m in at.markdown))
    at.radio(key="at_patch_method").set_value("path").run()
    assert_clean(at)
    assert "through logits only" in plain(" ".join(m.value for m in at.markdown))
    assert not at.error, [e.value for e in at.error]


def example_pair_of_bert() -> tuple[str, str]:
    """BERT's example pair, as the page fills it."""
    clean, corrupt = (s.format(mask="[MASK]") for s in MASKED_EXAMPLE)
    return clean, corrupt
