"""AppTest tests of the home page and the Train page (one real tiny training run)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core import jobs
from core.runs import RunDir
from tests.conftest import fake_trainer

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny.tsv"


def home() -> AppTest:
    """The app's home page, run once."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    return at


def train_page(run_id: str | None = None) -> AppTest:
    """The Train page (optionally with ?run=run_id), run once."""
    at = home()
    if run_id:
        at.query_params["run"] = run_id
    at.switch_page("pages/train.py")
    at.run()
    assert not at.exception, at.exception
    return at


def button(at: AppTest, label: str):
    """The button labelled ``label`` (form submit buttons included)."""
    found = [b for b in at.button if b.label == label]
    assert found, f"no '{label}' button among {[b.label for b in at.button]}"
    return found[0]


def fill_tiny_form(at: AppTest, **overrides) -> None:
    """d2l preset on the tiny corpus, shrunk to train in seconds (until stopped)."""
    at.radio(key="preset").set_value("d2l").run()
    at.radio(key="data_kind").set_value("file path").run()
    at.text_input(key="data_path").set_value(str(TINY)).run()
    values = {
        "data.num_train": 24,
        "data.num_val": 6,
        "data.min_freq": 1,
        "model.d_model": 64,
        "model.d_ff": 128,
        "model.dropout": 0.0,
        "train.epochs": 100000,
        "train.eval_every": 4,
        "train.log_every": 2,
        "train.eval_sentences": 6,
        **overrides,
    }
    for key, value in values.items():
        at.number_input(key=f"d2l.{key}").set_value(value)


def badges(at: AppTest) -> list[str]:
    """The state badges on the page (markdown like ':green-badge[finished]')."""
    return [m.value for m in at.markdown if "-badge[" in m.value]


def loss_points(at: AppTest) -> list:
    """x values of the training-loss chart's smoothed trace of the selected run."""
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["title"]["text"].startswith("training loss")
    return spec["data"][-1]["x"] if spec["data"] else []


