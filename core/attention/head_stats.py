"""Numbers about attention heads: aggregation over heads, rollout, and per-head statistics.

Shapes: ``L`` layers, ``H`` heads, ``Tq`` queries (rows), ``Tk`` keys (columns).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from core.attention.kinds import BOUNDARY_TOKENS, check_tokens, kind_labels
from core.attention.sentence_maps import SentenceMaps
from core.measure.rank import spearman

EMPTY_ROW_MASS = 1e-6  # a row with less weight than this on the kept keys has nothing to show
PATTERN_SHARE = 0.5  # a head follows a pattern when this share of its weight follows it
BROAD_ENTROPY = 0.8  # ... is broad when its rows' entropy reaches this share of the maximum
NEAR_DIAGONAL_KEYS = 1  # cross: "near the diagonal" is within this many keys of it
MONOTONIC_RHO = 0.7  # cross: ... and its rows' strongest keys follow the queries' order this well
LABELS = {  # each says what was measured, on the map as drawn
    "diagonal": "diagonal (weight on its own column)",
    "previous": "sub-diagonal (weight one column left)",
    "monotonic": "monotonic (follows source order)",
    "sink": "sink (weight on <bos>/<eos>)",
    "broad": "broad (weight spread out)",
    "mixed": "mixed (no single pattern)",
}


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


def rollout_pieces(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(key shares (Tq, Tk), residual shares (Tq,)) of one attention in attention rollout
    (Abnar & Zuidema 2020): half the heads' mean weights (H, Tq, Tk), half the query's own
    stream. Every rollout of the studio (the maps', the attribution's) is made of these."""
    mean = weights.mean(0)  # (Tq, Tk)
    return 0.5 * mean, torch.full_like(mean[:, 0], 0.5)


