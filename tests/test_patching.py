"""Activation patching (core.attention.patching, ``python -m core.patch``): its invariants —
patching nothing new gives 0, patching all the decoder reads of the clean source gives 1 —
and the command's lines."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core import patch as patch_cmd
from core.attention import patch_sites, patching, patching_question
from core.attention.patch_sites import ENCODER_OUTPUT, Component
from core.attention.patching import DIRECTIONS, patch
from core.attention.patching_question import gap_caveat
from core.model.parts import TranslationError
from core.model.studio_model import StudioModel

CLEAN, CORRUPT = "the cat sees the dog .", "the dog sees the cat ."


def _run_parts(m):
    """(sources, decoder inputs, answers) of the test pair, as ``patch`` builds them."""
    (a, _), (b, _) = patching_question.checked_sources(m, CLEAN, CORRUPT)
    with m.evaluating():
        out_a, out_b = (m.greedy(torch.tensor([ids]), 50)[0].tolist() for ids in (a, b))
    step = next(t for t, (x, y) in enumerate(zip(out_a, out_b)) if x != y)
    tgt_in = torch.tensor([[m.start_id, *out_a[:step]]])
    return torch.tensor([a]), torch.tensor([b]), tgt_in, (out_a[step], out_b[step])


def test_every_component_is_patched_once_with_a_finite_effect(tiny_model):
    result = patch(tiny_model, CLEAN, CORRUPT)
    cfg = tiny_model.model.cfg
    heads = [r for r in result.rows if "head" in r]
    assert len(heads) == (cfg.num_encoder_layers + 2 * cfg.num_decoder_layers) * cfg.num_heads
    streams = [r for r in result.rows if "position" in r]
    source, target = len(result.clean), len(result.prefix)
    assert len(streams) == cfg.num_encoder_layers * source + cfg.num_decoder_layers * target
    assert all(torch.isfinite(torch.tensor(r["effect"])) for r in result.rows)
    assert result.clean_metric > 0 > result.corrupt_metric  # each run's own answer wins
    assert result.answer != result.wrong


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_patching_what_the_decoder_reads_of_the_clean_source_gives_one(tiny_model, direction):
    cfg = tiny_model.model.cfg
    last = cfg.num_decoder_layers - 1
    chosen = [
        Component(ENCODER_OUTPUT, 0),  # the memory at every position, the same prefix
        Component("encoder_stream", cfg.num_encoder_layers - 1),  # all the memory is made of
    ]
    result = patch(tiny_model, CLEAN, CORRUPT, chosen, direction=direction)
    step = len(result.prefix) - 1
    chosen_last = [Component("decoder_stream", last, position=step)]  # what the logits read
    result_last = patch(tiny_model, CLEAN, CORRUPT, chosen_last, direction=direction)
    for row in result.rows + result_last.rows:
        assert row["effect"] == pytest.approx(1.0, abs=1e-5)


def test_patching_the_corrupted_runs_own_activations_gives_zero(tiny_model):
    m = tiny_model
    _, src_b, tgt_in, answers = _run_parts(m)
    chosen = patching.components(m, src_b.size(1), tgt_in.size(1))
    sites = list(dict.fromkeys(patch_sites.site(c, m) for c in chosen))
    with torch.no_grad(), m.evaluating():
        logits = m.run(src_b, tgt_in)  # (1, T, V): the corrupted run, no hook on
        _, own = patching._recorded(m, sites, src_b, tgt_in)
        metrics = patching.patched_metrics(m, chosen, own, src_b, tgt_in, answers)
    m_corrupt = float(logits[0, -1, answers[0]] - logits[0, -1, answers[1]])
    assert torch.allclose(metrics, torch.full_like(metrics, m_corrupt), atol=1e-5)


def test_noising_is_denoising_with_the_sentences_swapped(tiny_model):
    noised = patch(tiny_model, CLEAN, CORRUPT, direction="noise")
    swapped = patch(tiny_model, CORRUPT, CLEAN)
    assert noised.summary()["direction"] == "noise" and noised.prefix == swapped.prefix
    assert [r["effect"] for r in noised.rows] == pytest.approx(
        [r["effect"] for r in swapped.rows], abs=1e-5
    )


def test_a_prefix_and_answers_given_ask_the_same_question_as_found(tiny_model):
    found = patch(tiny_model, CLEAN, CORRUPT)
    prefix, answers = " ".join(found.prefix[1:]), (found.answer, found.wrong)
    for asked in (patch(tiny_model, CLEAN, CORRUPT, prefix=prefix, answers=answers),
                  patch(tiny_model, CLEAN, CORRUPT, prefix=prefix)):  # fmt: skip
        assert asked.chosen and not found.chosen
        effects = [r["effect"] for r in asked.rows]
        assert effects == pytest.approx([r["effect"] for r in found.rows], abs=1e-5)
        assert (asked.answer, asked.wrong, asked.prefix) == (
            found.answer,
            found.wrong,
            found.prefix,
        )
    other = patch(tiny_model, CLEAN, CORRUPT, prefix="", answers=(found.wrong, found.answer))
    assert other.prefix == ["<bos>"] and other.summary()["step"] == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prefix": "", "answers": ("le", "le")}, "give two different answer words"),
        ({"prefix": "", "answers": ("le", "zzzqx")}, "one word the model knows"),
        ({"prefix": "zzzqx"}, "words the model does not know"),
        ({"direction": "sideways"}, "direction is one of"),
    ],
)
def test_a_question_that_cannot_be_asked_is_a_message(tiny_model, kwargs, message):
    with pytest.raises(TranslationError, match=message):
        patch(tiny_model, CLEAN, CORRUPT, **kwargs)


def test_rows_of_a_batch_do_not_touch_each_other(tiny_model, monkeypatch):
    together = patch(tiny_model, CLEAN, CORRUPT).rows
    monkeypatch.setattr(patching, "ROWS", 1)  # one component per pass
    alone = patch(tiny_model, CLEAN, CORRUPT).rows
    assert [r["effect"] for r in together] == pytest.approx([r["effect"] for r in alone], abs=1e-5)


@pytest.mark.parametrize(
    "clean, corrupt, message",
    [
        ("the cat sleeps .", "the cat sees the dog .", "the same length in pieces"),
        (CLEAN, CLEAN, "The two sentences are the same"),
    ],
)
def test_sentences_that_cannot_be_compared_are_a_message(tiny_model, clean, corrupt, message):
    with pytest.raises(TranslationError, match=message):
        patch(tiny_model, clean, corrupt)


def test_the_command_prints_a_line_per_component_then_the_metrics(tiny_checkpoint, capsys):
    args = ["--checkpoint", str(tiny_checkpoint), "--clean", CLEAN, "--corrupt", CORRUPT]
    assert patch_cmd.main(args) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    result = patch(StudioModel.load(tiny_checkpoint), CLEAN, CORRUPT)
    assert lines[:-1] == result.rows and lines[-1] == result.summary()
    assert {"kind", "layer", "effect"} <= set(lines[0]) and "clean_metric" in lines[-1]
    assert patch_cmd.main([*args[:4], "--corrupt", "the cat sleeps ."]) == 2
    err = capsys.readouterr().err
    assert "same length in pieces" in err and err.count("\n") == 1
    asked = ["--direction", "noise", "--prefix", "", "--answers", result.wrong, result.answer]
    assert patch_cmd.main([*args, *asked]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (last["direction"], last["chosen"], last["step"]) == ("noise", True, 0)
    assert (last["answer"], last["wrong"]) == (result.wrong, result.answer)


def test_a_gap_too_small_to_normalise_by_is_said_with_how_much(tiny_model):
    """Issue 68, item 4: on a random GPT-2 the clean and corrupted logit differences were
    −0.09 and −0.10, and effects divided by that 0.01 showed +1.68 and −0.89 with no caveat."""
    import dataclasses

    result = patch(tiny_model, CLEAN, CORRUPT)
    noisy = dataclasses.replace(result, clean_metric=-0.09, corrupt_metric=-0.10)
    assert noisy.gap == pytest.approx(0.01)
    assert "(-0.09 and -0.10) are only 0.01 apart, 100× less than the 1 logit" in noisy.caveat
    assert noisy.summary()["gap"] == pytest.approx(0.01)
    assert noisy.summary()["caveat"] == noisy.caveat
    assert "are equal" in dataclasses.replace(result, clean_metric=0.5, corrupt_metric=0.5).caveat
    wide = dataclasses.replace(result, clean_metric=3.5, corrupt_metric=-3.5)
    assert wide.caveat == "" and wide.summary()["gap"] == 7.0


def test_the_command_says_the_gap_it_divides_by(tiny_checkpoint, capsys):
    args = ["--checkpoint", str(tiny_checkpoint), "--clean", CLEAN, "--corrupt", CORRUPT]
    assert patch_cmd.main(args) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["gap"] == pytest.approx(last["clean_metric"] - last["corrupt_metric"])
    assert last["caveat"] == gap_caveat(last["clean_metric"], last["corrupt_metric"])


def test_the_command_warns_on_stderr_when_the_gap_is_too_small(
    tiny_checkpoint, capsys, monkeypatch
):
    """Issue 68, item 4: the caveat on the terminal too, not only in the JSON's last line."""
    monkeypatch.setattr(patching_question, "MIN_GAP", 1e9)  # every gap too small
    args = ["--checkpoint", str(tiny_checkpoint), "--clean", CLEAN, "--corrupt", CORRUPT]
    assert patch_cmd.main(args) == 0
    out, err = capsys.readouterr()
    caveat = json.loads(out.splitlines()[-1])["caveat"]
    assert caveat and err.strip().splitlines()[-1] == f"warning: {caveat}"


