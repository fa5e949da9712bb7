"""A run's layers over training: weight and gradient norms per layer group, and their
distributions drawn as TensorBoard draws them.

Pure functions over metric records (``layer_norms`` in training records, ``distributions``
in evaluation records, ``core.training.monitor``; runs from before those carry fixed-bin
``histograms``, still drawn as a heat map).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from core.figures.labels import PLAIN_NUMBERS, legend_below, log_ticks, plotly_text
from core.figures.training import downsample

WHICH = {"weights": "weight norm per layer", "grads": "gradient norm per layer (last step)"}


def norms_figure(records: list[dict], which: str = "weights", height: int = 300) -> go.Figure:
    """One line per layer group of its norm over steps (log y): a layer dying or exploding."""
    rows = [r for r in records if r.get("record") == "train" and "layer_norms" in r]
    groups = list(dict.fromkeys(g for r in rows for g in r["layer_norms"].get(which, {})))
    fig = go.Figure()
    for i, group in enumerate(groups):
        points = [
            (r["step"], r["layer_norms"][which][group])
            for r in rows
            if group in r["layer_norms"].get(which, {})
        ]
        fig.add_scatter(
            x=[p[0] for p in points],
            y=[p[1] for p in points],
            name=group,
            mode="lines",
            line={"color": qualitative.Dark24[i % 24]},
        )
    values = [v for t in fig.data for v in t.y if v > 0]
    fig.update_layout(
        title={"text": WHICH[which], "font": {"size": 14}},
        **legend_below(fig, height),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text="training step", **PLAIN_NUMBERS)
    fig.update_yaxes(type="log", title_text="L2 norm", **PLAIN_NUMBERS, **log_ticks(values))
    return fig


# TensorBoard's bands, outside in: (lower, upper) indices into BASIS_POINTS, with the share
# of the values each holds; the median is drawn as a line.
BANDS = (
    (0, 8, "min to max"),
    (1, 7, "6.7 to 93.3 %"),
    (2, 6, "15.9 to 84.1 %"),
    (3, 5, "30.9 to 69.1 %"),
)
BAND_COLOUR = "31, 119, 180"  # one hue, darker inward
OF = {"weights": "weights", "grads": "gradients"}
MOST_LINES = 24  # histogram lines drawn at most (evaluations spread evenly, the last kept)


def histogram_groups(records: list[dict]) -> list[str]:
    """The layer groups with distributions (or, in older runs, fixed-bin histograms)."""
    for key, inner in (("distributions", "weights"), ("histograms", "counts")):
        evals = [r for r in records if key in r]
        if evals:
            return list(evals[-1][key][inner])
    return []


def has_distributions(records: list[dict]) -> bool:
    """Whether these records carry distributions (runs from before carry histograms only)."""
    return any("distributions" in r for r in records)


def _summaries(records: list[dict], group: str, which: str) -> list[tuple[int, dict]]:
    """(step, summary) of a group's weights or gradients at each evaluation that has it."""
    return [
        (r["step"], r["distributions"][which][group])
        for r in records
        if group in (r.get("distributions") or {}).get(which, {})
    ]


def distribution_figure(
    records: list[dict], group: str, which: str = "weights", height: int = 300
) -> go.Figure:
    """A group's values over training as TensorBoard's distributions: nested percentile
    bands (min–max, ±1.5σ, ±1σ, ±0.5σ points of a normal) and the median, per evaluation."""
    points = _summaries(records, group, which)
    steps = [s for s, _ in points]
    at = [d["percentiles"] for _, d in points]
    fig = go.Figure()
    for depth, (lo, hi, name) in enumerate(BANDS):
        alpha = 0.15 + 0.15 * depth
        fig.add_scatter(
            x=steps,
            y=[p[lo] for p in at],
            mode="lines",
            line={"width": 0},
            showlegend=False,
            hoverinfo="skip",
        )
        fig.add_scatter(
            x=steps,
            y=[p[hi] for p in at],
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=f"rgba({BAND_COLOUR}, {alpha})",
            name=name,
            customdata=[[p[lo]] for p in at],
            hovertemplate=f"{name}: %{{customdata[0]:.4~g}} to %{{y:.4~g}}<extra></extra>",
        )
    fig.add_scatter(
        x=steps,
        y=[p[4] for p in at],
        mode="lines",
        name="median",
        line={"color": f"rgb({BAND_COLOUR})", "width": 1.5},
        hovertemplate="median %{y:.4~g}<extra></extra>",
    )
    below = legend_below(fig, height)
    fig.update_layout(
        title={"text": f"{OF[which]} of {plotly_text(group)}", "font": {"size": 14}},
        height=below["height"],
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend=below["legend"] | {"traceorder": "normal"},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text="training step", **PLAIN_NUMBERS)
    fig.update_yaxes(title_text="value", **PLAIN_NUMBERS)
    return fig


def histogram_overlay_figure(
    records: list[dict], group: str, which: str = "weights", height: int = 300
) -> go.Figure:
    """A group's auto-ranged histogram at each evaluation, one line each (darker = later),
    as TensorBoard's histograms in overlay mode: density over the values."""
    points = downsample(_summaries(records, group, which), MOST_LINES)
    fig = go.Figure()
    for i, (step, d) in enumerate(points):
        lo, hi, counts = d["percentiles"][0], d["percentiles"][-1], d["counts"]
        width = (hi - lo) / len(counts) if hi > lo else 1.0
        centres = [lo + width * (k + 0.5) for k in range(len(counts))]
        shade = 0.25 + 0.75 * (i + 1) / len(points)
        fig.add_scatter(
            x=centres,
            y=[c / (d["num"] * width) for c in counts],
            mode="lines",
            name=f"step {step}",
            line={"color": f"rgba({BAND_COLOUR}, {shade:.2f})"},
            hovertemplate=f"step {step}<br>value %{{x:.4~g}}<br>density %{{y:.4~g}}<extra></extra>",
        )
    fig.update_layout(
        title={
            "text": f"{OF[which]} of {plotly_text(group)}: histograms",
            "font": {"size": 14},
        },
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        showlegend=False,
    )
    fig.update_xaxes(title_text="value", **PLAIN_NUMBERS)
    fig.update_yaxes(title_text="density", **PLAIN_NUMBERS)
    return fig


def histogram_figure(records: list[dict], group: str, height: int = 320) -> go.Figure:
    """Share of a group's weights in each fixed bin (x) at each evaluation (y): a heat map
    (runs from before distributions were logged)."""
    evals = [r for r in records if group in (r.get("histograms") or {}).get("counts", {})]
    fig = go.Figure()
    if evals:
        edges = evals[-1]["histograms"]["edges"]
        labels = (
            ["< " + f"{edges[0]:g}"]
            + [f"{a:g} to {b:g}" for a, b in zip(edges[:-1], edges[1:])]
            + ["> " + f"{edges[-1]:g}"]
        )
        z = []
        for r in evals:
            counts = r["histograms"]["counts"][group]
            total = max(sum(counts), 1)
            z.append([c / total for c in counts])
        fig.add_heatmap(
            z=z,
            x=labels,
            y=[f"step {r['step']}" for r in evals],
            colorscale="Blues",
            colorbar={"title": {"text": "share"}},
            hovertemplate="%{y}<br>weights %{x}<br>share %{z:.3f}<extra></extra>",
        )
    fig.update_layout(
        title={"text": f"weights of {group} at each evaluation", "font": {"size": 14}},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    fig.update_xaxes(title_text="weight value", nticks=9)
    return fig