def rollout(enc_weights: np.ndarray, add_residual: bool = True) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020) across encoder layers.

    Args:
        enc_weights: (L, H, T, T) encoder self-attention.
        add_residual: mix in the identity (0.5 W + 0.5 I) for the residual stream.

    Returns:
        (L, T, T) cumulative rollout after each layer, R_l = A_l @ ... @ A_1.
    """
    weights = torch.from_numpy(enc_weights.astype(np.float64))  # (L, H, T, T)
    out = np.empty(weights.shape[:1] + weights.shape[2:])  # (L, T, T)
    current = torch.eye(weights.size(-1), dtype=torch.float64)  # (T, T)
    for layer, w in enumerate(weights):  # (H, T, T)
        keys, own = rollout_pieces(w) if add_residual else (w.mean(0), w.new_zeros(w.size(1)))
        current = torch.from_numpy(_normalise_rows((keys + torch.diag(own)).numpy())) @ current
        out[layer] = current.numpy()
    return out


def hide_special(
    weights: np.ndarray,
    key_tokens: Sequence[str],
    hide: Sequence[str] = BOUNDARY_TOKENS,
) -> tuple[np.ndarray, list[int]]:
    """Drop key columns whose token is in `hide` and renormalise rows (NaN: nothing left).

    Args:
        weights: (..., Tq, Tk) attention.
        key_tokens: Tk key tokens.
        hide: tokens whose key columns are removed.

    Returns:
        ((..., Tq, Tk') renormalised weights, kept key indices). A row whose whole weight
        was on hidden keys (less than EMPTY_ROW_MASS left) is NaN, never a row of zeros.
    """
    if len(key_tokens) != weights.shape[-1]:
        raise ValueError(f"Got {len(key_tokens)} key tokens for {weights.shape[-1]} key columns.")
    hidden = set(hide)
    kept = [i for i, tok in enumerate(key_tokens) if tok not in hidden]
    shown = np.asarray(weights, dtype=np.float64)[..., kept]  # (..., Tq, Tk')
    total = shown.sum(axis=-1, keepdims=True)  # (..., Tq, 1)
    out = np.full_like(shown, np.nan)
    np.divide(shown, total, out=out, where=total >= EMPTY_ROW_MASS)
    return out, kept


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
    """Mean weight at (rows, cols) per head over rows drawn (not NaN), 0 out of range: (L, H)."""
    if rows.size == 0:
        return np.full(weights.shape[:2], np.nan)
    ok = (cols >= 0) & (cols < weights.shape[-1])
    picked = np.zeros(weights.shape[:2] + (rows.size,))  # (L, H, n)
    picked[..., ok] = weights[..., rows[ok], cols[ok]]
    drawn = ~np.isnan(weights[..., rows, :]).all(axis=-1)  # (L, H, n)
    return _nan_mean(np.where(drawn, picked, np.nan))


def _near_diagonal(weights: np.ndarray, reach: int = NEAR_DIAGONAL_KEYS) -> np.ndarray:
    """Share of each row's weight within ``reach`` keys of the rescaled diagonal: (L, H)."""
    tq, tk = weights.shape[-2:]
    centre = diagonal_keys(tq, tk, "cross")  # (Tq,)
    near = np.abs(np.arange(tk)[None, :] - centre[:, None]) <= reach  # (Tq, Tk)
    share = np.where(near, np.nan_to_num(weights), 0.0).sum(axis=-1)  # (L, H, Tq)
    drawn = ~np.isnan(weights).all(axis=-1)  # (L, H, Tq)
    return _nan_mean(np.where(drawn, share, np.nan))


def _nan_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN; NaN where everything is NaN (no warning)."""
    count = (~np.isnan(values)).sum(axis=-1)
    total = np.nansum(values, axis=-1)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def monotonicity(weights2d: np.ndarray) -> float:
    """Spearman correlation of query index with each row's argmax key (1.0 = monotone); NaN
    for a map with no rows or no keys (a model that reads no source has an empty cross map)."""
    if weights2d.size == 0:
        return float("nan")
    return spearman(np.arange(weights2d.shape[0]), weights2d.argmax(axis=-1))


def head_label(row: dict, tk: int, kind: str) -> str:
    """Name a head's pattern on the map as drawn; the first rule that fires wins.

    Self-attention: diagonal, sub-diagonal (one column left), sink, broad. Cross
    attention has no diagonal of its own (two languages, two lengths): monotonic when
    most weight lies near the rescaled diagonal *and* each row's strongest key moves
    forward with the rows (Spearman rho >= MONOTONIC_RHO) — on a short sentence the band
    near the diagonal covers most keys, so the share alone would call almost any head
    monotonic; then sink and broad.
    """
    broad = tk > 1 and row["entropy"] / np.log(tk) >= BROAD_ENTROPY
    rho = row.get("monotonicity", np.nan)
    ordered = bool(np.isfinite(rho) and rho >= MONOTONIC_RHO)
    if kind == "cross" and row["diagonal"] >= PATTERN_SHARE and ordered:
        return LABELS["monotonic"]
    if kind != "cross" and row["diagonal"] >= PATTERN_SHARE:
        return LABELS["diagonal"]
    if kind != "cross" and row["previous"] >= PATTERN_SHARE:
        return LABELS["previous"]
    if np.nansum([row["eos"], row.get("bos", np.nan)]) >= PATTERN_SHARE:
        return LABELS["sink"]
    return LABELS["broad"] if broad else LABELS["mixed"]


def _token_mass(weights: np.ndarray, key_tokens: Sequence[str], token: str) -> np.ndarray:
    """Mean over drawn rows of the weight on keys equal to `token` (NaN if none): (L, H)."""
    cols = [i for i, tok in enumerate(key_tokens) if tok == token]
    if not cols:
        return np.full(weights.shape[:2], np.nan)
    return _nan_mean(weights[..., cols].sum(axis=-1))


def head_stats(
    weights: np.ndarray,
    kind: str,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
) -> pd.DataFrame:
    """One row per (layer, head) with entropy, pattern scores and a label, on the full map:
    <bos>/<eos> hidden or not, a head is what it is (hiding shifted the columns under the
    statistics, and a diagonal head read as a previous-token one: issue 53).

    Args:
        weights: (L, H, Tq, Tk) attention of one sentence.
        kind: "encoder", "decoder_self" or "cross".
        query_tokens, key_tokens: Tq and Tk tokens.

    Returns:
        DataFrame: layer, head (0-based), entropy, diagonal (cross: share near the rescaled
        diagonal), previous (one column left of the diagonal; NaN for cross), eos, bos,
        monotonicity (cross only, else NaN), label.
    """
    kind_labels(kind)  # raises for an unknown kind
    check_tokens(weights.shape, query_tokens, key_tokens)
    w = weights.astype(np.float64)  # (L, H, Tq, Tk)
    n_layers, n_heads, tq, tk = w.shape
    rows = np.arange(tq)
    cross = kind == "cross"
    table = {
        "entropy": _nan_mean(_row_entropy(w)),
        "diagonal": _near_diagonal(w) if cross else _mean_at(w, rows, rows),
        "previous": np.full(w.shape[:2], np.nan) if cross else _mean_at(w, rows[1:], rows[:-1]),
        "eos": _token_mass(w, key_tokens, "<eos>"),
        "bos": _token_mass(w, key_tokens, "<bos>"),
    }
    records = []
    for layer in range(n_layers):
        for head in range(n_heads):
            rec = {"layer": layer, "head": head}
            rec.update({name: float(v[layer, head]) for name, v in table.items()})
            rec["monotonicity"] = _monotonicity_drawn(w[layer, head]) if cross else np.nan
            rec["label"] = head_label(rec, tk, kind)
            records.append(rec)
    return pd.DataFrame.from_records(records)


def _monotonicity_drawn(weights2d: np.ndarray) -> float:
    """monotonicity over the rows that are drawn (a NaN row has no argmax)."""
    drawn = ~np.isnan(weights2d).all(axis=-1)
    return monotonicity(np.nan_to_num(weights2d[drawn], nan=0.0))


def head_row(maps: SentenceMaps, kind: str, layer: int, head: int) -> pd.Series:
    """The statistics and label of one head (a row of ``head_table``)."""
    return row_of(head_table(maps, kind), layer, head)


def row_of(table: pd.DataFrame, layer: int, head: int) -> pd.Series:
    """The row of one head in a ``head_table``."""
    return table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]


def head_table(maps: SentenceMaps, kind: str) -> pd.DataFrame:
    """Head statistics of one kind on its full map (whatever a page hides)."""
    queries, keys = maps.tokens(kind)
    table = head_stats(maps.weights(kind), kind, queries, keys)
    if kind == "cross":
        table = table.drop(columns=["previous"]).rename(columns={"diagonal": "near diagonal"})
    else:
        table = table.drop(columns=["monotonicity"])
    if kind != "decoder_self":
        table = table.drop(columns=["bos"])
    return table.dropna(axis=1, how="all")  # a key this map never has (decoder self: <eos>)


SUPERVISED_LABEL = "trained to align"  # added to the label of a head trained toward alignments


def supervised_head(meta: dict) -> tuple[int, int, str] | None:
    """(layer, head, what) of the cross-attention head a checkpoint was trained to align
    (Garg et al. 2019, ``core.train --align-teacher/--align-links``), or None."""
    train = meta.get("train_config") or {}
    if not train.get("align_weight"):
        return None
    what = f"weight {train['align_weight']:g}; alignments from {train.get('align_source') or '?'}"
    if train.get("align_full_context"):
        what += "; trained with the whole target visible (Garg et al.'s full context)"
    return int(train.get("align_layer", 0)), int(train.get("align_head", 0)), what


def mark_supervised(table: pd.DataFrame, kind: str, meta: dict) -> pd.DataFrame:
    """The head table with the supervised cross-attention head's label saying so."""
    found = supervised_head(meta)
    if kind != "cross" or found is None:
        return table
    chosen = (table["layer"] == found[0]) & (table["head"] == found[1])
    table = table.copy()
    table.loc[chosen, "label"] = table.loc[chosen, "label"] + f" · {SUPERVISED_LABEL}"
    return table


def marked_rows(maps: SentenceMaps, kind: str, meta: dict) -> list[dict]:
    """The rows of the Maps section's "Head statistics" table of ``kind`` (``head_table`` with
    ``mark_supervised``, as the page shows it; NaN as None), for JSON lines; ValueError naming
    the kinds these maps draw when ``kind`` is not one of them."""
    if kind not in maps.drawn_kinds:
        raise ValueError(
            f"This model has no {kind} attention map; it has: {', '.join(maps.drawn_kinds)}."
        )
    table = mark_supervised(head_table(maps, kind), kind, meta)
    return [{k: None if v != v else v for k, v in r.items()} for r in table.to_dict("records")]
