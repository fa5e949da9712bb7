"""AppTests of "Over training" with kept snapshot models: the Measure button fills every step
with the validation numbers and the source share; a saved model's history shows them at once,
without its run or its corpus; "Save as a model" keeps them."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np

from core import checkpoint as checkpoint_command
from core.attention.trajectories import STORED_KEY
from core.runs.catalogue import SHIPPED_NAME
from core.runs.history import HistoryFile, history_path
from core.runs.run_dir import RunDir
from tests.helpers import assert_clean, plain, run_page_script

TRAINING = {"section": "training"}
SHARE = "source share (ALTI+)"


def lines_chart(at) -> dict:
    """The "one line per head" chart as JSON."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(c for c in specs if "one line per head" in str(c["layout"]["title"]))


def values(array) -> list:
    """A Plotly array as a list (Plotly writes numpy arrays as base64 ``bdata``)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), np.dtype(array["dtype"])).tolist()
    return list(array)


def measured(at) -> list[str]:
    """The page's "Measured:" lines."""
    return [plain(m.value) for m in at.markdown if m.value.startswith("**Measured:**")]


def test_measure_fills_every_kept_step_and_draws_the_source_share(studio_dirs, val_run):
    shutil.copytree(val_run, studio_dirs["runs"] / "val")
    at = run_page_script("attention.py", TRAINING | {"model": "runs/val/last.pt"})
    assert_clean(at)
    button = at.button(key="at_traj_measure")
    assert button.label.endswith("at 4 saved steps")
    button.click().run()
    assert_clean(at)
    assert not any(b.key == "at_traj_measure" for b in at.button)
    at.radio(key="at_traj_basis").set_value("validation").run()
    assert_clean(at)
    chart = lines_chart(at)
    share = next(t for t in chart["data"] if t["name"] == SHARE)
    assert values(share["x"]) == RunDir(val_run).snapshot_steps()
    assert all(0 <= y <= 1 for y in values(share["y"]))
    assert measured(at) and "Source share of the predictions (ALTI+" in measured(at)[0]
    other = run_page_script("attention.py", TRAINING | {"model": "runs/val/last.pt"})
    assert_clean(other)  # another session (a student's shared link): the numbers on disk, at
    # once (it was served the result cached before the measurement, keyed by a per-session count)
    assert not any(b.key == "at_traj_measure" for b in other.button)
    assert measured(other) == measured(at)


def test_a_saved_models_history_shows_every_step_without_run_or_corpus(
    studio_dirs, val_run, tmp_path, monkeypatch
):
    run = tmp_path / "gone"
    shutil.copytree(val_run, run)
    shipped = studio_dirs["checkpoints"] / SHIPPED_NAME
    assert checkpoint_command.main([str(run / "last.pt"), str(shipped)]) == 0
    shutil.rmtree(run)
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path / "no-data"))
    at = run_page_script("attention.py", TRAINING)
    assert_clean(at)
    assert not any(b.key == "at_traj_measure" for b in at.button)  # nothing left to measure
    at.radio(key="at_traj_basis").set_value("validation").run()
    assert_clean(at)
    steps = [
        s["model"]["step"] for s in HistoryFile(history_path(shipped)).section(STORED_KEY)["steps"]
    ]
    share = next(t for t in lines_chart(at)["data"] if t["name"] == SHARE)
    assert values(share["x"]) == steps == RunDir(val_run).snapshot_steps()
    assert measured(at)


def test_save_as_a_model_keeps_the_heads_numbers(jobs_env, val_run):
    shutil.copytree(val_run, jobs_env["runs"] / "val")
    at = run_page_script("train.py", {"run": "val"})
    assert_clean(at)
    name = next(t for t in at.text_input if t.label == "Model name")
    name.set_value("kept")
    next(r for r in at.radio if r.label == "Checkpoint").set_value("last")
    next(b for b in at.button if b.label == "Save model").click().run()
    assert_clean(at)
    assert any("Saved as kept.pt" in plain(s.value) for s in at.success)
    section = HistoryFile(history_path(jobs_env["checkpoints"] / "kept.pt")).section(STORED_KEY)
    assert [s["model"]["step"] for s in section["steps"]] == RunDir(val_run).snapshot_steps()


def test_save_as_a_model_while_the_server_is_busy_saves_and_says_why(jobs_env, val_run):
    from tests.helpers import heavy_slot_held

    shutil.copytree(val_run, jobs_env["runs"] / "val")
    with heavy_slot_held():  # another session's heavy computation holds the slot
        at = run_page_script("train.py", {"run": "val"})
        next(t for t in at.text_input if t.label == "Model name").set_value("busy")
        next(b for b in at.button if b.label == "Save model").click().run()
        assert_clean(at)
    assert (jobs_env["checkpoints"] / "busy.pt").is_file()
    assert any("one runs at a time" in plain(w.value) for w in at.warning)
    assert any("heavy-work slot is not free" in plain(w.value) for w in at.warning)
    assert (
        HistoryFile(history_path(jobs_env["checkpoints"] / "busy.pt")).section(STORED_KEY) is None
    )
