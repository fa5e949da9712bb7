"""A run's circuit scores over training, read from its evaluation records: per evaluation,
the best head and the phase change.

An induction run's evaluations carry ``"circuits"`` (``core.training.circuits``: per head
the previous-token, duplicate-token and induction scores, ``[layer][head]``; the repeat's
and the first copy's loss, the in-context-learning score). The Train page draws these
(``core.figures.circuits``) and ``python -m core.circuits`` prints them: both read them here.
"""

from __future__ import annotations

import math
from pathlib import Path

from core.runs.history import SUFFIX, open_history
from core.runs.run_dir import RunDir
from core.training.circuits import FORMED, phase_change

MEASURES = ("induction", "previous_token", "duplicate_token")  # per-head scores, [layer][head]
LOSSES = ("repeat_loss", "first_copy_loss", "icl")  # one number per evaluation


def _grid(value) -> bool:
    """True for a non-empty list of equally long, non-empty lists of numbers."""
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        return False
    width = len(value[0])
    return width > 0 and all(
        len(r) == width and all(isinstance(v, (int, float)) for v in r) for r in value
    )


def circuit_evals(records: list[dict]) -> list[dict]:
    """The evaluation records that carry circuit scores, by step (the last of a step kept:
    a resumed run writes its step again); a record with malformed scores is left out."""
    by_step: dict[int, dict] = {}
    for r in records:
        c = r.get("circuits")
        ok = r.get("record") == "eval" and isinstance(r.get("step"), int) and isinstance(c, dict)
        if ok and all(_grid(c.get(m)) for m in MEASURES):
            by_step[r["step"]] = r
    return [by_step[s] for s in sorted(by_step)]


def trained_length(model_path) -> int | None:
    """The copy length an induction model's circuits were scored at while it trained (its
    task's longest copy), read from its history: the run directory it sits in, else the
    ``.history`` beside it; None where neither holds circuit scores."""
    path = Path(model_path)
    for source in (path.parent, path.with_suffix(SUFFIX)):
        if source.suffix == SUFFIX and not source.is_file():
            continue
        if source.suffix != SUFFIX and not (source / "metrics.jsonl").is_file():
            continue
        try:
            evals = circuit_evals(open_history(source).read_metrics())
        except (OSError, ValueError, RuntimeError, KeyError):
            continue
        length = evals[-1]["circuits"].get("length") if evals else None
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            return length
    return None


def heads_of(evals: list[dict]) -> list[tuple[int, int]]:
    """Every (layer, head) of the last evaluation's scores."""
    grid = evals[-1]["circuits"]["induction"]
    return [(layer, head) for layer, row in enumerate(grid) for head in range(len(row))]


def score(record: dict, measure: str, head: tuple[int, int]) -> float | None:
    """One head's score in one evaluation (None where that evaluation lacks the head)."""
    grid = record["circuits"][measure]
    layer, h = head
    return float(grid[layer][h]) if layer < len(grid) and h < len(grid[layer]) else None


def score_grid(record: dict, measure: str, heads: list[tuple[int, int]]) -> list[list]:
    """``measure``'s score of each of ``heads`` in one evaluation, ``[layer][head]`` (the
    numbers the Train page's chart draws at that step; None where the evaluation lacks a head
    or its score is not finite)."""
    grid: list[list] = [[] for _ in range(1 + max((layer for layer, _ in heads), default=-1))]
    for layer, head in heads:
        grid[layer].append(_number(score(record, measure, (layer, head))))
    return grid


def best_head(evals: list[dict], phase: dict | None) -> tuple[int, int] | None:
    """The head the phase change names, else the one with the highest last induction score."""
    if phase is not None:
        return int(phase["layer"]), int(phase["head"])
    if not evals:
        return None
    return max(heads_of(evals), key=lambda h: score(evals[-1], "induction", h) or -math.inf)


def _number(value) -> float | None:
    """A finite float, else None (JSON has no NaN)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def phase_of(records: list[dict]) -> dict | None:
    """The phase change of a run whose evaluations carry circuit scores (None without any,
    or before the head formed): ``core.training.circuits.phase_change`` of those records."""
    evals = circuit_evals(records)
    return phase_change(evals) if evals else None


def phase_words(phase: dict | None, evals: int) -> str:
    """What the charts' shaded band is, in a sentence or two."""
    if not evals:
        return "No circuit scores yet: the first evaluation measures them."
    if phase is None:
        return (
            f"No induction head yet ({evals} evaluations): no head's induction score has "
            f"reached {FORMED} to stay."
        )
    who = f"layer {phase['layer']} head {phase['head']}"
    if phase.get("start") is None:
        return (
            f"{who.capitalize()} scored {FORMED} or more from the first evaluation on: "
            "no rise to shade."
        )
    words = (
        f"Phase change between steps {phase['start']:,} and {phase['end']:,} (shaded): the "
        f"induction score of {who} rose fastest there, by {phase['rise']:.2f}"
    )
    losses = phase.get("repeat_loss_before"), phase.get("repeat_loss_after")
    if all(isinstance(v, (int, float)) and math.isfinite(v) for v in losses):
        words += f", and the repeat's loss fell from {losses[0]:.2f} to {losses[1]:.2f}"
    return words + f". It stays at {FORMED} or more from step {phase['formed']:,} on."


def circuit_lines(records: list[dict]) -> list[dict]:
    """One line per evaluation: its step and validation loss, the best head's three scores,
    the repeat's and the first copy's loss and the in-context-learning score, and
    ``per_head``: each score of every head, ``[layer][head]`` (``score_grid``: what the Train
    page's charts draw); then a summary line (``summary``: the best head, the phase change or
    None, the evaluations read)."""
    evals = circuit_evals(records)
    phase = phase_of(records)
    head = best_head(evals, phase)
    heads = heads_of(evals) if evals else []
    lines = [
        {
            "step": r["step"],
            "val_loss": _number(r.get("val_loss")),
            "layer": head[0],
            "head": head[1],
            **{m: _number(score(r, m, head)) for m in MEASURES},
            **{k: _number(r["circuits"].get(k)) for k in LOSSES},
            "per_head": {m: score_grid(r, m, heads) for m in MEASURES},
        }
        for r in evals
    ]
    best = list(head) if head else None
    summary = {"summary": True, "evaluations": len(evals), "best_head": best, "phase_change": phase}
    return [*lines, summary]


def run_circuit_lines(run: str | Path) -> list[dict]:
    """``circuit_lines`` of a run directory or a shipped model's ``.history`` file (what
    ``python -m core.circuits --run`` prints and the notebook's ``circuits`` returns);
    ValueError in one line for anything else, a file that cannot be read, or a run that
    measured no circuit scores."""
    path = Path(run)
    shipped = path.suffix == SUFFIX and path.is_file()
    if not shipped and not (path.is_dir() and RunDir(path).metrics.is_file()):
        raise ValueError(
            f"{run} is not a run directory (no metrics.jsonl in it) nor a .history file."
        )
    try:
        records = open_history(path).read_metrics()
    except (OSError, ValueError, RuntimeError) as e:
        raise ValueError(f"{run} cannot be read: {e}") from None
    lines = circuit_lines(records)
    if len(lines) == 1:
        raise ValueError(
            f"{run} has no circuit scores: a run on the induction or lm task, or an "
            "encoder's run, measures them (python -m core.train --preset induction)."
        )
    return lines
