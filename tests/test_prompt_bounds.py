"""What a prompted model's template costs is counted before its work (issue 64, findings 4 and
5): the app's own gold sets are scored in the server's heavy slot and under the scoring bound,
which counts a decoder-only model's template tokens; activation patching counts every position
its pass holds (template, sentence, prefix) and refuses before any pass, in one line, on the
page and on the command line."""

from __future__ import annotations

import contextlib

import pytest
import torch

from core import patch as patch_command
from core.attention import patching
from core.model.interface import prompt_positions
from core.model.parts import TranslationError
from core.runs import budget
from tests.helpers import heavy_slot_held

LONG = "Translate each English sentence into French, word by word. English: {src}\nFrench:"
CLEAN, CORRUPT = "the cat sees the dog .", "the dog sees the cat ."


@contextlib.contextmanager
def no_pass():
    """Any torch module called inside fails the test: refused before any pass."""

    def fail(module, args):
        pytest.fail(f"a pass ran ({type(module).__name__})")

    handle = torch.nn.modules.module.register_module_forward_pre_hook(fail)
    try:
        yield
    finally:
        handle.remove()


def scored(lm, gold) -> list:
    """[the result] when ``within_bounds`` computed, [] when it did not (and its result)."""
    from pages.ui.attention.gold_sets import within_bounds

    calls = []
    result = within_bounds(lm, gold, lambda: calls.append("grid") or "grid")
    assert result == (calls[0] if calls else None)
    return calls


# ----------------------------------------------------------------------------- finding 4


def test_the_apps_own_gold_set_is_scored_in_the_heavy_slot(tiny_model):
    """A link to the Alignment section computed the shipped set's grid at once, outside the
    slot, concurrently across sessions: it now waits its turn like an uploaded set."""
    from pages.ui.attention.gold_sets import shipped_gold

    gold = shipped_gold()
    with heavy_slot_held():  # another session's heavy job holds the slot
        assert scored(tiny_model, gold) == []  # waited, then said to come back: not computed
    assert scored(tiny_model, gold) == ["grid"]  # the slot free: computed in it


def test_a_prompted_models_template_counts_in_the_scoring_bound(lm_loaded, monkeypatch):
    """The app's own gold set on a decoder-only model: its template's tokens are read with
    every pair, so a long template passes the bound where the default one does not."""
    from pages.ui.attention.gold_sets import shipped_gold

    lm, gold = lm_loaded["gpt2"], shipped_gold()
    without = budget.scoring_cells(vars(lm.cfg), gold.pairs, "bpe")  # the pairs alone
    monkeypatch.setattr(budget, "SCORING_CELLS", 2 * without)
    assert scored(lm, gold) == ["grid"]  # the default template: a few tokens
    assert scored(lm.with_prompt(LONG), gold) == []  # 45 more positions in every pair
    cells = budget.scoring_cells(vars(lm.cfg), gold.pairs, "bpe", prompt_positions(lm))
    assert without < cells <= 2 * without


# ----------------------------------------------------------------------------- finding 5


def test_patching_counts_a_templates_tokens_and_refuses_before_any_pass(lm_loaded, monkeypatch):
    """A 150-token template passed 1.66 GB on the page: every position of the pass counts,
    and a pass whose one row passes the limit is refused in one line before any pass."""
    lm = lm_loaded["gpt2"].with_prompt(LONG)
    S = len(lm.source(CLEAN).ids)
    alone = budget.patch_row_bytes(vars(lm.cfg), S, 1)  # the sentence without its template
    monkeypatch.setattr(budget, "PATCH_BYTES", 3 * alone)
    with no_pass(), pytest.raises(TranslationError) as refused:
        patching.patch(lm, CLEAN, CORRUPT)
    said = str(refused.value)
    assert "\n" not in said and "45 tokens of the prompt template" in said
    assert lm.sequence_spans(S, 1)[1].stop == 45 + S + 1  # what the pass holds
    held = budget.patch_row_bytes(vars(lm.cfg), S, 1, prompt_positions(lm))
    assert held > 3 * alone and budget.size_words(held) in said


def test_the_page_refuses_the_same_pass_in_one_line(lm_loaded, monkeypatch):
    """The page's cached call raises the one-line error the Patching section shows."""
    from pages.ui.attention import cached_ablation

    lm = lm_loaded["gpt2"].with_prompt(LONG)
    monkeypatch.setattr(budget, "PATCH_BYTES", 64 * 1024)
    with no_pass(), pytest.raises(TranslationError, match="prompt template"):
        cached_ablation.patched(lm, "gpt2", 0.0, CLEAN, CORRUPT, view=lm.view_key)


def test_the_command_refuses_it_with_exit_code_2_and_one_line(lm_models, monkeypatch, capsys):
    """``python -m core.patch`` on an 840-token template was killed past 3.8 GB: now one line
    on stderr and exit code 2, before any pass, no traceback."""
    monkeypatch.setattr(budget, "PATCH_BYTES", 64 * 1024)
    argv = ["--checkpoint", str(lm_models["gpt2"]), "--prompt", LONG]
    with no_pass():
        code = patch_command.main([*argv, "--clean", CLEAN, "--corrupt", CORRUPT])
    out, err = capsys.readouterr()
    assert code == 2 and not out
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "prompt template" in line and "Traceback" not in err


def test_a_template_that_fits_is_patched_as_before(lm_loaded):
    """Within the limit nothing is refused: the pass is cut into rows that fit."""
    lm = lm_loaded["gpt2"].with_prompt(LONG)
    S = len(lm.source(CLEAN).ids)
    positions = prompt_positions(lm)
    rows = budget.patch_rows(vars(lm.cfg), S, 4, patching.ROWS, positions)
    assert rows * budget.patch_row_bytes(vars(lm.cfg), S, 4, positions) <= budget.PATCH_BYTES
    assert budget.patch_problem(vars(lm.cfg), S, 4, positions) is None
