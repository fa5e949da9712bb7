"""Attention maps turned into numbers, tables and Plotly figures (numpy + plotly only).

Shapes: ``L`` layers, ``H`` heads, ``Tq`` queries (rows), ``Tk`` keys (columns).
Kinds: ``"encoder"`` (source attends to source), ``"decoder_self"`` (output attends to
earlier output, causal) and ``"cross"`` (output attends to source).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>", "<unk>")
COLORSCALE = "Blues"
MAX_GRID_TICKS = 20  # the grid shows token tick labels only up to this many tokens

KIND_LABELS: dict[str, tuple[str, str, str]] = {
    "encoder": (
        "Encoder self-attention (source → source)",
        "source token (query)",
        "source token (key)",
    ),
    "decoder_self": (
        "Decoder self-attention (output → earlier output, causal)",
        "output token (query)",
        "earlier output token (key)",
    ),
    "cross": (
        "Cross attention (decoder → encoder)",
        "output token (query)",
        "source token (key)",
    ),
}


def kind_labels(kind: str) -> tuple[str, str, str]:
    """Return (title, query words, key words) for a kind, or raise a helpful error."""
    if kind not in KIND_LABELS:
        raise ValueError(f"Unknown attention kind {kind!r}; use one of {list(KIND_LABELS)}.")
    return KIND_LABELS[kind]


def reading_hint(kind: str) -> str:
    """Return a sentence saying how to read a map: each row's query attends to the keys."""
    _, query_words, key_words = kind_labels(kind)
    return f"each row: {query_words} attends to columns: {key_words}"


def _check_tokens(shape: tuple[int, ...], query_tokens: Sequence, key_tokens: Sequence) -> None:
    """Raise ValueError when token lists do not match the last two dimensions."""
    tq, tk = shape[-2], shape[-1]
    if len(query_tokens) != tq or len(key_tokens) != tk:
        raise ValueError(
            f"Attention has {tq} queries x {tk} keys but got {len(query_tokens)} query "
            f"tokens and {len(key_tokens)} key tokens; pass the tokens the map was made from."
        )


def _normalise_rows(weights: np.ndarray) -> np.ndarray:
    """Divide every row by its sum; rows that sum to 0 stay 0 (no NaN)."""
    total = weights.sum(axis=-1, keepdims=True)
    out = np.zeros_like(weights, dtype=np.float64)
    np.divide(weights, total, out=out, where=total > 0)
    return out


def aggregate(weights: np.ndarray, how: str = "mean") -> np.ndarray:
    """Combine heads by mean or max, keeping a head axis of 1.

    Args:
        weights: (L, H, Tq, Tk) attention (any leading dims; heads are axis -3).
        how: "mean" or "max".

    Returns:
        (L, 1, Tq, Tk) combined attention.
    """
    if how == "mean":
        return weights.mean(axis=-3, keepdims=True)
    if how == "max":
        return weights.max(axis=-3, keepdims=True)
    raise ValueError(f"Unknown head aggregation {how!r}; use 'mean' or 'max'.")


