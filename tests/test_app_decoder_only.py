"""AppTest of a decoder-only model trained here on the pages (issue 66): the shipped induction
model on every section of the Attention page (each draws, or says in one line why not), and a
finished induction run on the Train page (its curves and circuits)."""

from __future__ import annotations

import shutil

import pytest

from core.model.opened import open_model
from pages.ui.attention.sections import SECTION_KEYS
from tests import test_decoder_only_runs as runs
from tests.helpers import assert_clean, plain, run_page_script
from tests.test_decoder_only_runs import RUN, SHIPPED

induction_dirs = runs.induction_dirs  # the fixture: the shipped model, a finished run


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


@pytest.mark.parametrize("section", SECTION_KEYS)
def test_every_attention_section_reads_the_induction_model_or_says_why_not(induction_dirs, section):
    model = open_model(str(induction_dirs["checkpoints"] / SHIPPED.name))
    at = run_page_script(
        "attention.py", {"model": f"checkpoints/{SHIPPED.name}/", "section": section}
    )
    assert_clean(at)  # the maps' head table once failed on the empty cross map
    assert not at.error, [plain(e.value) for e in at.error]
    if problem := model.supports(
        section
    ):  # not offered: the link opens the maps, its note says why
        assert at.radio(key="at_section").value == "maps"
        assert any(plain(problem).rstrip(".") in plain(w.value) for w in at.warning), problem
    if section == "maps":
        assert at.get("plotly_chart")
    if section == "training":  # trained here, its history keeps snapshots: they replay
        assert not at.info and at.get("plotly_chart") and "Phase change" in texts(at)
    if section == "ablation":  # heads removed by hand; no importance on validation sentences
        assert model.supports("importance") in texts(at)
        assert not [b for b in at.button if b.key == "ab_compute"]
    if section == "project":
        assert problem and "random" in problem
    if section == "head_scores":  # at the length it trained on, not the detector's 20
        assert "16 tokens per copy" in texts(at) and "token 32" in texts(at)


def test_a_finished_induction_run_on_the_train_page(induction_dirs):
    from tests.test_app_train import train_page

    shutil.copytree(induction_dirs["ind"], induction_dirs["runs"] / "ind2")
    at = train_page(RUN)
    at.multiselect(key="compare").set_value(["ind2"]).run()  # compared with another run
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert "Circuits forming" in texts(at) or any("Circuits" in s.value for s in at.subheader)
    assert len(at.get("plotly_chart")) >= 2


def test_the_translate_page_says_in_one_line_that_the_induction_model_reads_no_sentence(
    induction_dirs,
):
    at = run_page_script("translate.py", {"model": f"checkpoints/{SHIPPED.name}/"})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert "it reads no sentence and no prompt" in texts(at)  # said once, beside its box
    assert not at.warning, [plain(w.value) for w in at.warning]
    assert "tr_prompt" not in [box.key for box in at.text_area]  # no template offered to type
    assert not [b for b in at.button if b.label == "Run the d2l check"]  # no BLEU check
    assert at.text_input(key="tr_sentence").label == "Token sequence"
    assert "trained here on the induction task" in texts(at)  # the picker's line says so
    assert "not trained here" not in texts(at)


def test_save_as_a_model_from_the_train_page_saves_the_runs_folder(induction_dirs):
    from tests.test_app_train import button, train_page

    at = train_page(RUN)
    next(t for t in at.text_input if t.label == "Model name").set_value("ind-saved")
    button(at, "Save model").click().run()
    assert_clean(at)
    said = [plain(w.value) for w in [*at.error, *at.warning] if "fra-eng" not in w.value]
    assert not said, said  # no warning that its heads' numbers were left out
    assert "Saved as ind-saved.hf" in plain(at.success[0].value)
    assert (induction_dirs["checkpoints"] / "ind-saved.hf" / "config.json").is_file()
