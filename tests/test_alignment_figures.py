"""Tests for core.figures.alignment and alignment_grid: the data behind each alignment chart."""

from __future__ import annotations

import numpy as np
import pytest

from core.alignment.extract import MODES, PairMaps, Reader, links, piece_words, read
from core.alignment.grid import AlignmentGrid, GridRow
from core.figures import alignment as figs
from core.figures import alignment_grid as grid_figs

SOURCE = ["the", "cat", "sees", "the", "<b>dog</b>"]  # S = 5 pieces, "the" twice
TARGET = ["le", "ch", "##at", "voit", "le", "chien"]  # T = 6 pieces, 5 words, "le" twice


def pair(seed: int = 0) -> PairMaps:
    """Random cross-attention (2 layers, 2 heads, T + 1 rows, S + 1 columns), rows sum to 1."""
    rng = np.random.default_rng(seed)
    cross = rng.random((2, 2, len(TARGET) + 1, len(SOURCE) + 1)).astype(np.float32)
    cross /= cross.sum(-1, keepdims=True)  # (L, H, T + 1, S + 1)
    return PairMaps(cross, piece_words(SOURCE), piece_words(TARGET))


def matrix(reader: Reader, seed: int = 0):
    """(figure, found links, weights) of one reader on the random pair."""
    maps = pair(seed)
    weights, found = read(maps, reader), links(maps, reader)
    marked = figs.link_cells(maps, found)
    return figs.link_matrix_figure(weights, SOURCE, TARGET, marked, "t"), found, weights


def trace(fig, kind: str, name: str | None = None):
    """The one trace of a type and name in a figure (not the grey one over blank cells)."""
    (found,) = [t for t in fig.data if t.type == kind and t.name == name]
    return found


@pytest.mark.parametrize(
    "reader", [Reader(0, 1, "awo"), Reader(1, None, "awi"), Reader(None, None)]
)
def test_circled_cells_are_the_pieces_of_the_links(reader):
    fig, found, weights = matrix(reader)
    heat, circles = trace(fig, "heatmap"), trace(fig, "scatter", "link")
    assert np.allclose(np.asarray(heat.z, dtype=float), weights)
    x, y = list(heat.x), list(heat.y)
    cells = {(y.index(b), x.index(a)) for a, b in zip(circles.x, circles.y)}
    src, tgt = piece_words(SOURCE), piece_words(TARGET)
    assert cells == {
        (t, s) for t in range(len(TARGET)) for s in range(len(SOURCE)) if (src[s], tgt[t]) in found
    }
    words = {(src[s], tgt[t]) for t, s in cells}
    assert words == found and len(found) >= len(set(tgt))  # every French word is linked


def test_the_row_read_moves_one_step_in_awi():
    maps = pair()
    awo, awi = read(maps, Reader(0, 0, "awo")), read(maps, Reader(0, 0, "awi"))
    assert np.allclose(awi[:-1], awo[1:])  # AWI reads the step after the one AWO reads
    assert "outputs it" in figs.ROW_WORDS["awo"] and "next step" in figs.ROW_WORDS["awi"]


def test_repeated_tokens_keep_their_own_columns_and_rows():
    fig, _, _ = matrix(Reader(0, 0))
    x, y = fig.layout.xaxis, fig.layout.yaxis
    assert len(set(x.tickvals)) == len(SOURCE) and len(set(y.tickvals)) == len(TARGET)
    assert list(x.ticktext).count("the") == 2 and list(y.ticktext).count("le") == 2
    assert "&lt;b&gt;dog&lt;/b&gt;" in x.ticktext  # a token is text, never HTML
    assert x.title.text and y.title.text and y.autorange == "reversed"


def test_one_line_per_link_between_the_two_sentences():
    maps = pair()
    reader = Reader(1, 0, "awo")
    weights, found = read(maps, reader), links(maps, reader)
    strengths = figs.link_weights(weights, maps, found)
    src, tgt = ["the", "cat", "sees", "the", "dog"], ["le", "chat", "voit", "le", "chien"]
    fig = figs.link_lines_figure(src, tgt, strengths, "links")
    lines = [t for t in fig.data if t.name == "link"]
    assert len(lines) == len(found) > 0
    top, bottom = fig.layout.xaxis2, fig.layout.xaxis
    assert list(top.ticktext) == src and list(bottom.ticktext) == tgt  # repeated words kept
    for line, (s, t) in zip(lines, sorted(found)):
        assert list(line.y) == [1, 0]
        assert line.x[0] == top.tickvals[s] and line.x[1] == bottom.tickvals[t]


def test_the_links_table_holds_words_and_the_largest_piece_weight():
    maps = pair()
    reader = Reader(0, None, "awo")
    weights, found = read(maps, reader), links(maps, reader)
    table = figs.links_table(weights, maps, found, SOURCE, TARGET)
    assert len(table) == len(found)
    assert list(table.columns) == ["source", "English word", "target", "French word", "weight"]
    chat = table[table["French word"] == "chat"].iloc[0]  # the word of pieces 1 and 2
    s = int(chat["source"])
    assert chat["weight"] == pytest.approx(weights[1:3, piece_words(SOURCE) == s].max())


def grid_rows() -> list[GridRow]:
    """A 2-layer, 2-head grid in both modes, every AER different; best: layer 1's mean, AWI."""
    rows, aer = [], 0.9
    for mode in MODES:
        for layer in (0, 1):
            for head in ("0", "1", "mean"):
                rows.append(GridRow(layer, head, mode, aer, 1 - aer, 1 - aer, 5))
                aer -= 0.05
        rows.append(GridRow("all", "mean", mode, aer + 0.5, 0.5 - aer, 0.5 - aer, 5))
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_the_best_cell_of_each_mode_is_starred_and_framed(mode):
    rows = grid_rows()
    fig = grid_figs.aer_grid_figure(rows, mode, grid_figs.aer_range(rows))
    heat = trace(fig, "heatmap")
    best = AlignmentGrid([r for r in rows if r.mode == mode], 0.0).best
    y, x = list(heat.y), list(heat.x)
    at = (y.index(str(best.layer)), x.index(best.head))
    starred = [(i, j) for i, row in enumerate(heat.text) for j, v in enumerate(row) if "★" in v]
    assert starred == [at]
    (frame,) = fig.layout.shapes
    assert (frame.x0 + frame.x1) / 2 == at[1] and (frame.y0 + frame.y1) / 2 == at[0]
    assert heat.reversescale and y == ["0", "1", "all"] and x == ["0", "1", "mean"]
    z = np.asarray(heat.z, dtype=float)
    assert np.isnan(z[2, :2]).all() and not np.isnan(z[:2]).any()  # "all" has only the mean
    assert f"AER {best.aer:.3f}" in fig.layout.title.subtitle.text


def test_the_table_ranks_every_reader_best_first():
    rows = grid_rows()
    table = grid_figs.grid_table(rows)
    assert len(table) == len(rows) and list(table["AER"]) == sorted(r.aer for r in rows)
    best = AlignmentGrid(rows, 0.0).best
    first = table.iloc[0]
    assert (first["mode"], first["layer"], first["head"]) == (best.mode.upper(), "1", "mean")
    assert set(table["layer"]) == {"0", "1", "all"}  # text: one column type for Arrow
