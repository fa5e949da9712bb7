"""bertviz's model view: every layer x head as a small line diagram, beside the heat-map grid."""

from __future__ import annotations

import numpy as np

from core.figures.head_roles import ROLES_TITLE
from core.figures.model_view import MODEL_VIEW_BINS, model_view_figure
from tests.helpers import assert_clean, run_page_script


def lines(fig) -> list[tuple[int, int, float]]:
    """(query, key, opacity) of every line drawn."""
    out = []
    for t in fig.data:
        if t.mode == "lines":
            ys = [y for y in t.y if y is not None]
            out += [(ys[k], ys[k + 1], t.opacity) for k in range(0, len(ys), 2)]
    return out


def test_each_cell_draws_its_heads_weights_as_lines():
    w = np.zeros((2, 3, 2, 4), dtype=np.float32)
    w[1, 2, 0, 3] = 1.0  # layer 1, head 2: query 0 all on key 3
    w[1, 2, 1, 1] = 0.6
    w[1, 2, 1, 2] = 0.4
    fig = model_view_figure(w, ["a", "b"], ["w", "x", "y", "z"], "cross", ["layer 0", "layer 1"])
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"layer {layer} · head {h}" for layer in (0, 1) for h in range(3)]
    cell = [t for t in fig.data if t.mode == "lines" and t.xaxis == "x6"]  # layer 1, head 2
    drawn = sorted((q, k) for t in cell for q, k in zip(t.y[0::3], t.y[1::3]))
    assert drawn == [(0, 3), (1, 1), (1, 2)]
    assert max(t.opacity for t in cell) == (MODEL_VIEW_BINS - 0.5) / MODEL_VIEW_BINS
    assert not [t for t in fig.data if t.mode == "lines" and t.xaxis == "x"]  # all zero: none


def test_a_picked_token_keeps_only_its_lines():
    w = np.full((1, 2, 3, 3), 1 / 3, dtype=np.float32)
    fig = model_view_figure(w, ["a", "b", "c"], ["x", "y", "z"], "encoder", ["layer 0"], ("key", 1))
    assert {k for _, k, _ in lines(fig)} == {1} and len(lines(fig)) == 2 * 3
    fig = model_view_figure(
        w, ["a", "b", "c"], ["x", "y", "z"], "encoder", ["layer 0"], ("query", 2)
    )
    assert {q for q, _, _ in lines(fig)} == {2}


def test_the_maps_section_draws_the_overview_as_lines(studio_dirs):
    at = run_page_script("attention.py", {"kind": "cross"})
    assert_clean(at)
    before = len(at.get("plotly_chart"))
    at.segmented_control(key="at_overview").set_value("lines").run()
    assert_clean(at)
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    overview = [s for s in specs if ROLES_TITLE not in s][-1]  # the head roles follow it
    assert len(specs) == before and "in each cell" in overview