def rollout(enc_weights: np.ndarray, add_residual: bool = True) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020) across encoder layers.

    Args:
        enc_weights: (L, H, T, T) encoder self-attention.
        add_residual: mix in the identity (0.5 W + 0.5 I) for the residual stream.

    Returns:
        (L, T, T) cumulative rollout after each layer, R_l = A_l @ ... @ A_1.
    """
    attn = enc_weights.astype(np.float64).mean(axis=1)  # (L, T, T)
    if add_residual:
        attn = 0.5 * attn + 0.5 * np.eye(attn.shape[-1])
    attn = _normalise_rows(attn)  # (L, T, T)
    out = np.empty_like(attn)  # (L, T, T)
    current = np.eye(attn.shape[-1])  # (T, T)
    for layer, a in enumerate(attn):
        current = a @ current
        out[layer] = current
    return out


def hide_special(
    weights: np.ndarray,
    key_tokens: Sequence[str],
    hide: Sequence[str] = ("<bos>", "<eos>"),
) -> tuple[np.ndarray, list[int]]:
    """Drop key columns whose token is in `hide` and renormalise rows.

    Args:
        weights: (..., Tq, Tk) attention.
        key_tokens: Tk key tokens.
        hide: tokens whose key columns are removed.

    Returns:
        ((..., Tq, Tk') renormalised weights, kept key indices).
    """
    if len(key_tokens) != weights.shape[-1]:
        raise ValueError(f"Got {len(key_tokens)} key tokens for {weights.shape[-1]} key columns.")
    hidden = set(hide)
    kept = [i for i, tok in enumerate(key_tokens) if tok not in hidden]
    return _normalise_rows(weights[..., kept]), kept


def _row_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy in nats of every row: (..., Tq, Tk) -> (..., Tq)."""
    logs = np.log(weights, out=np.zeros_like(weights), where=weights > 0)
    return -(weights * logs).sum(axis=-1)


def diagonal_keys(tq: int, tk: int, kind: str) -> np.ndarray:
    """Key index on the diagonal for each query; for cross the nearest proportional one."""
    rows = np.arange(tq)
    if kind == "cross":
        return np.floor(rows * (tk - 1) / max(tq - 1, 1) + 0.5).astype(int)
    return rows


def _mean_at(weights: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Mean weight at (rows, cols) per head, ignoring columns out of range: -> (L, H)."""
    ok = (cols >= 0) & (cols < weights.shape[-1])
    if rows.size == 0:
        return np.full(weights.shape[:2], np.nan)
    picked = np.zeros(weights.shape[:2] + (rows.size,))  # (L, H, n)
    picked[..., ok] = weights[..., rows[ok], cols[ok]]
    return picked.mean(axis=-1)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties given their average rank (as Spearman needs)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation; NaN for fewer than 2 points or a constant input."""
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(np.asarray(x)), _ranks(np.asarray(y)))[0, 1])


def monotonicity(weights2d: np.ndarray) -> float:
    """Spearman correlation of query index with each row's argmax key (1.0 = monotone)."""
    return spearman(np.arange(weights2d.shape[0]), weights2d.argmax(axis=-1))


def head_label(row: dict, tk: int) -> str:
    """Name a head's pattern; first of diagonal, previous, sink, broad that fires wins."""
    broad = tk > 1 and row["entropy"] / np.log(tk) >= 0.8
    if row["diagonal"] >= 0.5:
        return "diagonal head"
    if row["previous"] >= 0.5:
        return "previous-token head"
    if row["eos"] + row["bos"] >= 0.5:
        return "sink head"
    return "broad head" if broad else "mixed"


def _token_mass(weights: np.ndarray, key_tokens: Sequence[str], token: str) -> np.ndarray:
    """Mean over rows of the weight on keys equal to `token`: -> (L, H)."""
    cols = [i for i, tok in enumerate(key_tokens) if tok == token]
    return weights[..., cols].sum(axis=-1).mean(axis=-1)


def head_stats(
    weights: np.ndarray,
    kind: str,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
) -> pd.DataFrame:
    """One row per (layer, head) with entropy, pattern scores and a label.

    Args:
        weights: (L, H, Tq, Tk) attention of one sentence.
        kind: "encoder", "decoder_self" or "cross".
        query_tokens, key_tokens: Tq and Tk tokens.

    Returns:
        DataFrame: layer, head (0-based), entropy, diagonal, previous, eos, bos,
        monotonicity (cross only, else NaN), label.
    """
    kind_labels(kind)  # raises for an unknown kind
    _check_tokens(weights.shape, query_tokens, key_tokens)
    w = weights.astype(np.float64)  # (L, H, Tq, Tk)
    n_layers, n_heads, tq, tk = w.shape
    rows = np.arange(tq)
    table = {
        "entropy": _row_entropy(w).mean(axis=-1),
        "diagonal": _mean_at(w, rows, diagonal_keys(tq, tk, kind)),
        "previous": _mean_at(w, rows[1:], rows[1:] - 1),
        "eos": _token_mass(w, key_tokens, "<eos>"),
        "bos": _token_mass(w, key_tokens, "<bos>"),
    }
    records = []
    for layer in range(n_layers):
        for head in range(n_heads):
            rec = {"layer": layer, "head": head}
            rec.update({name: float(v[layer, head]) for name, v in table.items()})
            rec["monotonicity"] = monotonicity(w[layer, head]) if kind == "cross" else np.nan
            rec["label"] = head_label(rec, tk)
            records.append(rec)
    return pd.DataFrame.from_records(records)


def playback_rows(
    decoder_self: np.ndarray, cross: np.ndarray, step: int
) -> tuple[np.ndarray, np.ndarray]:
    """Attention of the output token generated at `step`, as seen at that step.

    Args:
        decoder_self: (L, H, T, T) decoder self-attention of the generated output.
        cross: (L, H, T, S) cross attention of the generated output.
        step: query index 0 <= step < T.

    Returns:
        (self_row (L, H, T) with zeros for keys after `step`, cross_row (L, H, S)).
    """
    n_steps = decoder_self.shape[2]
    if not 0 <= step < n_steps:
        raise IndexError(f"Step {step} is outside the generated output (0..{n_steps - 1}).")
    self_row = decoder_self[:, :, step, :].copy()  # (L, H, T)
    self_row[..., step + 1 :] = 0.0
    return self_row, cross[:, :, step, :].copy()  # (L, H, T), (L, H, S)


def weights_frame(
    weights2d: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str]
) -> pd.DataFrame:
    """Long table (query_index, query_token, key_index, key_token, weight) for CSV."""
    _check_tokens(weights2d.shape, query_tokens, key_tokens)
    tq, tk = weights2d.shape
    q_idx = np.repeat(np.arange(tq), tk)
    k_idx = np.tile(np.arange(tk), tq)
    return pd.DataFrame(
        {
            "query_index": q_idx,
            "query_token": np.asarray(list(query_tokens), dtype=object)[q_idx],
            "key_index": k_idx,
            "key_token": np.asarray(list(key_tokens), dtype=object)[k_idx],
            "weight": np.asarray(weights2d, dtype=np.float64).ravel(),
        }
    )


