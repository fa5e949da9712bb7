"""AppTests of "Over training" for one-stack runs (issue 66): a decoder-only induction run and
an encoder run trained here (a few seeded CPU steps, tests/test_one_stack_replay.py) replay
their snapshots' maps, every head's trajectory (the induction run's circuit scores among the
numbers, its phase change said), and a model folder with no run beside it is refused in one
line."""

from __future__ import annotations

import json
import shutil

import pytest

from core.model.capabilities import NO_HISTORY
from tests import helpers
from tests.helpers import ROOT, assert_clean, plain, run_page_script
from tests.test_one_stack_replay import one_stack_runs  # noqa: F401 - the module's fixture

TRAINING = {"section": "training"}


@pytest.fixture
def one_stack_dirs(one_stack_runs, tmp_path, monkeypatch) -> dict:  # noqa: F811
    """runs/ holding the induction and encoder runs; checkpoints/ the shipped induction
    model's folder without its history (no run beside it)."""
    dirs = helpers.empty_studio_dirs(tmp_path, monkeypatch)
    for name, run in one_stack_runs.items():
        shutil.copytree(run, dirs["runs"] / name)
    shutil.copytree(ROOT / "checkpoints" / "induction-2l.hf", dirs["checkpoints"] / "alone.hf")
    return dirs


def charts(at) -> list[dict]:
    """The page's Plotly figures as JSON, in order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def lines_chart(at) -> dict:
    """The every-head-over-training chart."""
    return next(c for c in charts(at) if "one line per head" in str(c["layout"]["title"]))


def test_an_induction_run_replays_its_maps_and_its_heads_circuit_scores(one_stack_dirs):
    at = run_page_script("attention.py", {"model": "runs/induction/best.pt", **TRAINING})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert not at.info, [plain(i.value) for i in at.info]  # not refused: it was trained here
    assert at.select_slider(key="at_train_step").options == ["10", "20"]
    titles = [str(c["layout"]["title"].get("text")).replace("<br>", " ") for c in charts(at)]
    assert any(t.startswith("Decoder self") and t.endswith("training step 20") for t in titles)
    metrics = at.selectbox(key="at_traj_metric").options
    assert "induction score (circuit scores of the run's evaluations)" in metrics
    at.selectbox(key="at_traj_metric").set_value("induction").run()
    assert_clean(at)
    subtitle = lines_chart(at)["layout"]["title"]["subtitle"]["text"]
    assert "one pass over each snapshot's sequences" in subtitle  # not "probe sentences"
    heads = [t for t in lines_chart(at)["data"] if t["name"].startswith("layer")]
    assert len({t["name"] for t in heads}) == 2 * 4  # every head of its one stack
    assert "No induction head yet (2 evaluations)" in texts(at)  # the phase change, said


def test_an_encoder_run_replays_its_probe_sentences_maps(one_stack_dirs):
    at = run_page_script("attention.py", {"model": "runs/encoder/best.pt", **TRAINING})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert not at.info, [plain(i.value) for i in at.info]
    assert at.selectbox(key="at_probe").value == "go ."
    assert at.select_slider(key="at_train_step").options == ["10", "20"]
    assert "Encoder" in lines_chart(at)["layout"]["title"]["text"]


def test_a_decoder_only_translator_replays_its_sentences_blocks(one_stack_dirs):
    """The shipped decoder-only translator beside its history: its probe sentences' maps, the
    three blocks of one causal pass, as the page draws its other maps."""
    for name in ("fra-eng-decoder.hf", "fra-eng-decoder.history"):
        copy = shutil.copytree if name.endswith(".hf") else shutil.copy
        copy(ROOT / "checkpoints" / name, one_stack_dirs["checkpoints"] / name)
    query = {"model": "checkpoints/fra-eng-decoder.hf/", "kind": "cross", **TRAINING}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert at.select_slider(key="at_train_step").options == ["500", "1000", "1500", "1997"]
    assert "Output at this step" in texts(at)  # a translation, as the run wrote it
    assert "Cross" in lines_chart(at)["layout"]["title"]["text"]


def test_a_model_folder_with_no_run_beside_it_is_refused_in_one_line(one_stack_dirs):
    at = run_page_script("attention.py", {"model": "checkpoints/alone.hf/", **TRAINING})
    assert_clean(at)
    assert plain(at.info[-1].value) == NO_HISTORY


def test_the_shipped_induction_model_replays_its_snapshots_and_phase_change(one_stack_dirs):
    """checkpoints/induction-2l.hf beside its history: Over training offers every snapshot
    step, its heads' induction scores over them and the phase change in words; the sequence
    it replays is the one the page reads, and its picker calls it a probe sequence."""
    from core.runs.history import HistoryFile

    for name in ("induction-2l.hf", "induction-2l.history"):
        copy = shutil.copytree if name.endswith(".hf") else shutil.copy
        copy(ROOT / "checkpoints" / name, one_stack_dirs["checkpoints"] / name)
    steps = HistoryFile(ROOT / "checkpoints" / "induction-2l.history").snapshot_steps()
    at = run_page_script("attention.py", {"model": "checkpoints/induction-2l.hf/", **TRAINING})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert not at.info, [plain(i.value) for i in at.info]  # not NO_SNAPSHOTS
    assert at.select_slider(key="at_train_step").options == [str(s) for s in steps]
    at.selectbox(key="at_traj_metric").set_value("induction").run()
    assert_clean(at)
    heads = {t["name"] for t in lines_chart(at)["data"] if t["name"].startswith("layer")}
    assert len(heads) == 2 * 4
    said = texts(at)
    assert "Phase change between steps 550 and 575" in said
    assert "from step 575 on" in said
    typed = [plain(c.value) for c in at.caption if "maps over training" in plain(c.value)]
    assert not typed  # the page reads the sequence the run recorded: nothing to excuse
    assert at.selectbox(key="at_probe").label == "Probe sequence"
