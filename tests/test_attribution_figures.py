"""Tests for core.figures.attribution: the data behind each attribution chart."""

from __future__ import annotations

import numpy as np
import pytest

from core.attribution.explain import Explained, in_words
from core.attribution.faithfulness import DELETION_K, RANDOM, Faithfulness
from core.attribution.methods import Attribution
from core.figures import attribution as figs
from core.figures.labels import plotly_text

SOURCE = ["the", "cat", "sees", "the", "<b>dog</b>", "<eos>"]  # S = 6, "the" twice
OUTPUT = ["le", "chat", "voit", "le", "chien", "<eos>"]  # T = 6, "le" twice
PREFIX = ["<bos>", *OUTPUT[:-1]]


def explained(source=SOURCE, output=OUTPUT, shares=None, seed=0) -> Explained:
    """Random causal contributions over [source ; prefix], rows summing to 1."""
    S, T = len(source), len(output)
    rng = np.random.default_rng(seed)
    z = rng.random((T, S + T)).astype(np.float32)  # (T, S + T)
    z[:, S:] *= np.tril(np.ones((T, T), dtype=np.float32))  # row t reads prefix 0..t
    z /= z.sum(1, keepdims=True)
    if shares is not None:  # rescale the two blocks to the given source shares
        src, pre = z[:, :S], z[:, S:]
        z = np.concatenate(
            [
                src / src.sum(1, keepdims=True) * np.asarray(shares)[:, None],
                pre / pre.sum(1, keepdims=True) * (1 - np.asarray(shares))[:, None],
            ],
            axis=1,
        )
    prefix = ["<bos>", *output[:-1]]
    return Explained(Attribution("alti", z, S), list(source), prefix, list(output))


def heatmap(fig):
    """The figure's contribution trace (not the grey one over blank cells)."""
    (trace,) = [t for t in fig.data if t.type == "heatmap" and t.name != "blank"]
    return trace


def test_a_divider_separates_the_source_block_from_the_prefix_block():
    fig = figs.contribution_figure(explained(), "ALTI+")
    (line,) = [s for s in fig.layout.shapes if s.type == "line"]
    assert line.x0 == line.x1 == len(SOURCE) - 0.5  # between <eos> (source) and <bos>
    assert (line.xref, line.yref, line.y0, line.y1) == ("x", "paper", 0, 1)
    labels = {a.text: a.x for a in fig.layout.annotations}
    assert labels == {"source": (len(SOURCE) - 1) / 2, "target prefix": len(SOURCE) + 2.5}


def test_repeated_tokens_keep_their_own_columns_and_rows():
    e = explained()
    fig = figs.contribution_figure(e, "ALTI+")
    x, y = fig.layout.xaxis, fig.layout.yaxis
    assert len(set(x.tickvals)) == len(SOURCE) + len(PREFIX) == len(x.tickvals)
    assert len(set(y.tickvals)) == len(OUTPUT) == len(y.tickvals)
    assert list(heatmap(fig).x) == list(x.tickvals) and list(heatmap(fig).y) == list(y.tickvals)
    assert list(x.ticktext) == [plotly_text(t) for t in SOURCE + PREFIX]
    assert "&lt;b&gt;dog&lt;/b&gt;" in x.ticktext  # a token is text, never HTML
    assert x.title.text and y.title.text and y.autorange == "reversed"


def test_prefix_cells_an_output_token_cannot_read_are_blank():
    fig = figs.contribution_figure(explained(), "ALTI+")
    z = np.asarray(heatmap(fig).z, dtype=float)  # (T, S + T)
    S, T = len(SOURCE), len(OUTPUT)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # prefix j > t
    assert np.isnan(z[:, S:][future]).all()
    assert not np.isnan(z[:, :S]).any() and not np.isnan(z[:, S:][~future]).any()
    (grey,) = [t for t in fig.data if t.name == "blank"]  # drawn grey, unlike a 0
    assert np.array_equal(~np.isnan(np.asarray(grey.z, dtype=float)), np.isnan(z))


