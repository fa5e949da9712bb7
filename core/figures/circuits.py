"""Circuits forming over training as Plotly figures: every head's detector scores, the repeat's
loss and the in-context-learning score, the phase change shaded.

Pure functions over a run's metric records (``core.runs.circuit_history`` reads them); no
Streamlit here.
"""

from __future__ import annotations

import plotly.graph_objects as go

from core.figures.labels import PLAIN_NUMBERS, legend_below
from core.runs.circuit_history import LOSSES, MEASURES, best_head, circuit_evals, heads_of, score

TITLES = {  # measure -> the chart's title
    "induction": "induction score per head",
    "previous_token": "previous-token score per head",
    "duplicate_token": "duplicate-token score per head",
}
LOSS_NAMES = {  # what each loss line is
    "repeat_loss": "repeat (second copy)",
    "first_copy_loss": "first copy",
    "icl": "in-context learning (late − early token loss)",
}
BEST_COLOR = "#d62728"  # the best induction head, in every chart
OTHER_COLOR = "#9aa5b1"  # every other head: thin and grey
BAND = {"fillcolor": "#f2c14e", "opacity": 0.25, "line_width": 0, "layer": "below"}


def mark_phase_change(fig: go.Figure, phase: dict | None, label: bool = True) -> go.Figure:
    """Shade the phase change's steps (``phase["start"]`` to ``phase["end"]``) on a chart
    whose x-axis is the training step; nothing without one."""
    if phase is None or phase.get("start") is None:  # (None: formed before the first one)
        return fig
    start, end = phase["start"], phase["end"]
    fig.add_vrect(
        x0=start,
        x1=max(end, start + 1),  # a one-step change still shows
        **BAND,
        **({"annotation_text": "phase change", "annotation_position": "top left"} if label else {}),
    )
    return fig


def _layout(fig: go.Figure, title: str, y_title: str, height: int) -> go.Figure:
    """Title, legend below, axes in plain numbers, and 'no data yet' on an empty chart."""
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        **legend_below(fig, height),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        hovermode="closest",
        uirevision=title,
    )
    fig.update_xaxes(title_text="training step", **PLAIN_NUMBERS)
    fig.update_yaxes(title_text=y_title, **PLAIN_NUMBERS)
    if not fig.data:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(
            text="no circuit scores yet", showarrow=False, x=0.5, y=0.5, xref="paper",
            yref="paper", font={"size": 14, "color": "gray"},
        )  # fmt: skip
    return fig


def head_scores_over_training(
    records: list[dict], measure: str, phase: dict | None = None, height: int = 320
) -> go.Figure:
    """One line per head of ``measure``'s score (0..1) over the steps: the best induction
    head thick and red, the others thin and grey; the phase change shaded."""
    if measure not in MEASURES:
        raise ValueError(f"unknown score '{measure}': choose one of {', '.join(MEASURES)}")
    evals = circuit_evals(records)
    fig = go.Figure()
    best = best_head(evals, phase)
    steps = [r["step"] for r in evals]
    heads = sorted(heads_of(evals) if evals else [], key=lambda h: h == best)  # best on top
    for head in heads:
        mine = head == best
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[score(r, measure, head) for r in evals],
                name=f"layer {head[0]} head {head[1]}" + (" (best induction head)" if mine else ""),
                mode="lines+markers" if len(steps) <= 3 else "lines",
                line={"color": BEST_COLOR if mine else OTHER_COLOR, "width": 3 if mine else 1},
                showlegend=mine,
                hovertemplate=f"layer {head[0]} head {head[1]}<br>step %{{x}}: %{{y:.3f}}"
                "<extra></extra>",
            )
        )
    _layout(fig, TITLES[measure], "score", height)
    if fig.data:
        fig.update_yaxes(range=[-0.02, 1.02])
    return mark_phase_change(fig, phase)


def circuit_losses_figure(
    records: list[dict], phase: dict | None = None, height: int = 320
) -> go.Figure:
    """The repeat's and the first copy's loss and the in-context-learning score over the
    steps (nats), the phase change shaded: after it, the repeat is read from the first copy."""
    evals = circuit_evals(records)
    fig = go.Figure()
    for key, dash in zip(LOSSES, ("solid", "dot", "dash")):
        points = [(r["step"], r["circuits"].get(key)) for r in evals]
        points = [(s, v) for s, v in points if isinstance(v, (int, float))]
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[s for s, _ in points],
                    y=[v for _, v in points],
                    name=LOSS_NAMES[key],
                    mode="lines+markers" if len(points) <= 3 else "lines",
                    line={"dash": dash},
                )
            )
    _layout(fig, "loss on the random tokens", "loss (nats)", height)
    return mark_phase_change(fig, phase)


def circuit_figures(records: list[dict], phase: dict | None = None) -> list[go.Figure]:
    """The four charts of a run's circuits: induction, previous-token and duplicate-token
    scores per head, and the copies' losses with the in-context-learning score."""
    return [
        *(head_scores_over_training(records, m, phase) for m in MEASURES),
        circuit_losses_figure(records, phase),
    ]
