"""Plotly figures of one sentence's word alignment: a reader's weights with its links circled,
the links as lines between the two sentences, and the links as a table.

Shape key: S source pieces (no <eos>), T target pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.alignment.extract import PairMaps, Reader
from core.corpus.bpe import join_pieces
from core.figures.attention import (
    COLORSCALE,
    blank_cells,
    percentile_cap,
    title_layout,
    unique_labels,
)
from core.figures.labels import plotly_text

MODE_NAMES = {
    "awo": "AWO (attention when outputting)",
    "awi": "AWI (attention when inputting)",
    "whole": "AWO, whole target (as the head was trained)",
}
ROW_WORDS = {  # which decoder step's row a mode reads for target piece k (format: target=)
    "awo": "each {target} token's row is the step that outputs it (step k)",
    "awi": "each {target} token's row is the next step, which reads it as input (step k + 1)",
    "whole": "each {target} token's row is the step that outputs it, in a pass where every "
    "step sees the whole translation (Garg et al.'s full context)",
}
LINK_COLOR = "#d62728"  # the open circles on linked cells, and the lines
STAR_COLOR = "#ffbf00"  # the frame around the best reader's cell (alignment_grid)


def reader_words(reader: Reader) -> str:
    """A reader in words: "layer 1, head 2", "layer 1, mean of heads", "mean of all layers"."""
    if reader.layer is None:
        return "mean of all layers and heads"
    head = "mean of heads" if reader.head is None else f"head {reader.head}"
    return f"layer {reader.layer}, {head}"


def sentence_pieces(maps: PairMaps, src_tokens, output_tokens) -> tuple[list[str], list[str]]:
    """(S source pieces, T target pieces): the tokens of the read matrix's columns and rows."""
    return list(src_tokens[: len(maps.src_words)]), list(output_tokens[: len(maps.tgt_words)])


def link_cells(maps: PairMaps, links: set[tuple[int, int]]) -> np.ndarray:
    """(T, S) True on the pieces of every linked (source word, target word)."""
    return np.array(
        [[(int(s), int(t)) in links for s in maps.src_words] for t in maps.tgt_words], dtype=bool
    ).reshape(len(maps.tgt_words), len(maps.src_words))


def link_weights(weights: np.ndarray, maps: PairMaps, links) -> dict[tuple[int, int], float]:
    """Each link's weight: the largest reader weight over its words' pieces."""
    out = {}
    for s, t in links:
        block = weights[np.ix_(maps.tgt_words == t, maps.src_words == s)]  # (pieces, pieces)
        out[(s, t)] = float(block.max()) if block.size else 0.0
    return out


LANGUAGES = ("English", "French")  # (source, target) as the studio's own model names them


def links_table(
    weights, maps: PairMaps, links, src_pieces, tgt_pieces, languages=LANGUAGES
) -> pd.DataFrame:
    """One row per link, in Pharaoh order: word indexes, the words, the link's weight
    (``languages``: the model's (source, target) names, as the word columns say)."""
    src, tgt = join_pieces(src_pieces), join_pieces(tgt_pieces)
    found = link_weights(weights, maps, links)
    columns = ["source", f"{languages[0]} word", "target", f"{languages[1]} word", "weight"]
    rows = [(s, src[s], t, tgt[t], w) for (s, t), w in sorted(found.items())]
    return pd.DataFrame(rows, columns=columns)


def token_axis(title: str, labels: Sequence[str], tokens: Sequence[str]) -> dict:
    """A categorical axis: one category per position, the plain token as its tick."""
    return {
        "title": {"text": title},
        "type": "category",
        "tickmode": "array",
        "tickvals": list(labels),
        "ticktext": [plotly_text(t) for t in tokens],
    }