def test_a_merged_word_may_read_the_first_pieces_of_its_own_prefix_word():
    pieces = explained(["ch", "##at", "<eos>"], ["le", "ch", "##at", "<eos>"])
    words = in_words(pieces)
    assert words.output == ["le", "chat", "<eos>"] and words.prefix == ["<bos>", "le", "chat"]
    visible = figs.visible_prefix(pieces, words=True)
    assert visible.tolist() == [
        [True, False, False],
        [True, True, True],  # "chat": its piece "##at" read "ch", part of prefix word "chat"
        [True, True, True],
    ]
    assert figs.visible_prefix(pieces).tolist() == np.tril(np.ones((4, 4), bool)).tolist()
    z, S = figs.contribution_matrix(words, visible), len(words.source)  # (3, S + 3)
    assert np.isnan(z[0, S + 1 :]).all() and not np.isnan(z[0, : S + 1]).any()
    assert not np.isnan(z[1:]).any()


def test_colour_scale_tops_at_the_largest_share_or_the_99th_percentile():
    e = explained()
    top = float(np.max(e.contributions))
    assert heatmap(figs.contribution_figure(e, "x")).zmax == pytest.approx(top)
    assert heatmap(figs.contribution_figure(e, "x", stretch=True)).zmax < top


def test_tokens_drawn_mostly_from_the_prefix_are_flagged_in_their_own_colour():
    e = explained(shares=[0.9, 0.3, 0.6, 0.49, 0.5, 0.1])
    (bars,) = figs.source_share_figure(e, "Source share").data
    assert np.allclose(np.asarray(bars.y, dtype=float), [0.9, 0.3, 0.6, 0.49, 0.5, 0.1])
    flag, fine = figs.FLAG_COLOR, figs.SHARE_COLOR
    assert list(bars.marker.color) == [fine, flag, fine, flag, fine, flag]
    assert len(set(bars.x)) == len(OUTPUT)  # the two "le" stay two bars
    fig = figs.source_share_figure(e, "Source share")
    assert "3 of 6 flagged" in fig.layout.title.subtitle.text
    assert [s.y0 for s in fig.layout.shapes] == [0.5]  # the threshold line


def faithfulness(rows) -> Faithfulness:
    """A Faithfulness of hand-made rows (method, rho, interval, deletion)."""
    return Faithfulness(
        [
            {
                "method": m,
                "name": m.upper(),
                "spearman": rho,
                "spearman_ci95": ci,
                "deletion": drops,
                "sentences": 7,
                "seconds": 0.1,
            }
            for m, rho, ci, drops in rows
        ],
        sentences=8,
        tokens=40,
    )


RESULT = faithfulness(
    [
        ("alti", 0.5, [0.4, 0.6], [0.3, 0.5, 0.6]),
        ("attention", 0.3, [0.2, 0.4], [0.2, 0.35, None]),
        (RANDOM, 0.01, None, [0.1, 0.2, 0.3]),
    ]
)


def test_the_deletion_curve_has_a_line_per_method_and_a_dashed_baseline():
    fig = figs.deletion_figure(RESULT)
    assert [t.name for t in fig.data] == ["ALTI", "ATTENTION", "RANDOM"]
    assert [t.line.dash for t in fig.data] == [None, None, "dash"]
    assert all(list(t.x) == list(DELETION_K) for t in fig.data)
    assert np.isnan(np.asarray(fig.data[1].y, dtype=float)[2])  # no sentence had 3 words
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_the_faithfulness_table_keeps_the_ranking_with_intervals_and_drops():
    table = figs.faithfulness_table(RESULT)
    assert list(table["method"]) == ["ALTI", "ATTENTION", "RANDOM"]
    assert list(table.columns) == [
        "method",
        "Spearman ρ",
        "ρ 95% low",
        "ρ 95% high",
        "drop k=1",
        "drop k=2",
        "drop k=3",
        "sentences",
    ]
    assert table.loc[0, "ρ 95% low"] == 0.4 and np.isnan(table.loc[2, "ρ 95% high"])
    assert np.isnan(table.loc[1, "drop k=3"]) and table.loc[2, "sentences"] == 7
