"""Plotly figures of head importance: layer x head grids per kind, agreement, pruning curve.

Red always means "removing the head hurts": BLEU falls or the loss rises. Grids of changes
use a diverging scale centred at 0 (equal reach either side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.ablation import HeadSpec
from core.attention.kinds import KIND_NAMES, KINDS
from core.figures.attention import WIDE_TITLE_CHARS, title_layout
from core.figures.labels import PLAIN_NUMBERS, SCORE_FORMAT, legend_below, plotly_text

KIND_COLORS = {"encoder": "#1f77b4", "decoder_self": "#2ca02c", "cross": "#d62728"}


# column -> (title, short name, colour scale, cell text format, centred at 0)
METRICS: dict[str, tuple[str, str, str, str, bool]] = {
    "delta_bleu": ("Change in BLEU with the head removed", "ΔBLEU", "RdBu", "+.1f", True),
    "delta_loss": ("Change in loss with the head removed", "Δloss", "RdBu_r", "+.3f", True),
    "gradient": (
        "Gradient importance score (Michel et al. 2019)",
        "score",
        "Reds",
        SCORE_FORMAT,
        False,
    ),
}


def kind_grid(table: pd.DataFrame, kind: str, column: str) -> np.ndarray:
    """(L, H) values of one column for the heads of one kind (NaN where a head is missing)."""
    rows = table[table["kind"] == kind]
    grid = np.full((int(rows["layer"].max()) + 1, int(rows["head"].max()) + 1), np.nan)
    grid[rows["layer"].to_numpy(int), rows["head"].to_numpy(int)] = rows[column].to_numpy(float)
    return grid.astype(np.float32)  # (L, H)


def color_range(values: np.ndarray, centred: bool) -> tuple[float, float]:
    """(cmin, cmax): symmetric about 0 when ``centred``, else from 0 to the largest value."""
    reach = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
    reach = reach if reach > 0 else 1.0
    return (-reach, reach) if centred else (0.0, reach)


def importance_grid_figure(table: pd.DataFrame, column: str, baseline: str) -> go.Figure:
    """One layer x head heatmap per attention kind of ``column``, on one colour scale.

    Args:
        table: one row per head (kind, layer, head and ``column``), as HeadImportance.frame.
        column: "delta_bleu", "delta_loss" or "gradient" (see METRICS).
        baseline: the baseline in words, shown under the title.
    """
    title, short, scale, fmt, centred = METRICS[column]
    kinds = [k for k in KINDS if (table["kind"] == k).any()]
    grids = [kind_grid(table, k, column) for k in kinds]
    names = [plotly_text(KIND_NAMES[k]) for k in kinds]
    fig = make_subplots(1, len(kinds), subplot_titles=names, horizontal_spacing=0.08)
    for col, (kind, z) in enumerate(zip(kinds, grids), start=1):
        fig.add_trace(grid_trace(z, short, fmt, KIND_NAMES[kind]), 1, col)
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=col)
        fig.update_yaxes(dtick=1, autorange="reversed", row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    cmin, cmax = color_range(np.concatenate([g.ravel() for g in grids]), centred)
    note = "red: removing the head hurts" if centred else "larger: the loss is more sensitive"
    head = title_layout(title, [baseline, note], WIDE_TITLE_CHARS, 20)
    layers = max(g.shape[0] for g in grids)
    fig.update_layout(
        coloraxis={
            "colorscale": scale,
            "cmin": cmin,
            "cmax": cmax,
            "colorbar": {"title": {"text": short}} | PLAIN_NUMBERS,
        },
        height=int(110 + head["margin"]["t"] + max(150, 44 * layers)),
        **head,
    )
    return fig


def grid_trace(z: np.ndarray, short: str, fmt: str, kind_name: str) -> go.Heatmap:
    """A (L, H) heatmap with each value written in its cell, on the shared colour axis."""
    return go.Heatmap(
        z=z,
        x=list(range(z.shape[1])),
        y=list(range(z.shape[0])),
        coloraxis="coloraxis",
        texttemplate=f"%{{z:{fmt}}}",
        hovertemplate=f"layer %{{y}}, head %{{x}}<br>{short} %{{z:{fmt}}}"
        f"<extra>{plotly_text(kind_name)}</extra>",
    )


def agreement_figure(
    table: pd.DataFrame, rho: Mapping[str, float | None], column: str = "delta_loss"
) -> go.Figure:
    """Each head's gradient score (x) against its measured effect ``column`` (y), by kind."""
    _, short, _, fmt, _ = METRICS[column]
    fig = go.Figure()
    for kind in KINDS:
        rows = table[table["kind"] == kind]
        if rows.empty:
            continue
        labels = [plotly_text(HeadSpec(kind, r.layer, r.head).label) for r in rows.itertuples()]
        fig.add_trace(
            go.Scatter(
                x=rows["gradient"].to_numpy(np.float32),
                y=rows[column].to_numpy(np.float32),
                mode="markers",
                name=plotly_text(KIND_NAMES[kind]),
                text=labels,
                marker={"color": KIND_COLORS[kind], "size": 9},
                hovertemplate=f"%{{text}}<br>score %{{x:{SCORE_FORMAT}}}<br>{short} %{{y:{fmt}}}"
                "<extra></extra>",
            )
        )
    head = title_layout("Gradient score vs real effect", [rho_words(rho)])
    fig.update_layout(
        xaxis={"title": {"text": "gradient score (cheap: one backward pass)"}} | PLAIN_NUMBERS,
        yaxis={"title": {"text": f"{short} with the head removed (measured)"}} | PLAIN_NUMBERS,
        **legend_below(fig, 340 + head["margin"]["t"]),
        **head,
    )
    return fig


