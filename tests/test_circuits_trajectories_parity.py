"""The commands print what the pages draw: ``python -m core.circuits`` every head's three
scores at each evaluation (the Train page's circuit charts), ``python -m core.trajectories``
the readings of "Over training" (largest-change stars, the "Measured:" source share, "When
heads specialise"), by the same library functions on the same run."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pandas as pd

from core import circuits as circuits_command
from core import trajectories as trajectories_command
from core.alignment.head_aer import head_trajectories
from core.attention.kinds import KIND_NAMES, KINDS, kind_labels
from core.attention.trajectories import SENTENCES
from core.attention.trajectory_reading import (
    largest_change,
    source_share_reading,
    specialisation,
    stages,
)
from core.figures.circuits import head_scores_over_training
from core.runs.circuit_history import MEASURES, circuit_evals, phase_of
from tests.helpers import assert_clean, plain, run_page_script
from tests.test_app_train import train_page
from tests.test_app_train_induction import watched_induction_run
from tests.test_circuit_watch import records, run_dir_of
from tests.test_trajectories import runs_env  # noqa: F401 - the module's fixture


def printed(main, argv: list[str], capsys) -> list[dict]:
    """A command's JSON lines."""
    assert main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def values(array) -> list:
    """A Plotly array as a list (Plotly writes numpy arrays as base64 ``bdata``)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), np.dtype(array["dtype"])).tolist()
    return list(array)


def head_of(name: str) -> tuple[int, int]:
    """(layer, head) of a trace named "layer L head H ..."."""
    words = name.split()
    return int(words[1]), int(words[3])


def same(drawn, printed_value) -> bool:
    """A drawn number and a printed one agree (a gap or NaN drawn is null printed)."""
    if drawn is None or (isinstance(drawn, float) and math.isnan(drawn)):
        return printed_value is None
    return printed_value is not None and math.isclose(drawn, printed_value, rel_tol=1e-12)


def assert_lines_match_traces(lines: list[dict], measure: str, traces) -> None:
    """Every (layer, head) trace of ``measure``'s chart is that head's printed score per step."""
    assert traces
    for name, x, y in traces:
        layer, head = head_of(name)
        assert values(x) == [line["step"] for line in lines]
        grid = [line["per_head"][measure] for line in lines]
        assert all(same(d, g[layer][head]) for d, g in zip(values(y), grid)), (measure, name)


# ----------------------------------------------------------------------------- circuits


def test_the_circuits_command_prints_every_head_the_figure_draws(tmp_path, capsys):
    recs = records()
    evals = [r for r in recs if r["record"] == "eval"]
    evals[0]["circuits"] = {**evals[0]["circuits"], "duplicate_token": [[0.1, 0.2, 0.3, 0.4]]}
    evals[1]["circuits"]["previous_token"][1][3] = float("nan")  # drawn as a gap
    *lines, summary = printed(
        circuits_command.main, ["--run", str(run_dir_of(tmp_path, recs).path)], capsys
    )
    phase = phase_of(recs)
    assert len(lines) == len(circuit_evals(recs)) == summary["evaluations"]
    for measure in MEASURES:
        fig = head_scores_over_training(recs, measure, phase)
        assert len(fig.data) == sum(len(row) for row in lines[-1]["per_head"][measure])
        assert_lines_match_traces(lines, measure, [(t.name, t.x, t.y) for t in fig.data])
    assert lines[0]["per_head"]["duplicate_token"][1] == [None] * 4  # a gap drawn: no layer 1
    assert lines[1]["per_head"]["previous_token"][1][3] is None
    assert lines[-1]["per_head"]["previous_token"][0][1] == 0.8
    for line in lines:  # the best head's fields are its cell of the grids
        layer, head = line["layer"], line["head"]
        assert all(line[m] == line["per_head"][m][layer][head] for m in MEASURES)


def test_the_train_page_draws_the_per_head_scores_the_command_prints(jobs_env, make_run, capsys):
    rd, _ = watched_induction_run(make_run)
    *lines, _ = printed(circuits_command.main, ["--run", str(rd.path)], capsys)
    at = train_page("induction-run")
    specs = {
        s["layout"]["title"]["text"]: s
        for s in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
    }
    for measure, title in zip(MEASURES, ("induction", "previous-token", "duplicate-token")):
        data = specs[f"{title} score per head"]["data"]
        assert_lines_match_traces(lines, measure, [(t["name"], t["x"], t["y"]) for t in data])


# ----------------------------------------------------------------------------- trajectories


def rows_frame(rows: list[dict], like: pd.DataFrame) -> pd.DataFrame:
    """Printed rows as a table with ``like``'s columns (None as NaN where it has numbers)."""
    return pd.DataFrame(rows, columns=list(like.columns))