def link_matrix_figure(
    weights: np.ndarray,
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
    marked: np.ndarray,
    title: str,
    notes: Sequence[str] = (),
    stretch: bool = False,
    languages: tuple[str, str] = LANGUAGES,
) -> go.Figure:
    """Target pieces (rows) × source pieces (columns): a reader's weights, links circled.

    Args:
        weights: (T, S) the weights the reader uses (core.alignment.extract.read).
        marked: (T, S) True on linked cells (link_cells).
        title, notes: plain text, wrapped and escaped here.
        languages: the model's (source, target) names, as the axes say.
    """
    source, target = languages
    z = np.asarray(weights, dtype=np.float32)  # (T, S)
    x, y = unique_labels(src_pieces), unique_labels(tgt_pieces)
    zmax = percentile_cap(z, 99 if stretch else 100) if z.size else 1.0
    rows, cols = np.nonzero(marked)
    heat = go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=0.0,
        zmax=zmax,
        colorscale=COLORSCALE,
        colorbar={"title": {"text": "weight"}},
        hovertemplate=f"{target} %{{y}}<br>{source} %{{x}}<br>w=%{{z:.3f}}<extra></extra>",
    )
    circles = go.Scatter(
        x=[x[c] for c in cols],
        y=[y[r] for r in rows],
        mode="markers",
        name="link",
        marker={"symbol": "circle-open", "size": 14, "color": LINK_COLOR, "line": {"width": 2}},
        hoverinfo="skip",
        showlegend=False,
    )
    scale = "99th percentile" if stretch else "largest weight"
    lines = [*notes, f"circles: links; colour scale 0–{zmax:.2f} ({scale})"]
    head = title_layout(title, lines)
    fig = go.Figure([heat, *blank_cells(z, x, y), circles])
    fig.update_layout(
        xaxis=token_axis(f"{source} token (source)", x, src_pieces) | {"tickangle": -45},
        yaxis=token_axis(f"{target} token (target)", y, tgt_pieces) | {"autorange": "reversed"},
        height=int(min(900, max(300, 22 * len(tgt_pieces) + 110)) + head["margin"]["t"]),
        **head,
    )
    return fig


def _positions(n: int) -> list[float]:
    """n word positions spread evenly over 0..1."""
    return [(i + 0.5) / n for i in range(n)]


def _word_axis(words: Sequence[str], side: str) -> dict:
    """A 0..1 axis whose ticks are one sentence's words (turned by Plotly when crowded)."""
    return {
        "range": [0, 1],
        "side": side,
        "tickmode": "array",
        "tickvals": _positions(len(words)),
        "ticktext": [plotly_text(w) for w in words],
        "showgrid": False,
        "zeroline": False,
    }


def link_lines_figure(
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    weights: dict,
    title: str,
    languages: tuple[str, str] = LANGUAGES,
) -> go.Figure:
    """Source words along the top, target words along the bottom, a line per link.

    Args:
        weights: (source word, target word) -> weight, one entry per link (link_weights).
        languages: the model's (source, target) names.
    """
    xs, xt = _positions(len(src_words)), _positions(len(tgt_words))
    lines = [
        go.Scatter(
            x=[xs[s], xt[t]],
            y=[1, 0],
            mode="lines",
            name="link",
            line={"color": LINK_COLOR, "width": 1 + 4 * w},
            opacity=0.35 + 0.65 * w,
            hovertemplate=f"{plotly_text(src_words[s])} → {plotly_text(tgt_words[t])}"
            f"<br>w={w:.3f}<extra></extra>",
        )
        for (s, t), w in sorted(weights.items())
    ]
    dots = [
        go.Scatter(x=x, y=[y] * len(x), xaxis=axis, mode="markers", name=name, hoverinfo="skip")
        for x, y, axis, name in ((xs, 1, "x2", languages[0]), (xt, 0, "x", languages[1]))
    ]
    longest = max(map(len, [*src_words, *tgt_words]), default=1)
    ticks = 8 + 7 * min(longest, 14)  # room for a word's tick label, turned if crowded
    head = title_layout(title, ["line width and darkness: the link's weight"])
    fig = go.Figure([*lines, *[d.update(marker={"color": "#444", "size": 7}) for d in dots]])
    fig.update_layout(
        xaxis=_word_axis(tgt_words, "bottom"),
        xaxis2=_word_axis(src_words, "top") | {"overlaying": "x"},
        yaxis={"range": [-0.08, 1.08], "tickvals": [0, 1], "ticktext": languages[::-1]},
        showlegend=False,
        height=int(200 + 2 * ticks + head["margin"]["t"]),
        **(head | {"margin": {"t": head["margin"]["t"] + ticks, "b": ticks}}),
    )
    return fig
