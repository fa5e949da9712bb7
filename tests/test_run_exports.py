"""A run's metrics as CSV and settings as JSON, downloaded from the Train page."""

from __future__ import annotations

import csv
import io
import json

from core.places import runs_root
from core.runs.exports import config_json, metrics_csv
from core.runs.run_dir import RunDir
from tests.test_app_train import train_page


def test_metrics_csv_has_a_row_per_record_and_text_cannot_run(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.create()
    rd.append_metrics({"record": "train", "step": 20, "loss": 3.5, "lr": 1e-4})
    rd.append_metrics(
        {
            "record": "eval",
            "step": 20,
            "val_bleu": 12.0,
            "examples": [{"src": "=cmd()", "out": "x", "ref": "y"}],
            "note": "=HYPERLINK(1)",
        }
    )
    rows = list(csv.reader(io.StringIO(metrics_csv(rd).decode())))
    assert rows[0] == ["record", "step", "loss", "lr", "val_bleu", "note"]  # examples left out
    assert rows[1] == ["train", "20", "3.5", "0.0001", "", ""]
    assert rows[2] == ["eval", "20", "", "", "12.0", "'=HYPERLINK(1)"]
    assert metrics_csv(RunDir(tmp_path / "none")) == b"\n"


def test_config_json_is_the_runs_settings(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.create()
    rd.write_config({"data": {"max_len": 12}, "model": {"d_model": 64}, "train": {"lr": 0.001}})
    assert json.loads(config_json(rd))["model"] == {"d_model": 64}


def test_the_train_page_offers_both_downloads(jobs_env, make_run):
    rd = make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    rd.append_metrics({"record": "train", "step": 1, "loss": 2.0})
    at = train_page("done")
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Metrics as CSV" in labels and "Settings as JSON" in labels


def test_curves_follow_the_chosen_x_axis():
    from datetime import datetime

    from core.figures.training import curves_figure, series

    records = [
        {"record": "train", "step": 20, "loss": 4.0, "elapsed": 60.0, "time": 1.7e9},
        {"record": "train", "step": 40, "loss": 3.0, "elapsed": 120.0, "time": 1.7e9 + 90},
        {"record": "train", "step": 60, "loss": 2.5, "elapsed": 180.0},  # an older record
    ]
    assert series(records, "loss") == ([20, 40, 60], [4.0, 3.0, 2.5])
    assert series(records, "loss", "relative") == ([1.0, 2.0, 3.0], [4.0, 3.0, 2.5])
    xs, _ = series(records, "loss", "wall")
    assert xs == [datetime.fromtimestamp(1.7e9), datetime.fromtimestamp(1.7e9 + 90)]
    fig = curves_figure({"a": records}, "loss", smoothing=0.0, x_axis="relative")
    assert fig.layout.xaxis.title.text == "training time (minutes)"


def test_the_x_axis_choice_is_kept_in_the_url(jobs_env, make_run):
    rd = make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    rd.append_metrics({"record": "train", "step": 1, "loss": 2.0, "elapsed": 6.0})
    at = train_page("done")
    picker = next(w for w in at.get("button_group") if w.proto.label == "x-axis")
    picker.set_value("relative").run()
    assert at.query_params["x"] == "relative"
    titles = [
        json.loads(c.proto.spec)["layout"]["xaxis"]["title"]["text"] for c in at.get("plotly_chart")
    ]
    assert "training time (minutes)" in titles


def test_the_trainer_logs_what_it_costs_the_machine(tmp_path):
    from core.runs.system import ProcessMeter, resident_mb
    from tests.helpers import train_tiny

    meter = ProcessMeter()
    sum(i * i for i in range(200_000))  # some CPU work
    sample = meter.sample()
    assert 0 < sample["cpu_percent"] <= 100 * 64 and sample["rss_mb"] > 10
    assert abs(resident_mb() - sample["rss_mb"]) < 200
    assert sample["peak_rss_mb"] >= sample["rss_mb"] - 1  # the most it has held, so far
    out = tmp_path / "run"
    assert train_tiny(out, "--epochs", "20") == 0
    train = [r for r in RunDir(out).read_metrics() if r["record"] == "train"]
    assert train and all({"cpu_percent", "rss_mb", "peak_rss_mb", "time"} <= set(r) for r in train)
    peaks = [r["peak_rss_mb"] for r in train]
    assert peaks == sorted(peaks)  # a peak never falls
    rows = list(csv.reader(io.StringIO(metrics_csv(RunDir(out)).decode())))
    assert {"cpu_percent", "rss_mb", "time"} <= set(rows[0])
