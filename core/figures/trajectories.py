"""Figures of heads over training: one line per head beside the loss, the stage heuristic, and
B − A between two steps with the most changed heads first.

Built from ``core.attention.trajectories`` tables and ``trajectory_reading``'s results.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from core.attention.kinds import kind_labels
from core.attention.trajectories import METRIC_NAMES
from core.attention.trajectory_reading import STAGES, MapDifference, Stages
from core.figures.attention import DIFF_COLORSCALE, unique_labels
from core.figures.circuits import mark_phase_change
from core.figures.comparison import diff_range
from core.figures.labels import PLAIN_NUMBERS, legend_below, plotly_text

HEAD_COLORS = qualitative.D3  # one colour per head number
LAYER_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # one per layer
STAGE_COLORS = dict(zip(STAGES, ("#fdd49e", "#c6dbef", "#c7e9c0")))  # light bands per stage
DIFF_COLUMNS = 4  # heads per row of the B − A grid
MAX_TICK_TOKENS = 12  # a B − A cell names its tokens up to this many
DIFF_GAP_PX = 90  # between two rows of B − A cells: the upper one's tick labels, the lower's title


def _head_style(layer: int, head: int) -> dict:
    """The line of one head: colour by head, dash by layer."""
    color = HEAD_COLORS[head % len(HEAD_COLORS)]
    return {"color": color, "dash": LAYER_DASHES[layer % len(LAYER_DASHES)], "width": 1.6}


def _loss_traces(records: list[dict]) -> list[tuple[go.Scatter, bool]]:
    """(trace, on the BLEU axis) for the training loss and validation BLEU of a run."""
    train = [(r["step"], r["loss"]) for r in records if r.get("record") == "train" and "loss" in r]
    evals = [
        (r["step"], r["val_bleu"])
        for r in records
        if r.get("record") == "eval" and r.get("val_bleu") is not None
    ]
    out = []
    if train:
        x, y = zip(*train)
        out.append((go.Scatter(x=x, y=y, name="training loss", line={"color": "#555"}), False))
    if evals:
        x, y = zip(*evals)
        style = {"color": "#2ca02c"}
        bleu = go.Scatter(x=x, y=y, name="val BLEU", mode="lines+markers", line=style)
        out.append((bleu, True))
    return out


def trajectory_figure(
    table: pd.DataFrame,
    metric: str,
    kind: str,
    marks: pd.DataFrame,
    records: list[dict],
    step: int | None = None,
    basis_words: str = "",
    share: pd.DataFrame | None = None,
    phase: dict | None = None,
) -> go.Figure:
    """One line per head of ``kind`` (``metric`` over steps), its largest change starred,
    the run's loss and BLEU below on the same steps, and under them the model's source share
    (``Trajectories.model_frame()``) when one was measured; a run's phase change
    (``Trajectories.phase``) shaded."""
    share = None if share is None else share[share["source_share"].notna()]
    rows = 3 if share is not None and not share.empty else 2
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.64, 0.36] if rows == 2 else [0.52, 0.26, 0.22],
        vertical_spacing=0.1 if rows == 2 else 0.07,
        specs=[[{}], [{"secondary_y": True}], *([[{}]] if rows == 3 else [])],
    )
    part = table[table["kind"] == kind].sort_values("step")
    for (layer, head), h in part.groupby(["layer", "head"]):
        h = h[h[metric].notna()]
        if h.empty:
            continue
        name = f"layer {layer} head {head}"
        mode = "lines+markers" if len(h) < 3 else "lines"
        trace = go.Scatter(x=h["step"], y=h[metric], name=name, mode=mode, legendgroup=name)
        fig.add_trace(trace.update(line=_head_style(layer, head)), row=1, col=1)
    for _, m in marks[marks["kind"] == kind].iterrows():
        name, color = (
            f"layer {m['layer']} head {m['head']}",
            _head_style(m["layer"], m["head"])["color"],
        )
        star = go.Scatter(
            x=[m["step"]],
            y=[m["value"]],
            mode="markers",
            marker={"symbol": "star", "size": 12, "color": color},
            name=name,
            legendgroup=name,
            showlegend=False,
            hovertemplate=f"largest change at step %{{x}}: {m['change']:+.3f}<extra>{name}</extra>",
        )
        fig.add_trace(star, row=1, col=1)
    for trace, on_bleu in _loss_traces(records):
        fig.add_trace(trace, row=2, col=1, secondary_y=on_bleu)
    if rows == 3:
        line = go.Scatter(
            x=share["step"],
            y=share["source_share"],
            name="source share (ALTI+)",
            mode="lines+markers",
            line={"color": "#9467bd"},
            hovertemplate="step %{x}: %{y:.3f} of each prediction from the source<extra></extra>",
        )
        fig.add_trace(line, row=3, col=1)
        fig.update_yaxes(title_text="source share", row=3, col=1, **PLAIN_NUMBERS)
    if step is not None:
        fig.add_vline(x=step, line_dash="dash", line_color="gray")
    mark_phase_change(fig, phase)
    title = f"{kind_labels(kind)[0]}: {METRIC_NAMES[metric]}"
    subtitle = f"one line per head{'; ' + basis_words if basis_words else ''}; ★ largest change"
    fig.update_layout(
        title={"text": plotly_text(title), "subtitle": {"text": plotly_text(subtitle)}},
        **legend_below(fig, 560 if rows == 2 else 700, per_row=6),
        margin={"t": 90, "l": 10, "r": 10, "b": 10},
        hovermode="closest",
    )
    fig.update_xaxes(**PLAIN_NUMBERS)
    fig.update_xaxes(title_text="training step", row=rows, col=1)
    fig.update_yaxes(title_text=metric, row=1, col=1, **PLAIN_NUMBERS)
    fig.update_yaxes(title_text="loss", row=2, col=1, secondary_y=False, **PLAIN_NUMBERS)
    fig.update_yaxes(title_text="BLEU", row=2, col=1, secondary_y=True, **PLAIN_NUMBERS)
    return fig


def stage_figure(stages: Stages) -> go.Figure:
    """The stage heuristic's two signals over steps, each step's stage as a band behind."""
    fig = go.Figure()
    steps = stages.steps
    edges = [steps[0]] + [(a + b) / 2 for a, b in zip(steps, steps[1:])] + [steps[-1]]
    for i, name in enumerate(stages.stage):
        fig.add_vrect(
            x0=edges[i], x1=edges[i + 1], fillcolor=STAGE_COLORS[name], opacity=0.6, line_width=0
        )
    for stage in dict.fromkeys(stages.stage):  # the stages in the order they come, once each
        fig.add_scatter(  # a legend entry of the band's colour (stage names never collide)
            x=[None], y=[None], mode="markers", name=f"band: {stage}",
            marker={"symbol": "square", "size": 14, "color": STAGE_COLORS[stage], "opacity": 0.6},
        )  # fmt: skip
    fig.add_scatter(x=steps, y=stages.focus, name="source focus (0–1)", mode="lines+markers")
    fig.add_scatter(x=steps, y=stages.diagonal, name="cross diagonality", mode="lines+markers")
    fig.update_layout(
        title={
            "text": "Stages of training (a heuristic from attention weights)",
            "subtitle": {"text": "behind the lines: the stage found at each step, as a band"},
        },
        **legend_below(fig, 370),
        margin={"t": 90, "l": 10, "r": 10, "b": 10},
        xaxis={"title": {"text": "training step"}} | PLAIN_NUMBERS,
        yaxis={"title": {"text": "value"}, "range": [0, 1.05]} | PLAIN_NUMBERS,
    )
    return fig


def map_difference_figure(
    md: MapDifference, kind: str, step_a: int, step_b: int, top: int | None = None
) -> go.Figure:
    """B − A of each head of ``kind``, the most changed first, on one diverging scale."""
    order = md.order[:top] if top else md.order
    cols = min(DIFF_COLUMNS, len(order))
    rows = math.ceil(len(order) / cols)
    titles = [f"L{i} H{j} · |Δ| {c:.3f}" for i, j, c in order]  # short: no overlap
    few = len(md.key_tokens) <= MAX_TICK_TOKENS and len(md.query_tokens) <= MAX_TICK_TOKENS
    cell = max(190, 40 + 14 * len(md.query_tokens))  # a grid row's plot, in pixels
    gap = DIFF_GAP_PX if few else DIFF_GAP_PX // 2  # room for the tick labels and a title
    plots = rows * cell + (rows - 1) * gap  # the paper's height, in pixels
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.04,
        vertical_spacing=gap / plots if rows > 1 else 0.0,
    )
    zmax = diff_range(md.diff)
    x, y = unique_labels(md.key_tokens), unique_labels(md.query_tokens)
    for n, (i, j, _) in enumerate(order):
        z = np.asarray(md.diff[i, j], dtype=np.float32)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=y,
                coloraxis="coloraxis",
                hovertemplate="query %{y}<br>key %{x}<br>B − A=%{z:.3f}<extra></extra>",
            ),
            row=n // cols + 1,
            col=n % cols + 1,
        )
    ticks = {"showticklabels": few, "tickfont": {"size": 9}}
    fig.update_xaxes(tickvals=x, ticktext=[plotly_text(t) for t in md.key_tokens], **ticks)
    y_text = [plotly_text(t) for t in md.query_tokens]
    fig.update_yaxes(tickvals=y, ticktext=y_text, autorange="reversed", **ticks)
    _, query_words, key_words = kind_labels(kind)
    note = (
        f"most changed heads first; rows: {query_words}, columns: {key_words}; "
        "red: B attends more, blue: A does"
    )
    if md.note:
        note += f"; {md.note}"
    fig.update_layout(
        title={
            "text": f"{kind_labels(kind)[0]}: step {step_b:,} − step {step_a:,}",
            "subtitle": {"text": plotly_text(note)},
        },
        coloraxis={
            "colorscale": DIFF_COLORSCALE,
            "cmin": -zmax,
            "cmax": zmax,
            "colorbar": {"title": {"text": "B − A"}},
        },
        height=int(110 + plots + 10),
        margin={"t": 110, "l": 10, "r": 10, "b": 10},
    )
    return fig
