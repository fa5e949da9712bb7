"""Tests for core.figures.attention: heatmaps, the head grid, top-k bars, views as figures."""

from __future__ import annotations

import html

import numpy as np
import pytest

from core.attention.maps import HIDDEN_NOTE, playback_step, select_view
from core.figures import attention as figs
from core.figures import comparison as cmp_figs
from core.figures import playback as playback_figs


def subtitle_text(fig) -> str:
    """A figure's subtitle with its line breaks read as spaces."""
    return fig.layout.title.subtitle.text.replace("<br>", " ")


def title_lines(fig) -> tuple[list[str], list[str]]:
    """The title's and the subtitle's lines as they read (HTML entities decoded)."""
    title = fig.layout.title
    return [html.unescape(x) for x in title.text.split("<br>")], [
        html.unescape(x) for x in (title.subtitle.text or "").split("<br>") if x
    ]


def assert_title_block_fits(fig, chars: int, below: int = 0) -> None:
    """Title lines fit ``chars``; the top margin holds title, subtitle and ``below`` px."""
    title, notes = title_lines(fig)
    assert all(len(line) <= chars for line in title), title
    assert all(len(line) <= chars * 1.4 for line in notes), notes
    layout = fig.layout
    assert (layout.title.yref, layout.title.yanchor) == ("container", "top")
    need = figs.TITLE_LINE_PX * len(title) + figs.NOTE_LINE_PX * len(notes) + below
    assert layout.margin.t >= layout.title.pad.t + need + 8


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
    assert_title_block_fits(fig, figs.TITLE_CHARS)


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
    fig = playback_figs.topk_figure(["le", "la", "<eos>"], [0.6, 0.3, 0.1])
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
    assert figs.plotly_text(HIDDEN_NOTE) in subtitle_text(fig)
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
    subtitle = subtitle_text(fig)
    assert figs.plotly_text(HIDDEN_NOTE) in subtitle and "stretched" in subtitle
    assert fig.layout.coloraxis.cmax < 1.0


def test_head_rows_figure(home_translation):
    t, maps = home_translation
    p = playback_step(maps, t.topk, 2, 0)
    fig = playback_figs.head_rows_figure(p.cross, p.src_tokens, "x", "source token (key)")
    assert np.asarray(fig.data[0].z).shape == (4, len(t.src_tokens))
    assert list(fig.data[0].y) == [f"head {h}" for h in range(4)]


def test_a_sure_candidate_shows_its_probability():
    """p = 0.999 must read 1.00 inside its bar, not be clipped at the axis end."""
    fig = playback_figs.topk_figure(["je", "j'", "<eos>"], [0.999, 0.0008, 0.0002])
    bar = fig.data[0]
    assert list(bar.text) == ["1.00", "0.00", "0.00"]
    assert bar.textposition == "auto" and bar.cliponaxis is False
    assert fig.layout.xaxis.range[1] > 1


def test_grid_ticks_stay_readable_for_long_sentences():
    tokens = [f"w{i}" for i in range(45)]
    weights = np.full((1, 2, 45, 45), 1 / 45, dtype=np.float32)
    layout = figs.grid_figure(weights, tokens, tokens, "encoder").layout
    assert layout.xaxis.tickfont.size >= 10 and layout.xaxis.tickangle == -90
    assert 15 <= len(layout.xaxis.tickvals) <= figs.MAX_GRID_TICKS  # every k-th token
    assert layout.height >= 60 + 16 * 45  # rows sized to the sentence


def test_tokens_are_shown_literally_never_as_plotly_html():
    """A token like <a href=...> must not become a link in a chart."""
    tokens = ['<a href="http://x">hi</a>', "&amp;", "ok"]
    fig = figs.heatmap_figure(np.full((3, 3), 1 / 3), tokens, tokens, "encoder")
    text = " ".join(fig.layout.xaxis.ticktext) + " ".join(fig.data[0].x)
    assert "<a" not in text and "&lt;a href" in text and "&amp;amp;" in text


