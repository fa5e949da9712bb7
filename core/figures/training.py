"""Training curves as Plotly figures: several runs overlaid, raw and smoothed, downsampled.

Pure functions over metric records (the dicts of metrics.jsonl); no Streamlit here.
"""

from __future__ import annotations

import html
import math
from datetime import datetime

import plotly.graph_objects as go
from plotly.colors import qualitative

from core.figures.labels import PLAIN_NUMBERS, legend_below, log_ticks, plotly_text
from core.runs.history import open_history

FEW_POINTS = 3  # a curve of this many points or fewer (early in a run) also draws markers
LOG_SCALE = {"loss", "val_loss", "lr", "grad_norm"}  # metrics drawn on a log axis if asked
METRICS: dict[str, tuple[str, str, str]] = {  # metric -> (record logging it, title, y axis)
    "loss": ("train", "training loss (as trained)", "loss"),  # smoothing, dropout: METRIC_HELP
    "val_loss": ("eval", "validation loss (cross-entropy)", "loss"),
    "val_bleu": ("eval", "validation BLEU", "BLEU"),
    "lr": ("train", "learning rate", "rate"),
    "tokens_per_s": ("train", "target tokens per second", "tokens/s"),
    "grad_norm": ("train", "gradient norm (before clipping)", "norm"),
    "cpu_percent": ("train", "process CPU (100 % = one core)", "CPU %"),
    "rss_mb": ("train", "resident memory of the trainer", "MB"),
    "peak_rss_mb": ("train", "peak resident memory of the trainer", "MB"),
    "gpu_mem_mb": ("train", "GPU memory held by torch", "MB"),
}  # the y axis's title is short: a long one runs into the chart's title on a narrow chart
# charted only when a run logged them
OPTIONAL = {"cpu_percent", "rss_mb", "peak_rss_mb", "gpu_mem_mb"}


COLORS = qualitative.Plotly


# a schedule, or a reading that is not noisy: drawn as is
UNSMOOTHED = {"lr", "rss_mb", "peak_rss_mb", "gpu_mem_mb"}


def _finite(value) -> bool:
    """True for a real, finite number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


X_AXES = {  # x-axis choice: (record field, axis title)
    "step": ("step", "training step"),
    "relative": ("elapsed", "training time (minutes)"),
    "wall": ("time", "wall-clock time"),
}


def series(records: list[dict], metric: str, x_axis: str = "step") -> tuple[list, list[float]]:
    """x and values of ``metric`` from the records that log it (gaps skipped).

    x is the step, the minutes of training (``relative``; evaluations not counted, as in
    the time budget) or the wall-clock time the record was written (``wall``; records of
    runs made before it was logged have none and are left out).
    """
    record, key = METRICS[metric][0], X_AXES[x_axis][0]
    points = [
        (r[key], r[metric])
        for r in records
        if r.get("record") == record and _finite(r.get(key)) and _finite(r.get(metric))
    ]
    xs = [p[0] for p in points]
    if x_axis == "relative":
        xs = [x / 60 for x in xs]
    elif x_axis == "wall":
        xs = [datetime.fromtimestamp(x) for x in xs]
    return xs, [float(p[1]) for p in points]


def smooth(values: list[float], weight: float) -> list[float]:
    """Exponential moving average with TensorBoard's debiasing (weight 0 = no smoothing)."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1) (got {weight})")
    out, last = [], 0.0
    for n, v in enumerate(values, start=1):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def downsample(items: list, max_points: int) -> list:
    """At most ``max_points`` evenly spaced items, always keeping the first and the last."""
    n = len(items)
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2 (got {max_points})")
    if n <= max_points:
        return list(items)
    idx = sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
    return [items[i] for i in idx]


def _thin(steps: list, values: list, max_points: int) -> tuple[list, list]:
    """Downsample paired steps and values together."""
    pairs = downsample(list(zip(steps, values)), max_points)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _run_traces(
    name: str,
    records: list[dict],
    metric: str,
    color: str,
    smoothing: float,
    max_points: int,
    x_axis: str = "step",
) -> list[go.Scatter]:
    """The traces of one run: raw (faint) and smoothed for train metrics, markers for eval."""
    steps, values = series(records, metric, x_axis)
    if not steps:
        return []
    if METRICS[metric][0] == "eval":
        x, y = _thin(steps, values, max_points)
        return [
            go.Scatter(
                x=x, y=y, name=name, mode="lines+markers", line={"color": color}, legendgroup=name
            )
        ]
    traces = []
    if smoothing > 0 and metric not in UNSMOOTHED:
        x, y = _thin(steps, values, max_points)
        traces.append(
            go.Scatter(
                x=x,
                y=y,
                name=f"{name} (raw)",
                mode="lines",
                opacity=0.3,
                line={"color": color, "width": 1},
                legendgroup=name,
                showlegend=False,
                hoverinfo="skip",
            )
        )
        values = smooth(values, smoothing)
    x, y = _thin(steps, values, max_points)
    mode = "lines+markers" if len(x) <= FEW_POINTS else "lines"  # one point: a line draws nothing
    traces.append(
        go.Scatter(
            x=x, y=y, name=name, mode=mode, line={"color": color, "width": 2}, legendgroup=name
        )
    )
    return traces


