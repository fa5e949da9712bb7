"""Rank correlation: Spearman's rho, ties given their average rank."""

from __future__ import annotations

import numpy as np


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties given their average rank (as Spearman needs)."""
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    for value in np.unique(values):
        tied = values == value
        out[tied] = out[tied].mean()
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation; NaN for fewer than 2 points or a constant input."""
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(ranks(np.asarray(x)), ranks(np.asarray(y)))[0, 1])
