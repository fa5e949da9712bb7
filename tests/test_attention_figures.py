"""Tests for core.attention_figures: heatmaps, the head grid, top-k bars, views as figures."""

from __future__ import annotations

import numpy as np
import pytest

from core import attention_figures as figs
from core.maps import HIDDEN_NOTE, playback_step, select_view


def test_unique_labels_keep_repeated_tokens_apart():
    labels = figs.unique_labels(["the", "cat", "the"])
    assert len(set(labels)) == 3
    assert all("the" in labels[i] for i in (0, 2))


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "cross"])
def test_heatmap_figure_spec(kind):
    queries, keys = ["the", "cat", "the"], ["<bos>", "a", "a", "b"]
    weights = np.full((3, 4), 0.25)
    fig = figs.heatmap_figure(weights, queries, keys, kind, zmax=0.6, note="hidden")
    trace = fig.data[0]
    assert np.asarray(trace.z).shape == (3, 4)
    assert np.asarray(trace.z).dtype == np.float32
    assert fig.layout.yaxis.autorange == "reversed"
    assert "query" in fig.layout.yaxis.title.text
    assert "key" in fig.layout.xaxis.title.text
    assert list(fig.layout.yaxis.ticktext) == queries
    assert list(fig.layout.xaxis.ticktext) == [figs.plotly_text(k) for k in keys]
    assert len(set(trace.y)) == 3 and len(set(trace.x)) == 4
    assert trace.zmax == 0.6
    assert "hidden" in fig.layout.title.subtitle.text


def test_heatmap_figure_rejects_mismatched_tokens():
    with pytest.raises(ValueError, match="tokens"):
        figs.heatmap_figure(np.ones((2, 2)), ["a"], ["b", "c"], "encoder")


@pytest.mark.parametrize(("layers", "heads", "zmax"), [(1, 1, 1.0), (2, 3, 0.4)])
def test_grid_figure_one_coloraxis(layers, heads, zmax):
    tokens = ["<bos>", "the", "the", "<eos>"]
    weights = np.full((layers, heads, 4, 4), 0.25)
    fig = figs.grid_figure(weights, tokens, tokens, "encoder", zmax=zmax)
    assert len(fig.data) == layers * heads
    assert all(t.type == "heatmap" and t.coloraxis == "coloraxis" for t in fig.data)
    assert all(t.customdata is None for t in fig.data)
    assert fig.layout.coloraxis.cmin == 0.0
    assert fig.layout.coloraxis.cmax == zmax
    assert all(fig.layout[f"yaxis{i or ''}"].autorange == "reversed" for i in range(2))
    titles = {a.text for a in fig.layout.annotations}
    assert {f"layer {i}" for i in range(layers)} <= titles
    assert {f"head {j}" for j in range(heads)} <= titles


def test_percentile_cap_lowers_scale_for_diffuse_heads():
    diffuse = np.full((1, 1, 10, 10), 0.1)
    assert figs.percentile_cap(diffuse) == pytest.approx(0.1)
    assert figs.percentile_cap(np.zeros((2, 2))) == 1.0


def test_topk_figure_bars():
    fig = figs.topk_figure(["le", "la", "<eos>"], [0.6, 0.3, 0.1])
    np.testing.assert_allclose(fig.data[0].x, [0.6, 0.3, 0.1], rtol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["le", "la", "&lt;eos&gt;"]  # shown as <eos>


# ----------------------------------------------------------------------------- views of a sentence


def test_view_figure_labels_axes_and_says_when_hidden(home_translation):
    _, maps = home_translation
    view = select_view(maps, "cross", 0, 1, hide=True)
    fig = figs.view_figure(view)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), view.weights)
    layout = fig.layout.to_plotly_json()
    assert layout["xaxis"]["title"]["text"] == "source token (key)"
    assert layout["yaxis"]["title"]["text"] == "output token (query)"
    assert HIDDEN_NOTE in layout["title"]["subtitle"]["text"]
    assert "<eos>" not in layout["xaxis"]["ticktext"]
    stretched = figs.view_figure(select_view(maps, "cross", 0, 1), stretch=True)
    assert stretched.data[0].zmax == pytest.approx(figs.percentile_cap(maps.cross[0, 1]))


@pytest.mark.parametrize(("layers", "traces"), [(None, 8), ([1], 4)])
def test_grid_view_figure_shapes_and_masked_cells(home_translation, layers, traces):
    _, maps = home_translation
    fig = figs.grid_view_figure(maps, "decoder_self", layers=layers)
    assert len(fig.data) == traces
    n = len(maps.output_tokens)
    first = layers[0] if layers else 0
    for i, trace in enumerate(fig.data):
        z = np.asarray(trace.z)
        assert z.shape == (n, n)
        np.testing.assert_array_equal(z, maps.decoder_self[first + i // 4, i % 4])
        assert np.all(np.triu(z, k=1) == 0)
    assert fig.layout.coloraxis.cmax == 1.0


def test_grid_view_figure_hidden_specials_and_note(home_translation):
    _, maps = home_translation
    fig = figs.grid_view_figure(maps, "cross", hide=True, stretch=True)
    assert all(np.asarray(t.z).shape == (len(maps.output_tokens), 3) for t in fig.data)
    rows = np.asarray(fig.data[0].z).sum(-1)
    np.testing.assert_allclose(rows[rows > 0], 1.0, rtol=1e-5)
    subtitle = fig.layout.title.subtitle.text
    assert HIDDEN_NOTE in subtitle and "stretched" in subtitle
    assert fig.layout.coloraxis.cmax < 1.0


def test_head_rows_figure(home_translation):
    t, maps = home_translation
    p = playback_step(maps, t.topk, 2, 0)
    fig = figs.head_rows_figure(p.cross, p.src_tokens, "x", "source token (key)")
    assert np.asarray(fig.data[0].z).shape == (4, len(t.src_tokens))
    assert list(fig.data[0].y) == [f"head {h}" for h in range(4)]


def test_a_sure_candidate_shows_its_probability():
    """p = 0.999 must read 1.00 inside its bar, not be clipped at the axis end."""
    fig = figs.topk_figure(["je", "j'", "<eos>"], [0.999, 0.0008, 0.0002])
    bar = fig.data[0]
    assert list(bar.text) == ["1.00", "0.00", "0.00"]
    assert bar.textposition == "auto" and bar.cliponaxis is False
    assert fig.layout.xaxis.range[1] > 1


def test_grid_ticks_stay_readable_for_long_sentences():
    tokens = [f"w{i}" for i in range(45)]
    weights = np.full((1, 2, 45, 45), 1 / 45, dtype=np.float32)
    layout = figs.grid_figure(weights, tokens, tokens, "encoder").layout
    assert layout.xaxis.tickfont.size >= 10 and layout.xaxis.tickangle == -45
    assert 15 <= len(layout.xaxis.tickvals) <= figs.MAX_GRID_TICKS  # every k-th token
    assert layout.height >= 60 + 16 * 45  # rows sized to the sentence


def test_tokens_are_shown_literally_never_as_plotly_html():
    """A token like <a href=...> must not become a link in a chart."""
    tokens = ['<a href="http://x">hi</a>', "&amp;", "ok"]
    fig = figs.heatmap_figure(np.full((3, 3), 1 / 3), tokens, tokens, "encoder")
    text = " ".join(fig.layout.xaxis.ticktext) + " ".join(fig.data[0].x)
    assert "<a" not in text and "&lt;a href" in text and "&amp;amp;" in text
