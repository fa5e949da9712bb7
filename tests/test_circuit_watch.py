"""Watching an induction head form (issue 66): a run's circuit scores over training as the
Train page draws them (core.figures.circuits) and ``python -m core.circuits`` prints them,
both from core.runs.circuit_history, on synthetic eval records."""

from __future__ import annotations

import json
import math

import pytest

from core import circuits as command
from core.figures.circuits import (
    BEST_COLOR,
    circuit_figures,
    circuit_losses_figure,
    head_scores_over_training,
    mark_phase_change,
)
from core.figures.training import curves_figure
from core.runs.circuit_history import circuit_evals, circuit_lines, phase_of, phase_words
from core.runs.run_dir import RunDir
from core.training.circuits import phase_change

L, H = 2, 4
BEST = (1, 2)  # the head that becomes an induction head
STEPS = list(range(0, 220, 20))


def rise(step: int, at: float) -> float:
    """A score that jumps from ~0.02 to ~0.95 around ``at``."""
    return round(0.02 + 0.93 / (1 + math.exp(-(step - at) / 8)), 4)


def circuits_at(step: int, forms: bool) -> dict:
    """The circuit scores of one evaluation: head BEST's induction score rises at step 100
    (``forms``), head (0, 1) is a previous-token head from the start."""
    induction = [[0.03] * H for _ in range(L)]
    previous = [[0.05] * H for _ in range(L)]
    previous[0][1] = 0.8
    if forms:
        induction[BEST[0]][BEST[1]] = rise(step, 100)
    return {
        "previous_token": previous,
        "duplicate_token": [[0.01] * H for _ in range(L)],
        "induction": induction,
        "repeat_loss": 4.0 - 3.9 * rise(step, 100) if forms else 4.0,
        "first_copy_loss": 4.1,
        "icl": -2.0 * rise(step, 100) if forms else 0.0,
        "length": 16,
        "sequences": 8,
    }


def records(forms: bool = True) -> list[dict]:
    """Train and eval records of a run whose evaluations carry circuit scores."""
    out = []
    for step in STEPS:
        out.append({"record": "train", "step": step, "loss": 4.0 - step / 100})
        circuits = circuits_at(step, forms)
        out.append({"record": "eval", "step": step, "val_loss": 4.0, "circuits": circuits})
    return out


def band(fig) -> list[tuple[float, float]]:
    """(x0, x1) of each shaded rectangle of a figure."""
    return [(s.x0, s.x1) for s in fig.layout.shapes if s.type == "rect"]


def test_every_head_is_a_line_the_best_induction_head_highlighted_and_the_phase_shaded():
    recs = records()
    phase = phase_of(recs)
    assert phase == phase_change(recs) and (phase["layer"], phase["head"]) == BEST
    assert 80 <= phase["start"] < phase["end"] <= 120
    fig = head_scores_over_training(recs, "induction", phase)
    assert len(fig.data) == L * H
    best = fig.data[-1]  # drawn last: on top of the others
    assert best.line.color == BEST_COLOR and best.line.width == 3 and best.showlegend
    assert "layer 1 head 2" in best.name
    assert list(best.x) == STEPS
    assert list(best.y) == [r["circuits"]["induction"][1][2] for r in circuit_evals(recs)]
    assert all(t.showlegend is False and t.line.width == 1 for t in fig.data[:-1])
    assert band(fig) == [(phase["start"], phase["end"])]
    previous = head_scores_over_training(recs, "previous_token", phase)
    (head01,) = [t for t in previous.data if t.name.startswith("layer 0 head 1")]
    assert set(head01.y) == {0.8} and band(previous) == band(fig)
    losses = circuit_losses_figure(recs, phase)
    assert [t.name.split(" ")[0] for t in losses.data] == ["repeat", "first", "in-context"]
    assert losses.data[0].y[0] > 3.5 and losses.data[0].y[-1] < 0.3
    assert band(losses) == band(fig) and len(circuit_figures(recs, phase)) == 4
    words = phase_words(phase, len(STEPS))
    assert f"between steps {phase['start']} and {phase['end']}" in words
    assert "layer 1 head 2" in words and "repeat's loss fell" in words


