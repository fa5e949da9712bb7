"""Runs side by side: a parallel-coordinates chart of their settings against what they reached.

Pure functions over the rows of ``core.runs.table`` (one dict per run); no Streamlit here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from core.figures.labels import log_ticks, plotly_text
from core.runs.config_diff import value_text
from core.runs.table import RUN_COLUMNS, setting_names

RESULT_AXES = ("final loss", "val loss", "final BLEU")  # the last axes, after the settings
COLOR_BY = "final BLEU"  # lines coloured by this result
LOG_RATIO = 100.0  # a positive numeric axis spanning this factor or more is drawn in log10
TICK_FORMAT = ".4~g"  # numeric ticks with at most 4 significant digits (not 3.72171)
ZERO_MEANS = {  # settings whose 0 is a word, not a quantity (their config's comments)
    "train.epochs": "no limit",
    "train.max_steps": "no limit",
    "train.time_budget": "no limit",
    "train.grad_clip": "off",
    "train.threads": "default",
    "train.snapshot_models": "none",
    "train.align_weight": "off",
    "data.num_train": "no limit",
    "data.max_pairs": "all",
}


def _is_number(value) -> bool:
    """True for a real, finite number (not a bool)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and math.isfinite(value)


ROOMY_AXES = 10  # axes whose labels fit side by side at a slight angle on a wide page
DEFAULT_AXES = 7  # settings drawn by default (with the three results: ROOMY_AXES)


def default_axes(rows: Sequence[dict]) -> list[str]:
    """The settings drawn by default: those that differ, the most distinct values first, at
    most DEFAULT_AXES (22 axes once made every label unreadable), in the table's order."""
    varying = varying_settings(rows)
    distinct = {n: len({value_text(r.get(n)) for r in rows}) for n in varying}
    kept = set(sorted(varying, key=lambda n: -distinct[n])[:DEFAULT_AXES])
    return [n for n in varying if n in kept]


def chart_rows(rows: Sequence[dict], color: str = COLOR_BY) -> list[dict]:
    """The rows the chart can draw: those with a value of ``color`` (a run without a BLEU
    yet has no place on its axis)."""
    return [r for r in rows if _is_number(r.get(color))]


def varying_settings(rows: Sequence[dict]) -> list[str]:
    """The settings (preset and device included) whose values are not all the same."""
    names = [*RUN_COLUMNS, *setting_names()]
    return [
        n
        for n in names
        if not any(isinstance(r.get(n), (list, dict)) for r in rows)
        and len({value_text(r.get(n)) for r in rows}) > 1
    ]


def axis(label: str, values: list) -> dict:
    """One parcoords dimension: numbers as they are (log10 over a wide positive range,
    ticks of at most 4 digits), anything else as categories with their text on the ticks; a
    setting whose 0 means "no limit" (ZERO_MEANS) is a category axis where any run has 0,
    the word in numeric order's place at the end."""
    if label in ZERO_MEANS and any(_is_number(v) and v == 0 for v in values):
        return _zero_as_word(label, values)
    if values and all(_is_number(v) for v in values):
        lo, hi = min(values), max(values)
        if lo > 0 and hi / lo >= LOG_RATIO:
            ticks = log_ticks(values)
            return {
                "label": f"{label} (log)",
                "values": [math.log10(v) for v in values],
                "tickvals": [math.log10(t) for t in ticks.get("tickvals", [])],
                "ticktext": ticks.get("ticktext", []),
            }
        return {"label": label, "values": [float(v) for v in values], "tickformat": TICK_FORMAT}
    texts = [value_text(v) for v in values]
    categories = sorted(set(texts))
    return {
        "label": label,
        "values": [categories.index(t) for t in texts],
        "tickvals": list(range(len(categories))),
        "ticktext": [plotly_text(c) for c in categories],
        "range": [-0.5, len(categories) - 0.5],
    }


def _zero_as_word(label: str, values: list) -> dict:
    """A category axis of a setting whose 0 is a word: the numbers in order, then the word."""
    word = ZERO_MEANS[label]
    numbers = sorted({v for v in values if _is_number(v) and v != 0})
    texts = [value_text(v) for v in numbers]
    place = {v: i for i, v in enumerate(numbers)}
    index = [len(numbers) if v == 0 else place.get(v, len(numbers)) for v in values]
    return {
        "label": label,
        "values": index,
        "tickvals": list(range(len(numbers) + 1)),
        "ticktext": [plotly_text(t) for t in [*texts, word]],
        "range": [-0.5, len(numbers) + 0.5],
    }


def runs_parcoords(
    rows: Sequence[dict],
    settings: Sequence[str] | None = None,
    color: str = COLOR_BY,
    height: int = 420,
) -> go.Figure:
    """Parallel coordinates: one line per run with a ``color`` value, one axis per setting
    (default: those that differ) and per result (RESULT_AXES with values for every run),
    lines coloured by ``color``."""
    rows = chart_rows(rows, color)
    settings = varying_settings(rows) if settings is None else list(settings)
    results = [m for m in RESULT_AXES if rows and all(_is_number(r.get(m)) for r in rows)]
    dims = [axis(s, [r.get(s) for r in rows]) for s in settings]
    dims += [axis(m, [r.get(m) for r in rows]) for m in results if m not in settings]
    for d in dims:
        d["label"] = plotly_text(d["label"])
    shade = [float(r[color]) for r in rows]
    line = {
        "color": shade,
        "colorscale": "Viridis",
        "showscale": True,
        "colorbar": {"title": {"text": plotly_text(color)}, "thickness": 12},
    }
    if shade:
        line |= {"cmin": min(shade), "cmax": max(shade)}
    crowded = len(dims) > ROOMY_AXES  # more axes than labels fit side by side: steeper labels
    angle, bottom = (-45, 120) if crowded else (-20, 60)
    fig = go.Figure(go.Parcoords(dimensions=dims, line=line, labelangle=angle, labelside="bottom"))
    fig.update_layout(
        title={"text": f"Settings and results of {len(rows)} runs (colour: {color})"},
        height=height + bottom - 60,
        margin={"l": 60, "r": 40, "t": 70, "b": bottom},
    )
    return fig