def test_decoder_self_grid_with_hidden_bos_blanks_step_zero_and_has_room_for_its_notes(
    home_translation,
):
    """Step 0 reads only <bos>: hidden, its row is blank (NaN), named, never all zeros."""
    _, maps = home_translation
    fig = figs.grid_view_figure(maps, "decoder_self", hide=True)
    weights = [t for t in fig.data if t.name != figs.BLANK_NAME]
    grey = [t for t in fig.data if t.name == figs.BLANK_NAME]
    assert len(weights) == len(grey) == 8
    for trace, blank in zip(weights, grey):
        z, g = np.asarray(trace.z), np.asarray(blank.z)
        assert np.isnan(z[0]).all() and not np.isnan(z[1:]).any()
        assert (g[0] == 1).all() and np.isnan(g[1:]).all()  # grey over row 0 only
        assert (blank.xaxis, blank.yaxis) == (trace.xaxis, trace.yaxis)
    assert "row 0 (je) attends only to &lt;bos&gt;: left blank" in subtitle_text(fig)
    assert_title_block_fits(fig, figs.WIDE_TITLE_CHARS, below=28)  # + the head titles
    heads = [a for a in fig.layout.annotations if a.text.startswith("head")]
    assert heads and all(a.yanchor == "bottom" and a.y == 1.0 for a in heads)


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "cross"])
@pytest.mark.parametrize("hide", [False, True])
def test_large_map_titles_fit_half_a_narrow_page(home_translation, kind, hide):
    _, maps = home_translation
    view = select_view(maps, kind, 1, "max", hide=hide)
    fig = figs.view_figure(view, stretch=True)
    assert_title_block_fits(fig, figs.TITLE_CHARS)


def test_stretch_ignores_blank_cells():
    weights = np.array([[np.nan, np.nan], [0.2, 0.1]])
    assert figs.percentile_cap(weights) == pytest.approx(0.2, rel=0.02)
    assert figs.percentile_cap(np.full((2, 2), np.nan)) == 1.0


def test_playback_titles_are_short_and_name_the_token_below(home_translation):
    t, maps = home_translation
    p = playback_step(maps, t.topk, 2, 1)
    fig = playback_figs.head_rows_figure(
        p.self_row,
        p.self_keys,
        "Decoder self-attention, layer 1",
        "earlier output token (key)",
        f"step 2: reading “{p.read}”, looks at the tokens read so far <b>",
    )
    assert fig.layout.title.text == "Decoder self-attention, layer 1"
    assert "“suis”" in subtitle_text(fig) and "&lt;b&gt;" in subtitle_text(fig)
    assert_title_block_fits(fig, figs.TITLE_CHARS)


def test_blank_rows_are_grey_and_labelled_in_the_large_map(home_translation):
    _, maps = home_translation
    fig = figs.view_figure(select_view(maps, "decoder_self", 0, 0, hide=True))
    assert np.isnan(np.asarray(fig.data[0].z)[0]).all()
    (label,) = fig.layout.annotations
    assert (label.text, label.y) == ("all weight on &lt;bos&gt; (hidden)", "0:je")
    weights, grey = fig.data  # blank cells grey, not white like 0
    assert grey.name == figs.BLANK_NAME and grey.colorscale[0][1] == figs.BLANK_COLOR
    assert (np.asarray(grey.z)[0] == 1).all() and np.isnan(np.asarray(grey.z)[1:]).all()
    plain = figs.view_figure(select_view(maps, "decoder_self", 0, 0))
    assert not plain.layout.annotations and len(plain.data) == 1