def unique_labels(tokens: Sequence[str]) -> list[str]:
    """Category labels "i:token" so repeated tokens keep their own row/column."""
    return [f"{i}:{tok}" for i, tok in enumerate(tokens)]


def percentile_cap(weights: np.ndarray, q: float = 99) -> float:
    """Colour-scale maximum at the q-th percentile, so diffuse heads stay visible."""
    if np.size(weights) == 0:
        return 1.0
    cap = float(np.percentile(np.asarray(weights, dtype=np.float64), q))
    return min(cap, 1.0) if cap > 0 else 1.0


def _token_axis(title: str, tokens: Sequence[str], reversed_: bool = False) -> dict:
    """Layout for a categorical token axis with plain-token tick text."""
    axis = {
        "title": {"text": title},
        "type": "category",
        "tickmode": "array",
        "tickvals": unique_labels(tokens),
        "ticktext": list(tokens),
    }
    if reversed_:
        axis["autorange"] = "reversed"
    return axis


def heatmap_figure(
    weights2d: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    title: str | None = None,
    zmax: float = 1.0,
    note: str | None = None,
) -> go.Figure:
    """One large heatmap: rows are queries (first on top), columns are keys.

    Args:
        weights2d: (Tq, Tk) attention.
        query_tokens, key_tokens: Tq and Tk tokens.
        kind: "encoder", "decoder_self" or "cross".
        title: figure title; defaults to the kind's title.
        zmax: top of the colour scale (see percentile_cap).
        note: extra line under the title, e.g. "<bos>/<eos> hidden, rows renormalised".
    """
    default_title, query_words, key_words = kind_labels(kind)
    _check_tokens(weights2d.shape, query_tokens, key_tokens)
    trace = go.Heatmap(
        z=np.asarray(weights2d, dtype=np.float32),  # (Tq, Tk)
        x=unique_labels(key_tokens),
        y=unique_labels(query_tokens),
        zmin=0.0,
        zmax=zmax,
        colorscale=COLORSCALE,
        colorbar={"title": {"text": "weight"}},
        hovertemplate="query %{y}<br>key %{x}<br>w=%{z:.3f}<extra></extra>",
    )
    subtitle = reading_hint(kind) + (f"<br>{note}" if note else "")
    fig = go.Figure(trace)
    fig.update_layout(
        title={"text": title or default_title, "subtitle": {"text": subtitle}},
        xaxis=_token_axis(key_words, key_tokens) | {"tickangle": -45},
        yaxis=_token_axis(query_words, query_tokens, reversed_=True),
        height=int(min(900, max(420, 22 * len(query_tokens) + 220))),
        margin={"t": 110},
    )
    return fig


@functools.lru_cache(maxsize=32)
def _grid_skeleton(layer_names: tuple, head_names: tuple) -> str:
    """make_subplots layout and per-cell axis ids as JSON (cached: it is the slow part)."""
    fig = make_subplots(
        rows=len(layer_names),
        cols=len(head_names),
        shared_xaxes=True,
        shared_yaxes=True,
        row_titles=list(layer_names),
        column_titles=list(head_names),
        horizontal_spacing=min(0.02, 0.5 / len(head_names)),
        vertical_spacing=min(0.03, 0.5 / len(layer_names)),
    )
    refs = [
        [fig.get_subplot(r + 1, c + 1) for c in range(len(head_names))]
        for r in range(len(layer_names))
    ]
    axes = [[[s.xaxis.plotly_name, s.yaxis.plotly_name] for s in row] for row in refs]
    return json.dumps({"layout": fig.layout.to_plotly_json(), "axes": axes})


