"""Tests for core.figures.training: smoothing, downsampling and the training-curve figures."""

from __future__ import annotations

import math

import pytest

from core.figures import training as tf


def train_records(n: int, start: float = 5.0) -> list[dict]:
    """n training records with a decaying loss, every 10 steps."""
    return [
        {
            "record": "train",
            "step": 10 * (i + 1),
            "loss": start / (i + 1),
            "lr": 1e-3,
            "tokens_per_s": 1000.0 + i,
            "grad_norm": 1.0,
        }
        for i in range(n)
    ]


def eval_records(steps: list[int]) -> list[dict]:
    """Evaluation records at ``steps``."""
    return [
        {"record": "eval", "step": s, "val_loss": 3.0 - s / 100, "val_bleu": s / 10} for s in steps
    ]


# ----------------------------------------------------------------------------- smooth


def test_smooth_zero_weight_is_identity():
    assert tf.smooth([3.0, 1.0, 2.0], 0.0) == [3.0, 1.0, 2.0]


def test_smooth_is_debiased_like_tensorboard():
    assert tf.smooth([1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 5 / 3, 17 / 7])
    assert tf.smooth([4.0] * 5, 0.9) == pytest.approx([4.0] * 5)  # no pull towards 0


@pytest.mark.parametrize("weight", [-0.1, 1.0, 2.0])
def test_smooth_rejects_bad_weights(weight):
    with pytest.raises(ValueError, match="smoothing weight"):
        tf.smooth([1.0], weight)


# ----------------------------------------------------------------------------- downsample


@pytest.mark.parametrize(
    ("n", "max_points"), [(0, 5), (3, 5), (5, 5), (6, 5), (1000, 7), (10_001, 500)]
)
def test_downsample_keeps_ends_and_the_budget(n, max_points):
    items = list(range(n))
    out = tf.downsample(items, max_points)
    assert len(out) == min(n, max_points)
    assert out == sorted(out)
    assert out[:1] == items[:1] and out[-1:] == items[-1:]  # both ends kept (none when empty)


def test_downsample_is_evenly_spaced():
    assert tf.downsample(list(range(10)), 4) == [0, 3, 6, 9]
    with pytest.raises(ValueError, match="max_points"):
        tf.downsample([1, 2, 3], 1)


# ----------------------------------------------------------------------------- series


def test_series_reads_one_kind_and_skips_gaps():
    records = [
        *train_records(3),
        *eval_records([20]),
        {"record": "train", "step": 40, "loss": None, "tokens_per_s": None},
        {"record": "train", "step": 50, "loss": math.nan},
    ]
    assert tf.series(records, "loss") == ([10, 20, 30], [5.0, 2.5, 5 / 3])
    assert tf.series(records, "val_bleu") == ([20], [2.0])
    assert tf.series(records, "tokens_per_s")[0] == [10, 20, 30]


# ----------------------------------------------------------------------------- figures


def test_train_loss_has_faint_raw_and_smoothed_traces_per_run():
    fig = tf.curves_figure(
        {"a": train_records(50), "b": train_records(50, 9.0)}, "loss", smoothing=0.8
    )
    names = [t.name for t in fig.data]
    assert names == ["a (raw)", "a", "b (raw)", "b"]
    raw, smoothed = fig.data[0], fig.data[1]
    assert raw.opacity < 1 and raw.line.color == smoothed.line.color
    assert fig.data[1].line.color != fig.data[3].line.color  # runs get their own colours
    assert list(raw.y) == [5.0 / (i + 1) for i in range(50)]
    assert list(smoothed.y) == pytest.approx(tf.smooth(list(raw.y), 0.8))
    assert fig.layout.showlegend is True and fig.layout.xaxis.title.text == "training step"


def test_learning_rate_is_never_smoothed():
    fig = tf.curves_figure({"a": train_records(5)}, "lr", smoothing=0.9)
    assert [t.name for t in fig.data] == ["a"] and list(fig.data[0].y) == [1e-3] * 5


def test_no_smoothing_draws_one_trace_per_run():
    fig = tf.curves_figure({"a": train_records(5)}, "loss", smoothing=0.0)
    assert [t.name for t in fig.data] == ["a"]
    assert fig.layout.showlegend is False


