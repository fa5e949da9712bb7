"""The commands of "Inside a head", the logit lens, head roles and direct logit attribution
explain the translation the Attention page explains: built from the page's decoding settings
(beam, alpha, longest output, target language) or its typed translation, through
``translate_sentence``; the logit lens caption's count is the library's, printed by the command.
"""

from __future__ import annotations

import json

import pytest

from core import inside_head, logit_attribution
from core.attention.head_roles import head_roles
from core.attention.logit_attribution import logit_attribution as attribution
from core.attention.logit_lens import logit_lens
from core.attention.query_key import query_key_view
from core.model.checked_translation import DEFAULT_SENTENCE, translate_sentence
from core.model.parts import DecodeSettings
from core.model.studio_model import StudioModel
from tests.helpers import assert_clean, plain
from tests.test_app_attention import run_page

SEARCH = DecodeSettings(beam_size=3, alpha=1.5, max_len=4)  # cuts "je suis chez moi . <eos>"
SEARCH_FLAGS = ["--beam", "3", "--alpha", "1.5", "--max-len", "4"]
TYPED = "je suis moi ."  # a translation typed on the page, not the model's own


def printed(main, argv: list[str], capsys) -> list[dict]:
    """The JSON lines a command prints (it must exit with 0)."""
    assert main(argv) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def as_printed(rows: list[dict]) -> list[dict]:
    """Rows as they read back from a command's JSON lines."""
    return json.loads(json.dumps(rows, ensure_ascii=False))


CASES = {  # flags of a command -> (the page's settings, its typed translation)
    "search": (SEARCH_FLAGS, SEARCH, ""),
    "typed": (["--target", TYPED], DecodeSettings(), TYPED),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_inside_head_command_explains_the_pages_translation(tiny_checkpoint, capsys, case):
    flags, settings, typed = CASES[case]
    lm = StudioModel.load(tiny_checkpoint)
    t = translate_sentence(lm, DEFAULT_SENTENCE, settings, typed)  # as the page translates
    assert t.tokens != translate_sentence(lm, DEFAULT_SENTENCE).tokens  # not the default's
    argv = ["--checkpoint", str(tiny_checkpoint), "--sentence", DEFAULT_SENTENCE, *flags]
    lens = printed(inside_head.main, [*argv, "--logit-lens"], capsys)
    assert lens == as_printed(logit_lens(lm, t).rows())
    roles = printed(inside_head.main, [*argv, "--head-roles"], capsys)
    assert roles == as_printed(head_roles(lm, t).rows())
    (view,) = printed(inside_head.main, [*argv, "--kind", "cross", "--query", "1"], capsys)
    assert view == as_printed(query_key_view(lm, t, "cross", 0, 0, 1).to_json())


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_logit_attribution_command_explains_the_pages_translation(
    tiny_checkpoint, capsys, case
):
    flags, settings, typed = CASES[case]
    lm = StudioModel.load(tiny_checkpoint)
    t = translate_sentence(lm, DEFAULT_SENTENCE, settings, typed)
    argv = ["--checkpoint", str(tiny_checkpoint), "--source", DEFAULT_SENTENCE, *flags]
    lines = printed(logit_attribution.main, argv, capsys)  # the page's defaults: the last
    assert lines == as_printed(attribution(lm, t, None, None, None).lines())  # step, its word
    lines = printed(logit_attribution.main, [*argv, "--step", "1", "--per-layer"], capsys)
    assert lines == as_printed(attribution(lm, t, 1, None, None).lines("per_layer"))


def test_a_prefix_is_forced_as_a_target_and_its_answer_is_the_likeliest(tiny_checkpoint, capsys):
    """The page has no prefix: the command's ``--prefix`` forces those words as ``--target``
    does and, without ``--answer``, takes apart the likeliest word after them (documented)."""
    lm = StudioModel.load(tiny_checkpoint)
    t = translate_sentence(lm, DEFAULT_SENTENCE, DecodeSettings(), "je")
    argv = ["--checkpoint", str(tiny_checkpoint), "--source", DEFAULT_SENTENCE, "--prefix", "je"]
    lines = printed(logit_attribution.main, argv, capsys)
    likeliest = t.topk[len(t.out_ids) - 1][0][0]
    assert lines == as_printed(attribution(lm, t, None, likeliest, None).lines())
    written = printed(logit_attribution.main, [*argv, "--answer", t.output_tokens[-1]], capsys)
    assert written == as_printed(attribution(lm, t, None, None, None).lines())


def test_the_prefix_and_the_target_are_one_or_the_other(tiny_checkpoint, capsys):
    argv = ["--checkpoint", str(tiny_checkpoint), "--source", DEFAULT_SENTENCE]
    assert logit_attribution.main([*argv, "--prefix", "je", "--target", TYPED]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not allowed with" in err


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_lens_summary_is_the_librarys_and_the_pages_caption(
    studio_dirs, tiny_checkpoint, capsys, case
):
    flags, settings, typed = CASES[case]
    lm = StudioModel.load(tiny_checkpoint)
    lens = logit_lens(lm, translate_sentence(lm, DEFAULT_SENTENCE, settings, typed))
    argv = ["--checkpoint", str(tiny_checkpoint), "--sentence", DEFAULT_SENTENCE, *flags]
    rows = printed(inside_head.main, [*argv, "--logit-lens"], capsys)
    summary = {"projected": lens.projected, "steps": len(lens.output_tokens)}
    summary["early"] = sum(s is not None and s < lens.layers - 1 for s in lens.settled())
    assert all(r["summary"] == summary for r in rows)
    assert [r["settled"] for r in rows] == lens.settled()
    query = {"section": "lens", "beam": str(settings.beam_size), "alpha": str(settings.alpha)}
    query |= {"max_len": str(settings.max_len), "target": typed}
    at = run_page(query)  # the Attention page with the same settings
    assert_clean(at)
    words = plain(" ".join(c.value for c in at.caption))
    assert f"Projected: {lens.projected}." in words
    assert f"{summary['early']} of {summary['steps']} chosen words are the top word" in words


def test_a_word_settles_at_the_first_layer_it_stays_top_from(tiny_model):
    lens = logit_lens(tiny_model, translate_sentence(tiny_model, DEFAULT_SENTENCE))
    lens.chosen_rank[:] = 0
    lens.chosen_rank[0, 0] = 2  # step 0: top from layer 1 (the last) on
    lens.chosen_rank[-1, 1] = 1  # step 1: not top at the last layer (a forced end token)
    assert lens.settled()[:3] == [1, None, 0]
    assert lens.early() == len(lens.output_tokens) - 2