def _grid_axes(layout: dict, axes: list, tokens: tuple, words: tuple) -> None:
    """Categorical token axes on every cell, y reversed, titles on the outer edge."""
    query_tokens, key_tokens = tokens
    common = {"type": "category", "tickmode": "array", "tickfont": {"size": 8}}
    if max(len(query_tokens), len(key_tokens)) > MAX_GRID_TICKS:
        common["showticklabels"] = False
    x_ticks = {"tickvals": unique_labels(key_tokens), "ticktext": list(key_tokens)}
    y_ticks = {"tickvals": unique_labels(query_tokens), "ticktext": list(query_tokens)}
    for name, axis in layout.items():
        if name.startswith("xaxis"):
            axis.update(common | x_ticks)
        elif name.startswith("yaxis"):
            axis.update(common | y_ticks | {"autorange": "reversed"})
    bottom_left, middle_left = axes[-1][0], axes[(len(axes) - 1) // 2][0]
    layout[bottom_left[0]]["title"] = {"text": words[1]}
    layout[middle_left[1]]["title"] = {"text": words[0]}


def _grid_trace(z: np.ndarray, axes: list, labels: tuple, cell_name: str) -> dict:
    """One light heatmap trace (dict, float32, no customdata) on the shared coloraxis."""
    hover = f"{cell_name}<br>query %{{y}}<br>key %{{x}}<br>w=%{{z:.3f}}<extra></extra>"
    return {
        "type": "heatmap",
        "z": z,  # (Tq, Tk) float32
        "x": labels[1],
        "y": labels[0],
        "xaxis": axes[0].replace("axis", ""),
        "yaxis": axes[1].replace("axis", ""),
        "coloraxis": "coloraxis",
        "hovertemplate": hover,
    }


def grid_figure(
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    layer_names: Sequence[str] | None = None,
    head_names: Sequence[str] | None = None,
    zmax: float = 1.0,
) -> go.Figure:
    """Small multiples, one heatmap per (layer, head), on one shared colour scale.

    Args:
        weights: (L, H, Tq, Tk) attention.
        query_tokens, key_tokens: Tq and Tk tokens.
        kind: "encoder", "decoder_self" or "cross".
        layer_names, head_names: row/column titles; default "layer i" / "head j" (0-based).
        zmax: top of the shared colour scale.
    """
    title, query_words, key_words = kind_labels(kind)
    _check_tokens(weights.shape, query_tokens, key_tokens)
    n_layers, n_heads = weights.shape[:2]
    layer_names = tuple(layer_names or [f"layer {i}" for i in range(n_layers)])
    head_names = tuple(head_names or [f"head {j}" for j in range(n_heads)])
    skeleton = json.loads(_grid_skeleton(layer_names, head_names))
    layout, axes = skeleton["layout"], skeleton["axes"]
    _grid_axes(layout, axes, (query_tokens, key_tokens), (query_words, key_words))
    z = np.asarray(weights, dtype=np.float32)  # (L, H, Tq, Tk)
    labels = (unique_labels(query_tokens), unique_labels(key_tokens))
    data = [
        _grid_trace(z[i, j], axes[i][j], labels, f"{layer_names[i]}, {head_names[j]}")
        for i in range(n_layers)
        for j in range(n_heads)
    ]
    layout |= {
        "title": {"text": title, "subtitle": {"text": reading_hint(kind)}},
        "coloraxis": {"colorscale": COLORSCALE, "cmin": 0.0, "cmax": zmax},
        "height": int(130 + 140 * n_layers),
        "margin": {"t": 110},
    }
    return go.Figure(data=data, layout=layout)


def topk_figure(tokens: Sequence[str], probs: Sequence[float]) -> go.Figure:
    """Horizontal bars of next-token candidates, most likely on top."""
    if len(tokens) != len(probs):
        raise ValueError(f"Got {len(tokens)} tokens but {len(probs)} probabilities.")
    labels = unique_labels(tokens)
    fig = go.Figure(
        go.Bar(
            x=np.asarray(probs, dtype=np.float32),
            y=labels,
            orientation="h",
            text=[f"{p:.2f}" for p in probs],
            textposition="outside",
            hovertemplate="%{y}<br>p=%{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": "Next-token candidates"},
        xaxis={"title": {"text": "probability"}, "range": [0, 1]},
        yaxis=_token_axis("candidate token", tokens, reversed_=True),
        height=int(max(200, 110 + 28 * len(tokens))),
        margin={"t": 50},
    )
    return fig
