"""Plotly figures of the alignment error rate (AER) of every reader on a gold set.

A reader is a decoder layer's head, the layer's mean over heads, or the mean of all layers,
in AWO or AWI mode (core.alignment.extract). Shape key: L decoder layers, H heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.alignment.extract import mode_label
from core.alignment.grid import AlignmentGrid, GridRow
from core.alignment.supervision_effect import EffectRow
from core.attribution.methods import METHOD_NAMES
from core.figures.alignment import MODE_NAMES, STAR_COLOR
from core.figures.attention import COLORSCALE, blank_cells, title_layout

STAR = "★"  # marks the best reader's cell


def reader_words(row: GridRow) -> str:
    """A grid row's reader in words: "layer 1, head 2", "mean of all layers"."""
    if row.layer == "all":
        return "mean of all layers"
    return f"layer {row.layer}, " + ("mean of heads" if row.head == "mean" else f"head {row.head}")


def grid_table(rows: Sequence[GridRow]) -> pd.DataFrame:
    """Every reader, lowest AER first: mode, layer, head, AER, precision, recall, pairs."""
    ranked = sorted(rows, key=lambda r: (r.aer, -r.precision))  # the order of .best
    table = {
        "mode": [mode_label(r.mode) for r in ranked],
        "layer": [str(r.layer) for r in ranked],
        "head": [r.head for r in ranked],
        "AER": [r.aer for r in ranked],
        "precision": [r.precision for r in ranked],
        "recall": [r.recall for r in ranked],
        "pairs": [r.pairs for r in ranked],
    }
    return pd.DataFrame(table)


def effect_table(rows: Sequence[EffectRow]) -> pd.DataFrame:
    """What supervision changed, one row per reader: which reader in each model, both AERs
    and the change (the supervised model's minus the plain one's)."""
    table = {
        "reader": [r.reader for r in rows],
        "in the plain model": [
            f"{reader_words(r.plain)}, {mode_label(r.plain.mode)}" for r in rows
        ],
        "AER plain": [r.plain.aer for r in rows],
        "in this model": [
            f"{reader_words(r.supervised)}, {mode_label(r.supervised.mode)}" for r in rows
        ],
        "AER this model": [r.supervised.aer for r in rows],
        "change": [r.change for r in rows],
    }
    return pd.DataFrame(table)


def grid_labels(rows: Sequence[GridRow]) -> tuple[list, list[str]]:
    """(the decoder layers then "all", the head numbers then "mean"): the grid's rows, columns."""
    layers = sorted({r.layer for r in rows if r.layer != "all"})
    heads = sorted({r.head for r in rows if r.head != "mean"}, key=int)
    return [*layers, "all"], [*heads, "mean"]


def aer_range(rows: Sequence[GridRow]) -> tuple[float, float]:
    """The colour range both modes' grids share: the lowest to the highest AER."""
    values = [r.aer for r in rows]
    low, high = min(values), max(values)
    return (low, high) if high > low else (low - 0.05, high + 0.05)


def aer_grid_figure(rows: Sequence[GridRow], mode: str, zrange: tuple[float, float]) -> go.Figure:
    """Decoder layers (rows) × heads (columns) of one mode: each reader's AER, the best starred.

    Lower is better, so the colour scale is reversed: the darker, the better. ``zrange`` is
    shared by both modes' figures; the last row is the mean of all layers and heads.
    """
    mine = [r for r in rows if r.mode == mode]
    layers, heads = grid_labels(mine)
    z = np.full((len(layers), len(heads)), np.nan, dtype=np.float32)  # (L + 1, H + 1)
    for r in mine:
        z[layers.index(r.layer), heads.index(r.head)] = r.aer
    best = AlignmentGrid(mine, 0.0).best
    at = (layers.index(best.layer), heads.index(best.head))
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in line] for line in z]
    text[at[0]][at[1]] = f"{STAR} {text[at[0]][at[1]]}"
    x, y = [str(h) for h in heads], [str(v) for v in layers]
    heat = go.Heatmap(
        z=z,
        x=x,
        y=y,
        text=text,
        texttemplate="%{text}",
        zmin=zrange[0],
        zmax=zrange[1],
        colorscale=COLORSCALE,
        reversescale=True,
        colorbar={"title": {"text": "AER"}},
        hovertemplate="layer %{y}, head %{x}<br>AER=%{z:.3f}<extra></extra>",
    )
    notes = [
        "lower is better (darker); last row: mean of all layers and heads",
        f"{STAR} lowest: {reader_words(best)}, AER {best.aer:.3f}",
    ]
    head = title_layout(f"AER of each reader, {MODE_NAMES[mode]}", notes)
    fig = go.Figure([heat, *blank_cells(z, x, y)])
    fig.update_layout(
        xaxis={"title": {"text": "head"}, "type": "category"},
        yaxis={"title": {"text": "decoder layer"}, "type": "category", "autorange": "reversed"},
        shapes=[_outline(*at)],
        height=int(max(220, 40 * len(layers) + 110) + head["margin"]["t"]),
        **head,
    )
    return fig


def _outline(row: int, col: int) -> dict:
    """A thick frame around one cell of a categorical heatmap."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "y",
        "x0": col - 0.5,
        "x1": col + 0.5,
        "y0": row - 0.5,
        "y1": row + 0.5,
        "line": {"color": STAR_COLOR, "width": 3},
    }


def other_readers_table(rows: Sequence[dict]) -> pd.DataFrame:
    """Readers beyond one head (``core.alignment.other_readers`` rows) as one table: each
    attribution method, the best state reader of each method (SimAlign) and each combination
    of both directions, best first within each kind."""
    picked, seen = [], set()
    for row in rows:
        if "similarity" in row:
            r = row["similarity"]
            if r["method"] in seen:  # the rows come best first: keep each method's best
                continue
            seen.add(r["method"])
            reader = (
                f"encoder after layer {r['encoder_layer']} × decoder after layer "
                f"{r['decoder_layer']}, {r['mode'].upper()}, {r['method']}"
            )
            picked.append(("states (SimAlign)", reader, r))
        elif "symmetrised" in row:
            r = row["symmetrised"]
            reader = f"{r['combination']} ({r['forward_reader']} / {r['reverse_reader']})"
            picked.append(("both directions", reader, r))
        else:
            name = METHOD_NAMES.get(row["method"], row["method"])
            picked.append(("attribution", f"{name}, AWO, argmax", row))
    return pd.DataFrame(
        {
            "kind": [k for k, _, _ in picked],
            "reader": [name for _, name, _ in picked],
            "AER": [r["aer"] for _, _, r in picked],
            "precision": [r["precision"] for _, _, r in picked],
            "recall": [r["recall"] for _, _, r in picked],
        }
    )
