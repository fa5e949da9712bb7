"""Tests for core.attention_view: hand-made attention maps with known answers."""

import math

import numpy as np
import pytest

from core import attention_view as av

TOKENS4 = ["<bos>", "le", "chat", "<eos>"]


def _one_head(matrix) -> np.ndarray:
    """Wrap a (Tq, Tk) matrix as (L=1, H=1, Tq, Tk)."""
    return np.asarray(matrix, dtype=np.float64)[None, None]


def _shifted_identity(n: int) -> np.ndarray:
    """Row i attends to i-1; row 0 attends to itself."""
    m = np.zeros((n, n))
    m[0, 0] = 1.0
    m[np.arange(1, n), np.arange(n - 1)] = 1.0
    return m


@pytest.mark.parametrize(
    ("how", "expected"),
    [("mean", [[0.5, 0.5], [0.25, 0.75]]), ("max", [[0.8, 0.8], [0.5, 1.0]])],
)
def test_aggregate_over_heads(how, expected):
    heads = np.array(
        [
            [[0.2, 0.8], [0.5, 0.5]],  # head 0
            [[0.8, 0.2], [0.0, 1.0]],  # head 1
        ]
    )[None]  # (1, 2, 2, 2)
    out = av.aggregate(heads, how)
    assert out.shape == (1, 1, 2, 2)
    np.testing.assert_allclose(out[0, 0], expected)


def test_aggregate_rejects_unknown_method():
    with pytest.raises(ValueError, match="mean"):
        av.aggregate(np.ones((1, 2, 2, 2)), "median")


@pytest.mark.parametrize("add_residual", [True, False])
def test_rollout_of_identity_stays_identity(add_residual):
    eye = np.broadcast_to(np.eye(3), (2, 4, 3, 3))  # (L, H, T, T)
    out = av.rollout(eye, add_residual=add_residual)
    assert out.shape == (2, 3, 3)
    np.testing.assert_allclose(out, np.broadcast_to(np.eye(3), (2, 3, 3)))


def test_rollout_matches_hand_computed_product():
    w1 = np.array([[1.0, 0.0], [1.0, 0.0]])  # layer 1: everyone reads token 0
    w2 = np.array([[0.0, 1.0], [0.0, 1.0]])  # layer 2: everyone reads token 1
    heads = np.stack([np.stack([w1, w1]), np.stack([w2, w2])])  # (2, 2, 2, 2)
    a1 = np.array([[1.0, 0.0], [0.5, 0.5]])  # 0.5 W1 + 0.5 I
    a2 = np.array([[0.5, 0.5], [0.0, 1.0]])  # 0.5 W2 + 0.5 I
    out = av.rollout(heads)
    np.testing.assert_allclose(out[0], a1)
    np.testing.assert_allclose(out[1], a2 @ a1)  # [[0.75, 0.25], [0.5, 0.5]]
    np.testing.assert_allclose(out[1], [[0.75, 0.25], [0.5, 0.5]])
    np.testing.assert_allclose(out.sum(axis=-1), 1.0)


def test_hide_special_renormalises_rows():
    weights = np.array(
        [
            [0.5, 0.25, 0.25, 0.0],
            [0.1, 0.3, 0.1, 0.5],
            [0.5, 0.0, 0.0, 0.5],  # all mass on hidden keys: stays 0
        ]
    )
    out, kept = av.hide_special(weights, TOKENS4)
    assert kept == [1, 2]
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.75, 0.25], [0.0, 0.0]])
    assert not np.isnan(out).any()


def test_hide_special_rows_sum_to_one_on_full_maps():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 3, 4, 4))
    out, kept = av.hide_special(weights, TOKENS4, hide=("<bos>",))
    assert kept == [1, 2, 3]
    assert out.shape == (2, 3, 4, 3)
    np.testing.assert_allclose(out.sum(axis=-1), 1.0)


ABCD = ["a", "b", "c", "d"]
EOS_COLUMN = np.tile([0.0, 0.0, 0.0, 1.0], (4, 1))
BOS_COLUMN = np.tile([1.0, 0.0, 0.0, 0.0], (4, 1))
HALF_HALF = np.tile([0.5, 0.5, 0.0, 0.0], (4, 1))
HEAD_CASES = [
    pytest.param(np.eye(4), ABCD, "diagonal", 1.0, "diagonal head", id="diagonal"),
    pytest.param(_shifted_identity(4), ABCD, "previous", 1.0, "previous-token head", id="prev"),
    pytest.param(EOS_COLUMN, TOKENS4, "eos", 1.0, "sink head", id="eos-sink"),
    pytest.param(BOS_COLUMN, TOKENS4, "bos", 1.0, "sink head", id="bos-sink"),
    pytest.param(np.full((4, 4), 0.25), ABCD, "entropy", math.log(4), "broad head", id="uniform"),
    pytest.param(HALF_HALF, ABCD, "entropy", math.log(2), "mixed", id="mixed"),
]


@pytest.mark.parametrize(("matrix", "tokens", "column", "value", "label"), HEAD_CASES)
def test_head_stats_labels(matrix, tokens, column, value, label):
    stats = av.head_stats(_one_head(matrix), "encoder", tokens, tokens)
    assert len(stats) == 1
    row = stats.iloc[0]
    assert row[column] == pytest.approx(value)
    assert row["label"] == label
    assert math.isnan(row["monotonicity"])  # only defined for cross attention


