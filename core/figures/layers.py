"""A run's layers over training: weight and gradient norms per layer group, weight histograms.

Pure functions over metric records (``layer_norms`` in training records, ``histograms`` in
evaluation records, ``core.training.monitor``).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from core.figures.labels import PLAIN_NUMBERS, log_ticks

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
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.25},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text="training step", **PLAIN_NUMBERS)
    fig.update_yaxes(type="log", title_text="L2 norm", **PLAIN_NUMBERS, **log_ticks(values))
    return fig


def histogram_groups(records: list[dict]) -> list[str]:
    """The layer groups that have weight histograms in these records."""
    evals = [r for r in records if "histograms" in r]
    return list(evals[-1]["histograms"]["counts"]) if evals else []


def histogram_figure(records: list[dict], group: str, height: int = 320) -> go.Figure:
    """Share of a group's weights in each bin (x) at each evaluation (y): a heatmap."""
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