def rho_words(rho: Mapping[str, float | None]) -> str:
    """The agreement in words: "Spearman ρ 0.59 with the loss rise, 0.64 with the BLEU drop"
    (the loss alone where no BLEU was measured)."""
    loss, bleu = (f"{v:.2f}" if v is not None else "n/a" for v in (rho["loss"], rho.get("bleu")))
    if "bleu" not in rho:
        return f"Spearman ρ {loss} with the loss rise"
    return f"Spearman ρ {loss} with the loss rise, {bleu} with the BLEU drop"


def baseline_words(result) -> str:
    """A HeadImportance's baseline in words: "baseline BLEU 31.2, loss 1.234 on 200
    validation sentences", with why the loss reads more pairs where some sentences have
    several references; or a language model's loss on its texts."""
    if result.bleu is None:
        return f"baseline loss {result.loss:.3f} on {result.sentences} validation sentences"
    words = (
        f"baseline BLEU {result.bleu:.1f}, loss {result.loss:.3f} on {result.sentences} "
        "validation sentences"
    )
    if result.pairs == result.sentences:
        return words
    return (
        f"{words} ({result.pairs} sentence–reference pairs: some sentences have several "
        "references; BLEU scores each sentence against all of its references, the loss is "
        "the mean over every pair)"
    )


def pruning_figure(points: Sequence[Mapping], result) -> go.Figure:
    """BLEU (or a language model's loss) against the fraction of heads removed, least
    important first."""
    what = "BLEU" if result.bleu is not None else "loss"
    key, baseline, fmt = what.lower(), points[0][what.lower()], ".1f" if what == "BLEU" else ".3f"
    hover = [
        plotly_text(f"{p['removed']} removed" + (f" (last: {p['head']})" if p["head"] else ""))
        for p in points
    ]
    fig = go.Figure(
        go.Scatter(
            x=np.asarray([p["fraction"] for p in points], dtype=np.float32),
            y=np.asarray([p[key] for p in points], dtype=np.float32),
            mode="lines+markers",
            text=hover,
            name=what,
            hovertemplate=f"%{{text}}<br>{what} %{{y:{fmt}}}<extra></extra>",
        )
    )
    fig.add_hline(y=baseline, line_dash="dash", line_color="#888")
    smallest = "smallest BLEU drop" if what == "BLEU" else "smallest loss rise"
    notes = [
        f"heads removed cumulatively, {smallest} first",
        f"dashed: baseline {what} {baseline:{fmt}}",
    ]
    head = title_layout("Pruning curve", notes)
    fig.update_layout(
        xaxis={"title": {"text": "fraction of heads removed"}, "range": [-0.02, 1.02]},
        yaxis={"title": {"text": what}, "rangemode": "tozero"},
        height=int(340 + head["margin"]["t"]),
        **head,
    )
    return fig