def test_the_attention_page_draws_the_patching_grids(studio_dirs):
    from tests.helpers import assert_clean, plain, run_page_script

    def load_tiny():
        return StudioModel.load(studio_dirs["checkpoints"] / "fra-eng-small.pt")

    query = {"sentence": CLEAN, "section": "patch"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert "Type the corrupted sentence" in " ".join(i.value for i in at.info)
    at.text_input(key="at_corrupt").set_value(CORRUPT).run()
    assert_clean(at)
    shown = " ".join(m.value for m in at.markdown)
    assert "the clean run writes" in shown and len(at.get("plotly_chart")) == 2
    assert at.query_params["corrupt"] == CORRUPT
    at.radio(key="at_patch_dir").set_value("noise").run()
    assert_clean(at)
    assert at.query_params["patch_dir"] == "noise"
    assert "Noising: corrupted into clean" in plain(" ".join(m.value for m in at.markdown))
    at.checkbox(key="at_patch_ask").check().run()
    found = patch(load_tiny(), CLEAN, CORRUPT)
    at.text_input(key="at_patch_prefix").set_value(" ".join(found.prefix[1:]))
    at.text_input(key="at_patch_answer").set_value(found.wrong)
    at.text_input(key="at_patch_wrong").set_value(found.answer).run()
    assert_clean(at)
    shown = plain(" ".join(m.value for m in at.markdown))
    assert "the answers you gave are" in shown and at.query_params["patch_answer"] == found.wrong
    at.text_input(key="at_patch_wrong").set_value(found.wrong).run()
    assert "give two different answer words" in " ".join(e.value for e in at.error)
    at.text_input(key="at_corrupt").set_value("the cat sleeps .").run()
    assert "same length in pieces" in " ".join(e.value for e in at.error)
    at.text_input(key="at_corrupt").set_value("x " * 2500).run()  # audit: told empty as well
    assert any("has 5,000 characters" in e.value for e in at.error)
    assert "Type the corrupted sentence" not in " ".join(i.value for i in at.info)


def test_typed_words_reach_the_stream_figure_as_text():
    from core.figures.patching import stream_figure

    rows = [
        {"kind": "encoder_stream", "layer": 0, "position": p, "effect": 0.5} for p in range(2)
    ] + [{"kind": "decoder_stream", "layer": 0, "position": 0, "effect": 1.0}]
    fig = stream_figure(rows, ["<b>x</b>", "<eos>"], ["<bos>"], "<i>about</i>")
    ticks = [str(x) for trace in fig.data for x in trace.x]
    assert ticks[:2] == ["0:&lt;b&gt;x&lt;/b&gt;", "1:&lt;eos&gt;"]
    assert "<i>" not in fig.layout.title.text + str(fig.layout.annotations)


# ----------------------------------------------------------------------------- issue 49


def test_a_prefix_of_too_many_pieces_is_refused_before_any_pass(hf_loaded, monkeypatch):
    """A URL's prefix of 60 rare words: a SentencePiece model cuts it into hundreds of pieces,
    refused in one line before anything is computed."""
    import dataclasses

    from core.attention import patching, patching_question

    spm = hf_loaded["marian-spm"]  # as a model of 4,096 positions (the form trains one)
    m = dataclasses.replace(spm, cfg=dataclasses.replace(spm.cfg, max_positions=4096))
    monkeypatch.setattr(patching, "last_logits", lambda *a: pytest.fail("computed"))
    monkeypatch.setattr(patching_question, "last_logits", lambda *a: pytest.fail("computed"))
    rare = " ".join(["garçonfillemaison"] * 60)  # known letters, many pieces a word
    assert len(m.target_ids(rare)) > patching_question.MAX_PIECES
    with pytest.raises(TranslationError, match="at most .* pieces"):
        patching.patch(m, "the boy is tall .", "the girl is tall .", prefix=rare)
    with pytest.raises(TranslationError, match="sources of at most"):
        patching.patch(m, rare, rare.replace("g", "f", 1))


@settings(max_examples=200, deadline=None)
@given(
    d_model=st.sampled_from([16, 64, 256, 512, 1024]),
    layers=st.integers(1, 12),
    heads=st.sampled_from([1, 4, 8, 16]),
    vocab=st.integers(10, 100_000),
    src=st.integers(1, 4096),
    tgt=st.integers(1, 4096),
)
def test_a_patching_pass_stays_within_its_bytes(d_model, layers, heads, vocab, src, tgt):
    """Rows are sized from the byte budget before the pass (one row at the very least)."""
    from core.attention.patching import ROWS
    from core.runs import budget

    model = {"d_model": d_model, "num_heads": heads, "d_ff": 4 * d_model}
    model |= {"num_encoder_layers": layers, "num_decoder_layers": layers}
    model |= {"tgt_vocab_size": vocab}
    rows = budget.patch_rows(model, src, tgt, ROWS)
    assert 1 <= rows <= ROWS
    per_row = budget.patch_row_bytes(model, src, tgt)
    assert rows == 1 or rows * per_row <= budget.PATCH_BYTES


def test_patching_waits_for_no_one_it_says_the_slot_is_taken(tiny_model):
    """The page's patching runs in the server's heavy slot: while another session holds it,
    one line, and nothing is cached."""
    from pages.ui.attention import cached_ablation
    from pages.ui.heavy_work import SlotTaken
    from tests.helpers import heavy_slot_held

    with heavy_slot_held(), pytest.raises(SlotTaken, match="one runs at a time"):
        cached_ablation.patched(tiny_model, "tiny", 0.0, "i am cold .", "you are cold .")