def test_no_phase_change_draws_the_heads_without_a_band():
    recs = records(forms=False)
    assert phase_of(recs) is None
    fig = head_scores_over_training(recs, "induction", None)
    assert len(fig.data) == L * H and band(fig) == []
    assert phase_words(None, len(STEPS)).startswith("No induction head yet (11 evaluations)")


def test_a_run_without_circuit_scores_has_empty_charts_and_no_phase():
    translation = [r | {"circuits": None} if r["record"] == "eval" else r for r in records()]
    translation = [{k: v for k, v in r.items() if k != "circuits"} for r in translation]
    assert circuit_evals(translation) == [] and phase_of(translation) is None
    for fig in circuit_figures(translation):
        assert not fig.data and fig.layout.annotations[0].text == "no circuit scores yet"
    assert circuit_lines(translation) == [
        {"summary": True, "evaluations": 0, "best_head": None, "phase_change": None}
    ]


def test_malformed_scores_are_left_out_and_a_resumed_step_counts_once():
    recs = records()
    broken = {"record": "eval", "step": 240, "circuits": {"induction": [[0.5], [0.1, 0.2]]}}
    again = dict(recs[-1], val_loss=3.0)  # a resumed run writes its last step again
    evals = circuit_evals([*recs, broken, again])
    assert [r["step"] for r in evals] == STEPS and evals[-1]["val_loss"] == 3.0


@pytest.mark.parametrize("metric", ["loss", "val_loss"])
def test_the_phase_change_is_shaded_on_the_loss_curves(metric):
    recs = records()
    phase = phase_of(recs)
    fig = mark_phase_change(curves_figure({"run": recs}, metric), phase)
    assert band(fig) == [(phase["start"], phase["end"])]
    assert band(mark_phase_change(curves_figure({"run": recs}, metric), None)) == []


def run_dir_of(tmp_path, recs: list[dict]) -> RunDir:
    """A run directory holding ``recs`` as its metrics."""
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.metrics.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return rd


def test_the_command_prints_a_line_per_evaluation_then_the_phase_change(tmp_path, capsys):
    recs = records()
    rd = run_dir_of(tmp_path, recs)
    assert command.main(["--run", str(rd.path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *evals, summary = lines
    assert [e["step"] for e in evals] == STEPS
    assert all((e["layer"], e["head"]) == BEST for e in evals)
    assert evals[0]["induction"] < 0.1 and evals[-1]["induction"] > 0.9
    assert evals[-1]["previous_token"] == 0.05 and evals[0]["repeat_loss"] > 3.5
    assert evals[-1]["icl"] < -1.5 and evals[0]["val_loss"] == 4.0
    assert summary["summary"] and summary["evaluations"] == len(STEPS)
    assert summary["best_head"] == list(BEST)
    assert summary["phase_change"] == json.loads(json.dumps(phase_change(recs)))
    assert circuit_lines(recs)[:-1] == evals  # what the page reads, the command prints


def test_the_command_says_in_one_line_when_a_run_has_no_circuit_scores(tmp_path, capsys):
    rd = run_dir_of(tmp_path, [{"record": "eval", "step": 20, "val_loss": 3.0}])
    assert command.main(["--run", str(rd.path)]) != 0
    err = capsys.readouterr().err.strip()
    assert "no circuit scores" in err and "--preset induction" in err and "\n" not in err
    assert command.main(["--run", str(tmp_path / "nowhere")]) != 0
    assert "not a run directory" in capsys.readouterr().err


def test_a_head_formed_before_the_first_evaluation_is_named_without_a_band():
    """A resumed or late-evaluated run: the head scores high from its first record on."""
    recs = [r for r in records() if r["step"] >= 140]
    phase = phase_of(recs)
    assert phase is not None and phase["start"] is None
    assert band(head_scores_over_training(recs, "induction", phase)) == []
    words = phase_words(phase, len(circuit_evals(recs)))
    assert words.startswith("Layer 1 head 2 scored 0.5 or more from the first evaluation on")
