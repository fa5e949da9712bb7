"""The logit lens as a chart: output steps × decoder layers, each layer's top word written in.

Rows are output steps (first on top, labelled with the word finally chosen), columns the
decoder layers (a masked language model's: its predicted positions and its layers, as the
lens names them); colour is the chosen word's probability or its rank at that layer.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.attention.logit_lens import LENS_COLORS, LogitLens
from core.figures.attention import COLORSCALE, title_layout, token_axis
from core.figures.labels import plotly_text

RANK_COLORSCALE = "Blues_r"  # rank 0 dark, far ranks light
CELL_CHARS = 14  # a top word longer than this is cut in its cell (the hover has it whole)


def cell_word(word: str) -> str:
    """A layer's top word as written in its cell, cut to CELL_CHARS characters."""
    return word if len(word) <= CELL_CHARS else word[: CELL_CHARS - 1] + "…"


def hover_texts(lens: LogitLens) -> list[list[str]]:
    """(T, L) hover lines: every top word with its probability, and the chosen word's rank."""
    return [
        [
            "<br>".join(
                [f"{lens.row_words.split()[-1]} {t} → {plotly_text(chosen)}, layer {layer}"]
                + [
                    f"{plotly_text(w)}: {p:.3f}"
                    for w, p in zip(lens.top_words[layer][t], lens.top_probs[layer, t])
                ]
                + [f"chosen word rank {int(lens.chosen_rank[layer, t])}"]
            )
            for layer in range(lens.layers)
        ]
        for t, chosen in enumerate(lens.output_tokens)
    ]


def logit_lens_figure(lens: LogitLens, color_by: str = "prob") -> go.Figure:
    """Steps × layers: the top word in each cell, coloured by the chosen word's prob or rank."""
    if color_by not in LENS_COLORS:
        raise ValueError(f"Colour by one of {LENS_COLORS}, not {color_by!r}.")
    rank = lens.chosen_rank.T.astype(np.float32)  # (T, L)
    if color_by == "prob":
        z, scale = lens.chosen_prob.T.astype(np.float32), COLORSCALE  # (T, L)
        bar = {"title": {"text": "p(chosen)"}}
        zrange = {"zmin": 0.0, "zmax": 1.0}
    else:
        z, scale = np.log10(rank + 1), RANK_COLORSCALE  # (T, L)
        top = max(float(np.log10(11)), float(z.max()))  # the bar reaches rank 10 at least
        ticks = [r for r in (0, 1, 10, 100, 1000, 10000) if np.log10(r + 1) <= top + 1e-9]
        bar = {
            "title": {"text": "rank of chosen"},
            "tickvals": [float(np.log10(r + 1)) for r in ticks],
            "ticktext": [str(r) for r in ticks],
        }
        zrange = {"zmin": 0.0, "zmax": top}
    layers = [f"layer {i}" for i in range(lens.layers)]
    words = [
        [cell_word(lens.top_words[i][t][0]) for i in range(lens.layers)]
        for t in range(len(lens.output_tokens))
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=layers,
            y=[f"{t}:{plotly_text(w)}" for t, w in enumerate(lens.output_tokens)],
            text=[[plotly_text(w) for w in row] for row in words],
            texttemplate="%{text}",
            customdata=hover_texts(lens),
            hovertemplate="%{customdata}<extra></extra>",
            colorscale=scale,
            colorbar=bar,
            xgap=2,
            ygap=2,
            **zrange,
        )
    )
    colour = "probability" if color_by == "prob" else "rank"
    head = title_layout(
        f"Logit lens: each {lens.stack_words}'s top word at each {lens.row_words}",
        [f"in each cell: that layer's top word; colour: the {colour} it gives the chosen word"],
        chars=76,
    )
    fig.update_layout(
        xaxis={"title": {"text": f"{lens.stack_words} (output projected)"}},
        yaxis=token_axis(f"{lens.row_words} → word chosen", lens.output_tokens, reversed_=True),
        height=int(head["margin"]["t"] + 110 + 26 * len(lens.output_tokens)),
        **head,
    )
    return fig
