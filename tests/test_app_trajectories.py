"""AppTests of the Attention page's "Over training" section: every head's trajectory, play
buttons (training steps and decoding steps), the steps in the URL, B − A, and following a run."""

from __future__ import annotations

import json
import shutil

import torch
from streamlit.testing.v1 import AppTest

from core.runs.run_dir import RunDir
from tests.helpers import assert_clean, run_page_script

TRAINING = {"section": "training"}


def run_page(query: dict | None = None) -> AppTest:
    """The Attention page, run once with these URL values."""
    return run_page_script("attention.py", query)


def charts(at: AppTest) -> list[dict]:
    """The page's Plotly figures as JSON, in order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def title(spec: dict) -> str:
    """A chart's title."""
    return spec["layout"]["title"]["text"]


def step_of(at: AppTest) -> int:
    """The training step slider's value."""
    return at.select_slider(key="at_train_step").value


def query(at: AppTest) -> dict:
    """The URL's values."""
    return {k: at.query_params[k] for k in at.query_params}


def test_every_head_over_training_beside_the_loss(studio_dirs):
    at = run_page(TRAINING)
    assert_clean(at)
    assert any("Every head over training" in h.value for h in at.subheader)
    lines = next(c for c in charts(at) if "one line per head" in str(c["layout"]["title"]))
    heads = [t for t in lines["data"] if t["name"].startswith("layer") and t.get("showlegend", 1)]
    assert len({t["name"] for t in heads}) == 2 * 4  # every cross head of the tiny model
    assert any(t["name"] == "training loss" for t in lines["data"])
    stars = [t for t in lines["data"] if t.get("marker", {}).get("symbol") == "star"]
    assert len(stars) == 8  # each head's largest change is marked
    table = at.dataframe[0].value  # which numbers each basis has
    assert list(table.columns) == ["number", "probe sentences", "validation sentences"]
    assert len(table) == 5 and set(table["probe sentences"]) <= {"✓", "—"}
    steps = next(c.value for c in at.caption if c.value.startswith("Steps measured"))
    assert "probe sentences: " in steps and "validation sentences: " in steps
    assert any("Stages (heuristic)" in m.value for m in at.markdown)
    assert any(b.key == "at_traj_measure" for b in at.button)  # the saved step, not measured


def test_number_and_kind_pickers_redraw(studio_dirs):
    at = run_page(TRAINING | {"kind": "encoder"})
    at.selectbox(key="at_traj_metric").set_value("previous").run()
    assert_clean(at)
    lines = next(c for c in charts(at) if "one line per head" in str(c["layout"]["title"]))
    assert "Encoder" in title(lines) and "previous position" in title(lines)


def test_the_training_step_travels_in_the_url(studio_dirs):
    at = run_page(TRAINING)
    assert step_of(at) == 150 and "train_step" not in query(at)  # the latest, followed
    at.select_slider(key="at_train_step").set_value(50).run()
    assert query(at)["train_step"] == "50"
    again = run_page(TRAINING | {"train_step": "100"})
    assert_clean(again)
    assert step_of(again) == 100
    assert charts(again)[0]["layout"]["title"]["text"].endswith("training step 100")
    other = run_page({"train_step": "100"})  # another section: the step does not travel
    assert "train_step" not in query(other)


def test_play_advances_the_training_step(studio_dirs):
    at = run_page(TRAINING | {"train_step": "50"})
    at.button(key="at_train_button").click().run()
    assert_clean(at)
    assert step_of(at) == 50 and at.button(key="at_train_button").label == "⏸ Pause"
    at.run()  # what a tick of the fragment's run_every does
    assert step_of(at) == 100 and query(at)["train_step"] == "100"
    at.run()
    assert step_of(at) == 150
    assert at.button(key="at_train_button").label == "▶ Play"  # it stops at the last step
    at.run()
    assert step_of(at) == 150


def test_play_from_the_last_step_starts_again(studio_dirs):
    at = run_page(TRAINING)
    at.button(key="at_train_button").click().run()
    assert step_of(at) == 50
    at.run()
    assert step_of(at) == 100


def test_difference_between_two_steps(studio_dirs):
    at = run_page(TRAINING)
    at.selectbox(key="at_diff_from").set_value(50).run()
    assert_clean(at)
    assert query(at)["diff_from"] == "50"
    diff = next(c for c in charts(at) if "step 150 − step 50" in title(c))
    assert (
        diff["layout"]["coloraxis"]["colorscale"][0][1]
        != diff["layout"]["coloraxis"]["colorscale"][-1][1]
    )
    assert diff["layout"]["coloraxis"]["cmin"] == -diff["layout"]["coloraxis"]["cmax"]
    changes = [float(a["text"].split("|Δ| ")[1]) for a in diff["layout"]["annotations"][:8]]
    assert changes == sorted(changes, reverse=True)  # the most changed heads first
    again = run_page(TRAINING | {"diff_from": "50", "train_step": "100"})
    assert any("step 100 − step 50" in title(c) for c in charts(again))


def test_the_view_follows_a_new_snapshot(studio_dirs):
    at = run_page(TRAINING)
    assert step_of(at) == 150
    rd = RunDir(studio_dirs["run"])
    snap = rd.load_snapshot(150)
    torch.save({**snap, "step": 200}, rd.snapshots / f"step_{200:08d}.pt")
    at.run()
    assert_clean(at)
    assert step_of(at) == 200  # it was at the latest: it moves on to the new one
    at.select_slider(key="at_train_step").set_value(100).run()
    torch.save({**snap, "step": 250}, rd.snapshots / f"step_{250:08d}.pt")
    at.run()
    assert step_of(at) == 100  # a step the user chose stays


def test_decoding_playback_plays_and_keeps_its_step_in_the_url(studio_dirs):
    at = run_page({"section": "playback"})
    at.button(key="at_play_button").click().run()
    assert_clean(at)
    assert at.slider(key="at_step").value == 0
    at.run()
    assert at.slider(key="at_step").value == 1 and query(at)["step"] == "1"
    at.button(key="at_play_button").click().run()  # pause
    at.run()
    assert at.slider(key="at_step").value == 1


def test_a_bpe_run_over_training(studio_dirs, bpe_run):
    shutil.copytree(bpe_run, studio_dirs["runs"] / "bpe")
    at = run_page(TRAINING | {"model": "runs/bpe/last.pt", "words": "1"})
    assert_clean(at)
    assert any("Every head over training" in h.value for h in at.subheader)
    steps = RunDir(bpe_run).snapshot_steps()
    at.selectbox(key="at_diff_from").set_value(steps[0]).run()
    assert_clean(at)