def test_difference_map_is_centred_at_zero_with_a_symmetric_range():
    diff = np.array([[0.2, -0.5], [np.nan, 0.1]], dtype=np.float32)
    fig = cmp_figs.diff_figure(diff, ["a", "b"], ["c", "d"], "encoder", "B − A: <b>x</b>")
    trace = fig.data[0]
    assert (trace.zmin, trace.zmax) == (-0.5, 0.5)
    assert (
        trace.colorscale
        == figs.heatmap_figure(diff, "ab", "cd", "encoder", scale=figs.DIFFERENCE)
        .data[0]
        .colorscale
    )
    assert "B − A=" in trace.hovertemplate and "w=" not in trace.hovertemplate
    assert "&lt;b&gt;" in fig.layout.title.text  # a title is shown literally
    assert "red where B attends more" in subtitle_text(fig)
    assert any(t.name == figs.BLANK_NAME for t in fig.data)  # NaN stays grey, not 0 (white)
    same = cmp_figs.diff_figure(np.zeros((2, 2)), ["a", "b"], ["c", "d"], "encoder", "t")
    floor = cmp_figs.MIN_DIFF_RANGE
    assert (same.data[0].zmin, same.data[0].zmax) == (-floor, floor)


def test_difference_range_ignores_blanks_and_stretch_uses_a_percentile():
    diff = np.concatenate([np.full(200, 0.01), [0.9], [np.nan]])
    assert cmp_figs.diff_range(diff) == pytest.approx(0.9)
    assert cmp_figs.diff_range(diff, stretch=True) < 0.9
    assert cmp_figs.diff_range(np.full(3, np.nan)) == 1.0


def test_difference_grid_shares_one_diverging_scale():
    diff = np.random.default_rng(0).normal(0, 0.1, (2, 3, 4, 4)).astype(np.float32)
    tokens = ["a", "b", "c", "d"]
    fig = cmp_figs.diff_grid_figure(diff, tokens, tokens, "encoder", [0, 1])
    axis = fig.layout.coloraxis
    assert axis.cmin == -axis.cmax == pytest.approx(-np.abs(diff).max(), rel=1e-5)
    assert len(fig.data) == 2 * 3 and all(t.coloraxis == "coloraxis" for t in fig.data)
    assert fig.layout.title.text.startswith("B − A, every head")
    assert "B − A=" in fig.data[0].hovertemplate


def test_two_views_side_by_side_can_share_one_scale(home_translation):
    _, maps = home_translation
    view = select_view(maps, "cross", 0, "0")
    assert figs.view_figure(view, zmax=0.3).data[0].zmax == 0.3
    assert figs.view_figure(view, stretch=True, zmax=0.3).data[0].zmax == 0.3


def test_removed_heads_are_outlined_and_labelled_in_the_grid(home_translation):
    _, maps = home_translation
    fig = figs.grid_view_figure(maps, "cross", removed=[(0, 1), (1, 3)])
    marked = {(s.xref, s.yref) for s in fig.layout.shapes}
    assert marked == {("x2 domain", "y2 domain"), ("x8 domain", "y8 domain")}  # cells 2 and 8
    assert all(s.line.color == figs.REMOVED_COLOR for s in fig.layout.shapes)
    labels = [a for a in fig.layout.annotations if figs.REMOVED_WORD in (a.text or "")]
    assert {(a.xref, a.yref) for a in labels} == marked
    assert "head 1" in {a.text for a in fig.layout.annotations}  # the titles are kept


def test_removed_heads_of_other_layers_are_not_marked_in_one_layer(home_translation):
    _, maps = home_translation
    fig = figs.grid_view_figure(maps, "cross", layers=[1], removed=[(0, 1), (1, 3)])
    assert [(s.xref, s.yref) for s in fig.layout.shapes] == [("x4 domain", "y4 domain")]
    assert not figs.grid_view_figure(maps, "cross").layout.shapes


BPE_SENTENCE = "the@@ re@@ mark@@ able cat@@ s were sit@@ ting on the mat@@ s in it ."


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_grid_labels_of_a_16_piece_sentence_never_crowd_a_cell(heads):
    tokens = BPE_SENTENCE.split()
    assert len(tokens) == 16
    weights = np.full((2, heads, 16, 16), 1 / 16, dtype=np.float32)
    layout = figs.grid_figure(weights, tokens, tokens, "encoder").layout
    shown = len(layout.xaxis.tickvals)
    assert shown == len(layout.xaxis.ticktext) <= figs.grid_x_ticks(heads)
    cell_px = figs.GRID_PLOT_PX / heads
    assert cell_px / shown >= figs.TICK_GAP_PX  # upright labels this far apart do not overlap
    assert shown >= 2