def assert_same_table(rows: list[dict], table: pd.DataFrame) -> None:
    """Printed rows equal a reading's table, cell by cell."""
    pd.testing.assert_frame_equal(
        rows_frame(rows, table).reset_index(drop=True),
        table.reset_index(drop=True),
        check_dtype=False,
    )


def test_the_trajectories_command_prints_the_pages_readings(runs_env, tiny_run, capsys):  # noqa: F811
    head = printed(trajectories_command.main, ["--run", str(tiny_run), "--probes-only"], capsys)[0]
    result = head_trajectories(tiny_run, None, SENTENCES, "off")
    probes = result.frame("probes")
    found = stages(probes)
    assert head["stages"] == (found.summary() if found else None)
    assert head["source_share_reading"] is None  # no validation numbers: no "Measured:" line
    assert head["specialisation"] and all(
        isinstance(r["layer"], int) for r in head["specialisation"]
    )
    assert_same_table(head["specialisation"], specialisation(probes))
    assert set(head["largest_change"]) == {"probes"}
    marks = head["largest_change"]["probes"]
    assert list(marks) == result.available()["probes"] and "entropy" in marks
    for metric, rows in marks.items():
        assert_same_table(rows, largest_change(probes, metric))
    assert all(isinstance(r["step"], int) for r in marks["entropy"])


def test_the_source_share_reading_is_the_pages_measured_line(runs_env, val_run, capsys):  # noqa: F811
    argv = ["--run", str(val_run), "--sentences", "6"]
    head = printed(trajectories_command.main, argv, capsys)[0]
    result = head_trajectories(val_run, None, 6, "cached")
    reading = source_share_reading(result.model_frame())
    assert reading and head["source_share_reading"] == reading
    assert set(head["largest_change"]) == {"probes", "validation"}
    for metric, rows in head["largest_change"]["validation"].items():
        assert_same_table(rows, largest_change(result.frame("validation"), metric))


def test_over_training_shows_the_stars_and_the_table_the_command_prints(studio_dirs, capsys):
    run = studio_dirs["run"]
    argv = ["--run", str(run), "--probes-only"]
    head = printed(trajectories_command.main, argv, capsys)[0]
    at = run_page_script(
        "attention.py", {"section": "training", "model": f"runs/{run.name}/last.pt"}
    )
    assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "since" in d.value.columns]
    printed_table = rows_frame(head["specialisation"], table)
    printed_table["kind"] = printed_table["kind"].map(KIND_NAMES)
    pd.testing.assert_frame_equal(printed_table, table.reset_index(drop=True), check_dtype=False)
    metric = at.selectbox(key="at_traj_metric").value
    spec = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "one line per head" in c.proto.spec
    )
    (kind,) = [k for k in KINDS if spec["layout"]["title"]["text"].startswith(kind_labels(k)[0])]
    stars = {
        (head_of(t["name"]), values(t["x"])[0], values(t["y"])[0])
        for t in spec["data"]
        if t.get("marker", {}).get("symbol") == "star"
    }
    rows = [r for r in head["largest_change"]["probes"][metric] if r["kind"] == kind]
    assert stars and stars == {((r["layer"], r["head"]), r["step"], r["value"]) for r in rows}
    assert not [plain(m.value) for m in at.markdown if m.value.startswith("**Measured:**")]