def run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root`` (hidden lock and upload folders excluded)."""
    return [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


# ----------------------------------------------------------------------------- home


def test_home_describes_the_app_and_lists_models_and_runs(jobs_env, make_run):
    make_run(jobs.runs_root(), "20260101-000000-d2l", {"state": "finished"}, checkpoint=True)
    jobs.promote("20260101-000000-d2l", "best", "fr-demo")
    (jobs.checkpoints_root() / "broken.pt").write_bytes(b"junk")
    at = home()
    assert not at.exception
    assert at.title[0].value == "Attention Studio"
    text = " ".join(m.value for m in at.markdown)
    assert "Training device:" in text and jobs.device_summary() in text
    assert any("Tatoeba" in c.value and "CC-BY 2.0" in c.value for c in at.caption)
    links = [p.proto.page for p in at.get("page_link")]
    assert any(link.endswith("train") for link in links), links
    assert len(links) == sum(
        (ROOT / "pages" / f).exists() for f in ("train.py", "translate.py", "attention.py")
    )
    models, runs = (d.value for d in at.dataframe)
    assert list(models["model"]) == ["broken", "fr-demo"]
    assert "not a readable" in models["problem"][0] and models["best BLEU"][1] == 12.5
    assert list(runs["run"]) == ["20260101-000000-d2l"] and list(runs["state"]) == ["finished"]


# ----------------------------------------------------------------------------- form


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("model.num_heads", 3, "must be divisible by num_heads (3)"),
        ("model.num_encoder_layers", 0, "num_encoder_layers must be at least 1"),
        ("train.batch_size", 10_000_000, "a batch of 10000000 needs about"),
        ("model.dropout", 1.5, "dropout must be in [0, 1)"),
    ],
)
def test_form_refuses_impossible_settings_with_the_reason(jobs_env, key, value, reason):
    at = train_page()
    fill_tiny_form(at, **{key: value})
    button(at, "Launch training").click().run()
    assert any(reason in e.value for e in at.error), [e.value for e in at.error]
    assert run_dirs(jobs.runs_root()) == []  # nothing started


def test_data_file_is_counted_before_launch(jobs_env, tmp_path):
    pairs = tmp_path / "mine.tsv"
    pairs.write_text("Go.\tVa !\nnot a pair\nHi.\tSalut.\n")
    at = train_page()
    at.radio(key="data_kind").set_value("file path").run()
    at.text_input(key="data_path").set_value(str(pairs)).run()
    assert [s.value for s in at.success] == ["2 usable pairs, 1 skipped lines."]
    at.text_input(key="data_path").set_value(str(tmp_path / "missing.tsv")).run()
    assert any("Corpus file not found" in e.value for e in at.error)
    button(at, "Launch training").click().run()
    assert any("Choose usable data first" in e.value for e in at.error)


def test_upload_is_validated_and_counted(jobs_env):
    at = train_page()
    at.radio(key="data_kind").set_value("upload").run()
    at.file_uploader(key="data_upload").set_value(
        ("pairs.tsv", b"Go.\tVa !\nHi.\tSalut.\nbad\n", "text/tab-separated-values")
    ).run()
    assert [s.value for s in at.success] == ["2 usable pairs, 1 skipped lines."]


def test_preset_fills_the_advanced_form(jobs_env):
    at = train_page()
    at.radio(key="preset").set_value("d2l").run()
    got = {
        k: at.number_input(key=f"d2l.{k}").value
        for k in (
            "data.num_train",
            "data.num_val",
            "model.d_model",
            "model.d_ff",
            "model.dropout",
            "train.lr",
            "train.epochs",
            "train.batch_size",
        )
    }
    assert got == {
        "data.num_train": 512,
        "data.num_val": 128,
        "model.d_model": 256,
        "model.d_ff": 64,
        "model.dropout": 0.2,
        "train.lr": 0.0015,
        "train.epochs": 30,
        "train.batch_size": 128,
    }


def test_each_preset_keeps_its_own_form_values(jobs_env):
    """Switching presets never mixes their values; submitted edits stay with their preset."""
    at = train_page()
    at.radio(key="data_kind").set_value("file path").run()  # no data: Launch starts nothing
    at.number_input(key="small.train.log_every").set_value(7)
    button(at, "Launch training").click().run()  # a form commits its values on submit
    assert any("Choose usable data first" in e.value for e in at.error)
    at.radio(key="preset").set_value("d2l").run()
    assert at.number_input(key="d2l.train.log_every").value == 1
    assert at.number_input(key="d2l.train.eval_every").value == 20
    at.radio(key="preset").set_value("small").run()
    assert at.number_input(key="small.train.log_every").value == 7


# ----------------------------------------------------------------------------- runs


def test_run_list_shows_every_state(jobs_env, make_run, dead_pid):
    root = jobs.runs_root()
    make_run(root, "a-finished", {"state": "finished"}, job={"created_at": 1})
    make_run(root, "b-stopped", {"state": "stopped"}, job={"created_at": 2}, checkpoint=True)
    make_run(root, "c-failed", {"state": "failed", "message": "boom"}, job={"created_at": 3})
    make_run(root, "d-died", {"state": "running", "pid": dead_pid()}, job={"created_at": 4})
    live = make_run(root, "e-running", {"state": "running"}, job={"created_at": 5})
    sleeper = fake_trainer(live.path)
    try:
        live.write_status(pid=sleeper.pid)
        at = train_page("d-died")
        table = next(d.value for d in at.dataframe if "state" in d.value.columns)
        assert dict(zip(table["run"], table["state"])) == {
            "e-running": "running",
            "d-died": "failed",
            "c-failed": "failed",
            "b-stopped": "stopped",
            "a-finished": "finished",
        }
        assert badges(at) == [":red-badge[failed]"]  # the run in the URL is shown
        assert any("ended unexpectedly" in e.value for e in at.error)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_resume_and_delete_with_confirmation(jobs_env, make_run):
    make_run(jobs.runs_root(), "old", {"state": "finished"}, checkpoint=True)
    at = train_page("old")
    assert "Resume" not in [b.label for b in at.button]  # finished runs are not resumed
    button(at, "Delete run…").click().run()
    assert any("for good" in w.value for w in at.warning)
    assert (jobs.runs_root() / "old").is_dir()  # not yet
    button(at, "Yes, delete it").click().run()
    assert not (jobs.runs_root() / "old").exists()
    assert "run" not in at.query_params


def test_promote_form_validates_the_name(jobs_env, make_run):
    make_run(jobs.runs_root(), "done", {"state": "finished"}, checkpoint=True)
    at = train_page("done")
    name = next(t for t in at.text_input if t.label == "Model name")
    name.set_value("../escape")
    button(at, "Save model").click().run()
    assert any("not a valid model name" in e.value for e in at.error)
    name = next(t for t in at.text_input if t.label == "Model name")
    name.set_value("fr-good")
    button(at, "Save model").click().run()
    assert (jobs.checkpoints_root() / "fr-good.pt").is_file()


def test_launch_shows_live_metrics_and_stops(jobs_env):
    at = train_page()
    fill_tiny_form(at)
    button(at, "Launch training").click().run()
    assert not at.error, [e.value for e in at.error]
    run_id = at.query_params["run"]
    rd = RunDir(jobs.runs_root() / run_id)
    info = jobs.run_info(run_id)
    assert rd.path.is_dir() and info.alive and jobs.is_trainer(info.pid, rd.path)

    deadline = time.time() + 90
    while len(loss_points(at)) < 3 and time.time() < deadline:
        time.sleep(0.5)
        at.run()  # AppTest never fires run_every: tick by hand
    logged = [r["step"] for r in rd.read_metrics() if r["kind"] == "train"]
    assert len(loss_points(at)) >= 3 and set(loss_points(at)) <= set(logged)
    assert badges(at) == [":blue-badge[running]"]

    button(at, "Stop").click().run()
    deadline = time.time() + 60
    while badges(at) != [":orange-badge[stopped]"] and time.time() < deadline:
        time.sleep(0.5)
        at.run()
    assert badges(at) == [":orange-badge[stopped]"]
    assert rd.last.is_file() and not jobs.run_info(run_id).alive
    assert "Resume" in [b.label for b in at.button]