def curves_figure(
    runs: dict[str, list[dict]],
    metric: str,
    smoothing: float = 0.6,
    log_y: bool = False,
    max_points: int = 500,
    height: int = 300,
    legend: bool = True,
    x_axis: str = "step",
) -> go.Figure:
    """One metric of several runs overlaid; train metrics raw + smoothed. x: ``x_axis``, one
    of X_AXES (step, minutes of training, wall-clock time).

    ``legend=False`` leaves the run names to one shared key (``legend_key_html``), which
    wraps in a narrow page where a legend in each small chart is cut.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric '{metric}': choose one of {', '.join(METRICS)}")
    if x_axis not in X_AXES:
        raise ValueError(f"unknown x-axis '{x_axis}': choose one of {', '.join(X_AXES)}")
    fig = go.Figure()
    for i, (name, records) in enumerate(runs.items()):
        label = plotly_text(name)  # a user's run name: shown, never HTML
        for trace in _run_traces(
            label, records, metric, COLORS[i % len(COLORS)], smoothing, max_points, x_axis
        ):
            fig.add_trace(trace)
    _, title, y_title = METRICS[metric]
    shown = legend and len(runs) > 1
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        **(legend_below(fig, height) if shown else {"height": height}),
        hovermode="x unified",
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        uirevision=metric,
        showlegend=shown,
    )
    fig.update_xaxes(title_text=X_AXES[x_axis][1], **({} if x_axis == "wall" else PLAIN_NUMBERS))
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear", **PLAIN_NUMBERS)
    values = [y for trace in fig.data for y in (trace.y or ())]
    if log_y:
        fig.update_yaxes(**log_ticks(values))
    flat = _flat_range(values, log_y)
    if flat is not None:
        fig.update_yaxes(range=flat)
    if not fig.data:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(
            text="no data yet",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
            font={"size": 14, "color": "gray"},
        )
    return fig


def _flat_range(values: list, log_y: bool) -> list[float] | None:
    """A y range around a constant series (Plotly would draw it from -0.5 to 1), else None."""
    finite = [float(v) for v in values if _finite(v)]
    if not finite or max(finite) - min(finite) > 1e-12 * max(1.0, abs(max(finite))):
        return None
    v = finite[0]
    if log_y:
        return [math.log10(v) - 0.5, math.log10(v) + 0.5] if v > 0 else None
    pad = abs(v) * 0.5 or 1.0
    return [v - pad, v + pad]


def legend_key_html(names: list[str]) -> str:
    """One colour key for the curves of ``names`` (in curves_figure's order), as safe HTML.

    This is HTML for the page (``st.html``), not a Plotly label: names are escaped as HTML.
    """
    items = [  # each entry wraps inside itself, even a long name without spaces
        f'<span style="display:inline-block;max-width:100%;overflow-wrap:anywhere;'
        f'margin-right:1rem"><span style="color:{COLORS[i % len(COLORS)]};font-weight:bold">'
        f"&#9632;</span>&nbsp;{html.escape(str(name))}</span>"
        for i, name in enumerate(names)
    ]
    return '<div style="font-size:0.9rem;line-height:1.6">' + " ".join(items) + "</div>"


def training_curve_figure(source, step: int | None = None) -> go.Figure:
    """Training loss and validation BLEU over steps (of a run or history file), at ``step``."""
    records = open_history(source).read_metrics()
    train = [(r["step"], r["loss"]) for r in records if r.get("record") == "train" and "loss" in r]
    evals = [
        (r["step"], r["val_bleu"])
        for r in records
        if r.get("record") == "eval" and r.get("val_bleu") is not None
    ]
    fig = go.Figure()
    if train:
        fig.add_scatter(x=[s for s, _ in train], y=[v for _, v in train], name="training loss")
    if evals:
        fig.add_scatter(
            x=[s for s, _ in evals],
            y=[v for _, v in evals],
            name="val BLEU",
            yaxis="y2",
            mode="lines+markers",
        )
    if step is not None:
        fig.add_vline(x=step, line_dash="dash", line_color="gray")
    fig.update_layout(
        title={"text": "Training so far"},
        **legend_below(fig, 300),
        margin={"t": 50},
        xaxis={"title": {"text": "step"}} | PLAIN_NUMBERS,
        yaxis={"title": {"text": "loss"}} | PLAIN_NUMBERS,
        yaxis2={"title": {"text": "BLEU"}, "overlaying": "y", "side": "right"} | PLAIN_NUMBERS,
    )
    return fig