def test_head_stats_one_row_per_layer_and_head():
    rng = np.random.default_rng(1)
    weights = rng.random((3, 2, 4, 4))
    stats = av.head_stats(weights, "decoder_self", TOKENS4, TOKENS4)
    pairs = list(stats[["layer", "head"]].itertuples(index=False, name=None))
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    expected = {"layer", "head", "entropy", "diagonal", "previous", "eos", "bos"}
    assert expected | {"monotonicity", "label"} == set(stats.columns)


@pytest.mark.parametrize(
    ("argmax_keys", "expected"),
    [([0, 1, 3, 5], 1.0), ([5, 3, 1, 0], -1.0)],
)
def test_cross_monotonicity(argmax_keys, expected):
    cross = np.full((4, 6), 0.02)
    cross[np.arange(4), argmax_keys] = 0.9
    src = ["<bos>", "the", "black", "cat", "sat", "<eos>"]
    stats = av.head_stats(_one_head(cross), "cross", ["le", "chat", "noir", "."], src)
    assert stats.loc[0, "monotonicity"] == pytest.approx(expected)


def test_cross_monotonicity_is_nan_when_argmax_is_constant():
    cross = np.tile([0.1, 0.8, 0.1], (3, 1))
    stats = av.head_stats(_one_head(cross), "cross", ["a", "b", "c"], ["x", "y", "z"])
    assert math.isnan(stats.loc[0, "monotonicity"])


def test_cross_diagonal_uses_proportional_position():
    cross = np.zeros((3, 4))
    cross[[0, 1, 2], [0, 2, 3]] = 1.0  # round(i * 3 / 2): 0, 1.5 -> 2, 3
    stats = av.head_stats(_one_head(cross), "cross", list("abc"), list("wxyz"))
    assert stats.loc[0, "diagonal"] == pytest.approx(1.0)
    assert stats.loc[0, "label"] == "diagonal head"


@pytest.mark.parametrize("step", [0, 2, 3])
def test_playback_rows_slices_and_masks_future(step):
    rng = np.random.default_rng(2)
    dec = rng.random((2, 3, 4, 4))  # (L, H, T, T)
    cross = rng.random((2, 3, 4, 5))  # (L, H, T, S)
    self_row, cross_row = av.playback_rows(dec, cross, step)
    assert self_row.shape == (2, 3, 4)
    np.testing.assert_array_equal(self_row[..., : step + 1], dec[:, :, step, : step + 1])
    assert not self_row[..., step + 1 :].any()
    np.testing.assert_array_equal(cross_row, cross[:, :, step, :])
    assert dec[:, :, step, step + 1 :].all()  # the input itself is left untouched


def test_playback_rows_rejects_step_past_the_end():
    with pytest.raises(IndexError):
        av.playback_rows(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 2)), 3)


def test_unique_labels_keep_repeated_tokens_apart():
    labels = av.unique_labels(["the", "cat", "the"])
    assert len(set(labels)) == 3
    assert all("the" in labels[i] for i in (0, 2))


def test_weights_frame_long_form():
    weights = np.arange(6, dtype=float).reshape(2, 3)
    frame = av.weights_frame(weights, ["le", "chat"], ["the", "cat", "<eos>"])
    assert len(frame) == 2 * 3
    columns = ["query_index", "query_token", "key_index", "key_token", "weight"]
    assert list(frame.columns) == columns
    last = frame.iloc[-1]
    assert (last["query_token"], last["key_token"], last["weight"]) == (
        "chat",
        "<eos>",
        5.0,
    )


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "cross"])
def test_heatmap_figure_spec(kind):
    queries, keys = ["the", "cat", "the"], ["<bos>", "a", "a", "b"]
    weights = np.full((3, 4), 0.25)
    fig = av.heatmap_figure(weights, queries, keys, kind, zmax=0.6, note="hidden")
    trace = fig.data[0]
    assert np.asarray(trace.z).shape == (3, 4)
    assert np.asarray(trace.z).dtype == np.float32
    assert fig.layout.yaxis.autorange == "reversed"
    assert "query" in fig.layout.yaxis.title.text
    assert "key" in fig.layout.xaxis.title.text
    assert list(fig.layout.yaxis.ticktext) == queries
    assert list(fig.layout.xaxis.ticktext) == keys
    assert len(set(trace.y)) == 3 and len(set(trace.x)) == 4
    assert trace.zmax == 0.6
    assert "hidden" in fig.layout.title.subtitle.text


def test_heatmap_figure_rejects_mismatched_tokens():
    with pytest.raises(ValueError, match="tokens"):
        av.heatmap_figure(np.ones((2, 2)), ["a"], ["b", "c"], "encoder")


@pytest.mark.parametrize(("layers", "heads", "zmax"), [(1, 1, 1.0), (2, 3, 0.4)])
def test_grid_figure_one_coloraxis(layers, heads, zmax):
    tokens = ["<bos>", "the", "the", "<eos>"]
    weights = np.full((layers, heads, 4, 4), 0.25)
    fig = av.grid_figure(weights, tokens, tokens, "encoder", zmax=zmax)
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
    assert av.percentile_cap(diffuse) == pytest.approx(0.1)
    assert av.percentile_cap(np.zeros((2, 2))) == 1.0


def test_topk_figure_bars():
    fig = av.topk_figure(["le", "la", "<eos>"], [0.6, 0.3, 0.1])
    np.testing.assert_allclose(fig.data[0].x, [0.6, 0.3, 0.1], rtol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["le", "la", "<eos>"]
