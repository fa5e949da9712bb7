"""Charts a click can pick from. Streamlit (1.67) hands a page the points a click selects,
never a heatmap's cells: every drawn cell of a map gets an invisible point that carries its
(row, column, value), read back by ``clicked_cell``; the lines view's token markers carry
(side, index), read back by ``clicked_token``."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from core.figures import plain

CLICK_NAME = "cell"  # the trace of invisible points a click on a map selects


def clickable(fig: go.Figure) -> go.Figure:
    """Every drawn cell of the figure's first heatmap as an invisible point that carries its
    (row, column, value): Streamlit hands a page the points a click selects, never a heatmap's
    cells. The points take over the heatmap's hover (the nearest one answers anywhere)."""
    data = [trace.to_plotly_json() for trace in fig.data]  # copies, arrays as they are
    heat = data[0]
    z = np.asarray(heat["z"], dtype=np.float32)  # (Tq, Tk)
    rows, cols = np.nonzero(~np.isnan(z))  # (n,) each: the cells with a weight
    points = {
        "type": "scatter",
        "x": np.asarray(heat["x"], dtype=object)[cols],
        "y": np.asarray(heat["y"], dtype=object)[rows],
        "customdata": np.stack([rows, cols, z[rows, cols]], axis=1),  # (n, 3)
        "mode": "markers",
        "marker": {"opacity": 0, "size": 12},
        "hovertemplate": heat.pop("hovertemplate").replace("%{z", "%{customdata[2]"),
        "name": CLICK_NAME,
        "showlegend": False,
    }
    heat["hoverinfo"] = "skip"
    layout = fig.layout.to_plotly_json() | {"hoverdistance": -1, "clickmode": "event+select"}
    return plain.figure([*data, points], layout)  # hoverdistance -1: the nearest point answers


def clicked_cell(selection: Mapping | None) -> tuple[int, int] | None:
    """(row, column) of the cell a click on a ``clickable`` figure picked (None: none)."""
    points = ((selection or {}).get("selection") or {}).get("points") or []
    data = points[0].get("customdata") if points else None
    if isinstance(data, Mapping):  # a row of a 2-D customdata arrives keyed "0", "1", "2"
        data = [data.get(str(i)) for i in range(3)]
    if not isinstance(data, list | tuple) or len(data) < 2:
        return None
    if not all(isinstance(v, int | float) and float(v).is_integer() and v >= 0 for v in data[:2]):
        return None
    return int(data[0]), int(data[1])


def clicked_token(selection: Mapping | None) -> tuple[str, int] | None:
    """(side, index) of the token a click on a lines view's token column picked: side "query"
    or "key", the index as drawn (None: no token clicked)."""
    points = ((selection or {}).get("selection") or {}).get("points") or []
    data = points[0].get("customdata") if points else None
    if isinstance(data, Mapping):  # a row of a 2-D customdata arrives keyed "0", "1"
        data = [data.get("0"), data.get("1")]
    if not isinstance(data, list | tuple) or len(data) != 2 or data[0] not in ("query", "key"):
        return None
    index = data[1]
    if not isinstance(index, int | float) or not float(index).is_integer() or index < 0:
        return None
    return str(data[0]), int(index)
