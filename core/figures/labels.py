"""Text inside Plotly figures: every label a user or a model wrote goes through ``plotly_text``."""

from __future__ import annotations

import html

import numpy as np


def plotly_text(text: str) -> str:
    """Text Plotly shows literally: it reads <b>, <a href=...> and &...; in labels as HTML."""
    return html.escape(str(text), quote=False)


PLAIN_NUMBERS = {"exponentformat": "e"}  # axis ticks and hovers: 1e-4, never SI's 100μ or 25m
SCORE_FORMAT = ".2~g"  # d3 format of a small score in a cell or hover: 0.025, never 25m
LOG_MANTISSAS = ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1, 3), (1,))  # densest first


def number_text(value: float) -> str:
    """A full, plain number for a tick label: 0.3, 2, 1500, or 1e-4 / 2.5e6 beyond those."""
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.6g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def log_ticks(values, most: int = 6) -> dict:
    """Tick values and full-number labels for a log axis over ``values`` (positive ones).

    Plotly's own log ticks label minor ticks with one digit ("9, 8, … 3" for 0.9 … 0.3)
    and use SI prefixes ("100μ"); these name every tick in full: the densest of
    1 … 9, 1-2-5, 1-3 or 1 × 10^k with at most ``most`` ticks over the values, drawn
    half a decade beyond them too (Plotly shows only those in view).
    """
    positive = [float(v) for v in values if v is not None and v > 0 and np.isfinite(v)]
    if not positive:
        return {}
    lo, hi = np.log10(min(positive)), np.log10(max(positive))
    powers = range(int(np.floor(lo)) - 1, int(np.ceil(hi)) + 1)
    for mantissas in LOG_MANTISSAS:
        ticks = [m * 10.0**k for k in powers for m in mantissas]
        shown = np.log10([t for t in ticks if lo <= np.log10(t) <= hi])
        apart = len(shown) < 2 or np.diff(shown).min() >= (hi - lo) / (2 * most)
        if len(shown) <= most and apart:  # few enough, and no two crowded (8, 9, 10)
            break
    inside = [t for t in ticks if lo - 0.5 <= np.log10(t) <= hi + 0.5]
    if sum(lo <= np.log10(t) <= hi for t in inside) > most:  # many decades: every k-th one
        inside = inside[:: -(-len(inside) // most)]
    return {"tickmode": "array", "tickvals": inside, "ticktext": [number_text(t) for t in inside]}


LEGEND_ROW_PX = 22  # one row of a horizontal legend


def legend_below(fig, height: int, per_row: int = 3) -> dict:
    """Layout for a horizontal legend on the figure's bottom edge, below the x-axis title and
    never on it (placed in the figure, not the plot: Plotly shrinks the plot to make room),
    and the figure's ``height`` grown by the rows of its entries (traces in the legend)."""
    entries = sum(t.showlegend is not False for t in fig.data)
    rows = -(-max(entries, 1) // per_row)
    legend = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0}
    return {"legend": legend, "height": int(height) + LEGEND_ROW_PX * rows + 8}
