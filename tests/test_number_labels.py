"""Numbers on figures read as plain numbers: full log-axis labels, no SI prefixes (issue #21)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from core.figures import importance as imp
from core.figures import training as tf
from core.figures.labels import log_ticks, number_text

SI_FORMAT = re.compile(r"\.?\d*~?s\}")  # a d3 format ending in "s": 25m, 100μ


def is_full_number(text: str) -> bool:
    """True for a complete number such as "0.3", "2" or "1e-4" (not a bare digit for 0.3)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.3, "0.3"), (1.0, "1"), (2.0, "2"), (1e-4, "1e-4"), (5e-4, "5e-4"), (2.5e6, "2.5e6")],
)
def test_number_text_is_the_whole_number(value, text):
    assert number_text(value) == text


def loss_records() -> list[dict]:
    """Training records whose loss falls from 5 to 0.3 and whose rate climbs 5e-5 to 2.5e-4."""
    return [
        {"record": "train", "step": 10 * (i + 1), "loss": 5 / (1 + i), "lr": 5e-5 * (1 + i / 4)}
        for i in range(17)
    ]


@pytest.mark.parametrize("metric", ["loss", "lr"])
def test_log_axes_label_every_tick_with_its_full_value(metric):
    fig = tf.curves_figure({"run": loss_records()}, metric, log_y=True)
    axis = fig.layout.yaxis
    assert axis.type == "log" and axis.tickmode == "array"
    assert len(axis.tickvals) >= 3 and len(axis.tickvals) == len(axis.ticktext)
    for value, text in zip(axis.tickvals, axis.ticktext):
        assert is_full_number(text) and float(text) == pytest.approx(value, rel=1e-6)
    values = [y for trace in fig.data for y in trace.y]
    shown = [v for v in axis.tickvals if min(values) <= v <= max(values)]
    assert 2 <= len(shown) <= 8


def test_loss_below_one_is_labelled_as_decimals():
    axis = tf.curves_figure({"run": loss_records()}, "loss", log_y=True).layout.yaxis
    assert "0.5" in axis.ticktext and "1" in axis.ticktext
    assert not {"9", "8", "3"} & set(axis.ticktext)


def test_log_ticks_cover_many_decades_sparsely():
    ticks = log_ticks([1e-8, 1e3])
    assert len(ticks["tickvals"]) <= 8 and all(map(is_full_number, ticks["ticktext"]))


@pytest.mark.parametrize("metric", ["lr", "loss", "tokens_per_s", "grad_norm"])
def test_training_axes_never_use_si_prefixes(metric):
    fig = tf.curves_figure({"run": loss_records()}, metric)
    assert fig.layout.yaxis.exponentformat == "e" and fig.layout.xaxis.exponentformat == "e"


def importance_table() -> pd.DataFrame:
    """Two heads of each kind with small gradient scores."""
    rows = [
        (kind, layer, 0, 0.025 * (layer + 1), -0.5, 0.01)
        for kind in ("encoder", "decoder_self", "cross")
        for layer in range(2)
    ]
    return pd.DataFrame(
        rows, columns=["kind", "layer", "head", "gradient", "delta_bleu", "delta_loss"]
    )


@pytest.mark.parametrize("column", ["gradient", "delta_bleu", "delta_loss"])
def test_importance_cells_and_colour_bar_have_no_si_prefixes(column):
    fig = imp.importance_grid_figure(importance_table(), column, "baseline")
    for trace in fig.data:
        assert not SI_FORMAT.search(trace.texttemplate) and not SI_FORMAT.search(
            trace.hovertemplate
        )
    assert fig.layout.coloraxis.colorbar.exponentformat == "e"


def test_agreement_hover_and_axes_have_no_si_prefixes():
    fig = imp.agreement_figure(importance_table(), {"loss": 0.5, "bleu": 0.4})
    assert not any(SI_FORMAT.search(t.hovertemplate) for t in fig.data)
    assert fig.layout.xaxis.exponentformat == "e" and fig.layout.yaxis.exponentformat == "e"


def test_no_figure_module_formats_numbers_with_si_prefixes():
    figures = Path(__file__).resolve().parents[1] / "core" / "figures"
    for path in figures.glob("*.py"):
        formats = re.findall(r"%\{[a-z]+:([^}]*)\}", path.read_text())
        assert not [f for f in formats if f.endswith("s")], path.name
    spec = json.dumps(imp.importance_grid_figure(importance_table(), "gradient", "b").to_dict())
    assert "~s" not in spec


def test_log_ticks_never_crowd_a_short_span():
    """Weight norms from 7.5 to 30 got 7, 8, 9, 10, 20, 30: 8, 9 and 10 collided in a small
    chart. Ticks closer than a twelfth of the span move to the next sparser set."""
    import numpy as np

    ticks = log_ticks([7.5, 30])
    inside = [t for t in ticks["tickvals"] if 7.5 <= t <= 30]
    assert ticks["ticktext"] == ["5", "10", "20", "50"] and inside == [10, 20]
    gaps = np.diff(np.log10(inside))
    assert (gaps >= (np.log10(30) - np.log10(7.5)) / 12).all()