def test_a_four_head_grid_names_every_token_of_an_eleven_token_sentence():
    """Labels tilted 45° fitted 7 under a 4-head cell: every other token of a 12-token
    sentence went unnamed. Upright labels fit 11."""
    tokens = ["i", "think", "we", "should", "go", "to", "the", "beach", "now", ".", "<eos>"]
    weights = np.full((2, 4, 11, 11), 1 / 11, dtype=np.float32)
    layout = figs.grid_figure(weights, tokens, tokens, "encoder").layout
    assert list(layout.xaxis.ticktext) == [
        t.replace("<", "&lt;").replace(">", "&gt;") for t in tokens
    ]


def test_grid_tick_labels_are_short():
    tokens = ["internationalisation", "a", "b"]
    layout = figs.grid_figure(np.full((1, 1, 3, 3), 1 / 3), tokens, tokens, "encoder").layout
    assert layout.xaxis.ticktext[0] == "internat…"[: figs.GRID_TICK_CHARS - 1] + "…"
    assert all(len(t) <= figs.GRID_TICK_CHARS for t in layout.xaxis.ticktext)


# ----------------------------------------------------------------------------- built unchecked


def test_a_checked_figure_refuses_a_property_plotly_does_not_know(monkeypatch):
    from core.figures import plain

    def trace() -> dict:  # (a validation takes "type" out of the dict it is given)
        return {"type": "heatmap", "z": [[0.5]], "zzmax": 1}

    monkeypatch.setenv(plain.CHECK_ENV, "1")
    with pytest.raises(ValueError, match="zzmax"):
        plain.figure([trace()], {})
    monkeypatch.setenv(plain.CHECK_ENV, "0")
    assert plain.figure([trace()], {}).data[0].type == "heatmap"  # the server trusts its own


def test_maps_built_unchecked_are_the_checked_ones_on_the_shipped_model(monkeypatch):
    """The server builds its maps without Plotly's validation (4-15 times faster): every map
    and grid of the shipped model's translations, of every kind, with <bos>/<eos> hidden or
    not, stretched or not, with heads removed, is the figure a validated build gives."""
    import json

    import plotly.io as pio

    from core.attention.maps import SentenceMaps
    from core.figures import plain
    from core.model.checked_translation import translate_sentence
    from core.model.parts import DecodeSettings
    from core.model.studio_model import StudioModel
    from tests.helpers import SHIPPED

    if not SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    lm = StudioModel.load(SHIPPED)
    sentences = ["we are cold .", "i think that we should go to the beach tomorrow ."]
    every = [
        SentenceMaps.from_translation(translate_sentence(lm, s, DecodeSettings()))
        for s in sentences
    ]

    def figures() -> list[dict]:
        out = []
        for m in every:
            for kind in ("encoder", "decoder_self", "cross"):
                for hide in (False, True):
                    for stretch in (False, True):
                        view = select_view(m, kind, 1, "0", hide)
                        out.append(figs.view_figure(view, stretch))
                        out.append(figs.grid_view_figure(m, kind, hide, None, stretch, [(0, 1)]))
                        out.append(figs.grid_view_figure(m, kind, hide, [1], stretch, [(1, 3)]))
        z = np.full((3, 4), 0.25, dtype=np.float32)
        z[1] = np.nan  # a blank row, written across
        out.append(figs.heatmap_figure(z, list("abc"), list("wxyz"), "cross", blank={1: "<bos>"}))
        out.append(
            figs.grid_figure(
                z[None, None] - 0.5, list("abc"), list("wxyz"), "encoder", scale=figs.DIFFERENCE
            )
        )
        return [json.loads(pio.to_json(f, validate=False)) for f in out]

    monkeypatch.setenv(plain.CHECK_ENV, "1")
    checked = figures()
    monkeypatch.setenv(plain.CHECK_ENV, "0")
    assert figures() == checked