def test_long_curves_are_downsampled_after_smoothing():
    records = train_records(5000)
    fig = tf.curves_figure({"a": records}, "loss", smoothing=0.9, max_points=200)
    raw, smoothed = fig.data
    assert len(raw.x) == len(smoothed.x) == 200
    assert raw.x[0] == 10 and raw.x[-1] == 50_000
    full = tf.smooth([r["loss"] for r in records], 0.9)
    assert smoothed.y[-1] == pytest.approx(full[-1])  # smoothed over every point


def test_eval_metrics_are_markers_and_log_axis_is_optional():
    fig = tf.curves_figure({"a": eval_records([100, 200, 300])}, "val_bleu", log_y=True)
    (trace,) = fig.data
    assert trace.mode == "lines+markers" and list(trace.y) == [10.0, 20.0, 30.0]
    assert fig.layout.yaxis.type == "log"
    assert tf.curves_figure({"a": []}, "val_loss").layout.yaxis.type == "linear"


def test_empty_figure_says_so():
    fig = tf.curves_figure({"a": train_records(3)}, "val_bleu")
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text == "no data yet"


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        tf.curves_figure({}, "bleu")


def test_training_curve_figure(tiny_run):
    fig = tf.training_curve_figure(tiny_run, 100)
    assert fig.data[0].name == "training loss" and len(fig.data[0].x) == 15
    assert fig.layout.shapes[0].x0 == 100


@pytest.mark.parametrize("log_y", [False, True])
def test_a_constant_series_is_drawn_around_its_value(log_y):
    """d2l's constant learning rate must not sit on an axis from -0.5 to 1."""
    records = [{"record": "train", "step": s, "lr": 0.0015} for s in range(1, 30)]
    fig = tf.curves_figure({"r": records}, "lr", log_y=log_y)
    low, high = fig.layout.yaxis.range
    value = math.log10(0.0015) if log_y else 0.0015
    assert low < value < high and high - low <= (1.0 if log_y else 0.0016)


def test_compared_runs_put_their_legend_below_the_title():
    records = [{"record": "train", "step": s, "loss": 1.0 / s} for s in range(1, 30)]
    fig = tf.curves_figure({"a": records, "b": records}, "loss")
    legend = fig.layout.legend  # at the figure's bottom edge: under the x title, never on it
    assert fig.layout.showlegend and (legend.yref, legend.y, legend.yanchor) == (
        "container",
        0,
        "bottom",
    )


def test_one_colour_key_names_the_runs_in_their_colours_as_text():
    key = tf.legend_key_html(["mine", '<img src=x onerror="alert(1)">'])
    assert tf.COLORS[0] in key and tf.COLORS[1] in key and "mine" in key
    assert "<img" not in key and "&lt;img" in key
    fig = tf.curves_figure({"a": [], "b": []}, "loss", legend=False)
    assert fig.layout.showlegend is False


def test_a_run_name_in_a_legend_is_text_never_html():
    records = [{"record": "train", "step": s, "loss": 1.0 / s} for s in range(1, 5)]
    fig = tf.curves_figure({'<a href="http://x">me</a>': records, "b": records}, "loss")
    names = [t.name for t in fig.data]
    assert all("<a" not in n for n in names) and any("&lt;a href" in n for n in names)


def test_a_long_run_name_wraps_inside_its_key_entry():
    key = tf.legend_key_html(["x" * 60, "short"])
    assert key.count("overflow-wrap:anywhere") == 2 and "x" * 60 in key


def test_a_curve_of_one_point_is_drawn_as_a_marker():
    """Issue 53, item 8: early in a run the charts showed axes and no point (a line of one
    point draws nothing)."""
    from core.figures.training import curves_figure

    early = [{"record": "train", "step": 10, "loss": 7.1, "elapsed": 3.0}]
    for smoothing in (0.0, 0.6):
        fig = curves_figure({"run": early}, "loss", smoothing=smoothing)
        shown = [t for t in fig.data if t.showlegend is not False]
        assert shown and all("markers" in t.mode for t in shown)
    many = [{"record": "train", "step": s, "loss": 7.0, "elapsed": s} for s in range(1, 50)]
    fig = curves_figure({"run": many}, "loss", smoothing=0.0)
    assert all(t.mode == "lines" for t in fig.data)
