"""Tests for core.attention.head_stats: hand-made attention maps with known answers."""

import math

import numpy as np
import pytest

from core.attention import head_stats as hs
from core.attention.sentence_maps import SentenceMaps

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
    out = hs.aggregate(heads, how)
    assert out.shape == (1, 1, 2, 2)
    np.testing.assert_allclose(out[0, 0], expected)


def test_aggregate_rejects_unknown_method():
    with pytest.raises(ValueError, match="mean"):
        hs.aggregate(np.ones((1, 2, 2, 2)), "median")


@pytest.mark.parametrize("add_residual", [True, False])
def test_rollout_of_identity_stays_identity(add_residual):
    eye = np.broadcast_to(np.eye(3), (2, 4, 3, 3))  # (L, H, T, T)
    out = hs.rollout(eye, add_residual=add_residual)
    assert out.shape == (2, 3, 3)
    np.testing.assert_allclose(out, np.broadcast_to(np.eye(3), (2, 3, 3)))


def test_rollout_matches_hand_computed_product():
    w1 = np.array([[1.0, 0.0], [1.0, 0.0]])  # layer 1: everyone reads token 0
    w2 = np.array([[0.0, 1.0], [0.0, 1.0]])  # layer 2: everyone reads token 1
    heads = np.stack([np.stack([w1, w1]), np.stack([w2, w2])])  # (2, 2, 2, 2)
    a1 = np.array([[1.0, 0.0], [0.5, 0.5]])  # 0.5 W1 + 0.5 I
    a2 = np.array([[0.5, 0.5], [0.0, 1.0]])  # 0.5 W2 + 0.5 I
    out = hs.rollout(heads)
    np.testing.assert_allclose(out[0], a1)
    np.testing.assert_allclose(out[1], a2 @ a1)  # [[0.75, 0.25], [0.5, 0.5]]
    np.testing.assert_allclose(out[1], [[0.75, 0.25], [0.5, 0.5]])
    np.testing.assert_allclose(out.sum(axis=-1), 1.0)


def test_hide_special_renormalises_rows():
    weights = np.array(
        [
            [0.5, 0.25, 0.25, 0.0],
            [0.1, 0.3, 0.1, 0.5],
            [0.5, 0.0, 0.0, 0.5],  # all mass on hidden keys: NaN, never a silent zero row
        ]
    )
    out, kept = hs.hide_special(weights, TOKENS4)
    assert kept == [1, 2]
    np.testing.assert_allclose(out[:2], [[0.5, 0.5], [0.75, 0.25]])
    assert np.isnan(out[2]).all() and not np.isnan(out[:2]).any()


def test_hide_special_blanks_rows_with_only_rounding_left():
    weights = np.array([[1.0 - 1e-9, 1e-9, 0.0, 0.0]])  # float noise is not attention
    out, _ = hs.hide_special(weights, TOKENS4)
    assert np.isnan(out).all()


def test_hide_special_rows_sum_to_one_on_full_maps():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 3, 4, 4))
    out, kept = hs.hide_special(weights, TOKENS4, hide=("<bos>",))
    assert kept == [1, 2, 3]
    assert out.shape == (2, 3, 4, 3)
    np.testing.assert_allclose(out.sum(axis=-1), 1.0)


ABCD = ["a", "b", "c", "d"]
EOS_COLUMN = np.tile([0.0, 0.0, 0.0, 1.0], (4, 1))
BOS_COLUMN = np.tile([1.0, 0.0, 0.0, 0.0], (4, 1))
HALF_HALF = np.tile([0.5, 0.5, 0.0, 0.0], (4, 1))
HEAD_CASES = [
    pytest.param(np.eye(4), ABCD, "diagonal", 1.0, hs.LABELS["diagonal"], id="diagonal"),
    pytest.param(_shifted_identity(4), ABCD, "previous", 1.0, hs.LABELS["previous"], id="prev"),
    pytest.param(EOS_COLUMN, TOKENS4, "eos", 1.0, hs.LABELS["sink"], id="eos-sink"),
    pytest.param(BOS_COLUMN, TOKENS4, "bos", 1.0, hs.LABELS["sink"], id="bos-sink"),
    pytest.param(
        np.full((4, 4), 0.25), ABCD, "entropy", math.log(4), hs.LABELS["broad"], id="uniform"
    ),
    pytest.param(HALF_HALF, ABCD, "entropy", math.log(2), hs.LABELS["mixed"], id="mixed"),
]


@pytest.mark.parametrize(("matrix", "tokens", "column", "value", "label"), HEAD_CASES)
def test_head_stats_labels(matrix, tokens, column, value, label):
    stats = hs.head_stats(_one_head(matrix), "encoder", tokens, tokens)
    assert len(stats) == 1
    row = stats.iloc[0]
    assert row[column] == pytest.approx(value)
    assert row["label"] == label
    assert math.isnan(row["monotonicity"])  # only defined for cross attention


def test_head_stats_one_row_per_layer_and_head():
    rng = np.random.default_rng(1)
    weights = rng.random((3, 2, 4, 4))
    stats = hs.head_stats(weights, "decoder_self", TOKENS4, TOKENS4)
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
    stats = hs.head_stats(_one_head(cross), "cross", ["le", "chat", "noir", "."], src)
    assert stats.loc[0, "monotonicity"] == pytest.approx(expected)


def test_cross_monotonicity_is_nan_when_argmax_is_constant():
    cross = np.tile([0.1, 0.8, 0.1], (3, 1))
    stats = hs.head_stats(_one_head(cross), "cross", ["a", "b", "c"], ["x", "y", "z"])
    assert math.isnan(stats.loc[0, "monotonicity"])


def test_cross_diagonal_uses_proportional_position():
    cross = np.zeros((3, 4))
    cross[[0, 1, 2], [0, 2, 3]] = 1.0  # round(i * 3 / 2): 0, 1.5 -> 2, 3
    stats = hs.head_stats(_one_head(cross), "cross", list("abc"), list("wxyz"))
    assert stats.loc[0, "diagonal"] == pytest.approx(1.0)
    assert stats.loc[0, "label"] == "monotonic (follows source order)"


@pytest.mark.parametrize("matrix", [np.eye(4), _shifted_identity(4)], ids=["diag", "prev"])
def test_cross_heads_never_get_self_attention_labels(matrix):
    stats = hs.head_stats(_one_head(matrix), "cross", list("abcd"), list("wxyz"))
    label = stats.loc[0, "label"]
    assert "diagonal" not in label and "previous" not in label
    assert math.isnan(stats.loc[0, "previous"])


def test_cross_far_from_the_rescaled_diagonal_is_not_monotonic():
    cross = np.zeros((4, 8))
    cross[np.arange(4), [7, 5, 2, 0]] = 1.0  # reversed: far from 0, 2, 5, 7
    stats = hs.head_stats(_one_head(cross), "cross", list("abcd"), list("stuvwxyz"))
    assert stats.loc[0, "diagonal"] == pytest.approx(0.0)
    assert stats.loc[0, "label"] != hs.LABELS["monotonic"]


def test_a_short_cross_map_near_the_diagonal_but_out_of_order_is_not_monotonic():
    """On 4 source tokens the band within one key of the diagonal covers most columns: the
    shipped model's 8 cross heads all sat in it, one with monotonicity 0.15."""
    cross = np.zeros((6, 4))
    cross[np.arange(6), [1, 0, 2, 1, 3, 2]] = 0.7  # strongest keys zig-zag
    cross[np.arange(6), [0, 1, 1, 2, 2, 3]] += 0.3
    stats = hs.head_stats(_one_head(cross), "cross", list("abcdef"), list("wxyz"))
    assert stats.loc[0, "diagonal"] >= hs.PATTERN_SHARE  # the share alone would say monotonic
    assert stats.loc[0, "monotonicity"] < hs.MONOTONIC_RHO
    assert stats.loc[0, "label"] != hs.LABELS["monotonic"]


def test_a_diagonal_head_reads_diagonal_on_the_full_map():
    """Issue 53: hiding <bos> once shifted the columns under the statistic, and this
    diagonal head read "previous 1.00 — sub-diagonal". Statistics have no hide option now."""
    queries = ["le", "chat", "noir", "<eos>"]  # the outputs
    keys = ["<bos>", "le", "chat", "noir"]  # the decoder's inputs
    own = np.eye(4)  # each position on its own input: the diagonal with <bos> shown
    stats = hs.head_stats(_one_head(own), "decoder_self", queries, keys)
    assert stats.loc[0, "label"] == hs.LABELS["diagonal"]
    assert stats.loc[0, "previous"] == pytest.approx(0.0)
    assert stats.loc[0, "bos"] == pytest.approx(0.25)  # measured, never "None"


def test_a_sink_head_stays_a_sink_head():
    weights = np.tile([0.0, 0.0, 0.0, 1.0], (4, 1))
    weights[:3, :3] += 0.3 * np.eye(4)[:3, :3]
    weights /= weights.sum(axis=-1, keepdims=True)  # mostly on <eos>, the rest on itself
    tokens = ["a", "b", "c", "<eos>"]
    stats = hs.head_stats(_one_head(weights), "encoder", tokens, tokens)
    assert stats.loc[0, "label"] == hs.LABELS["sink"]


def test_head_table_columns_per_kind_and_labels():
    n = 5
    prev = _shifted_identity(n)
    diag = np.eye(n)
    tokens = ["a", "b", "c", "d", "<eos>"]
    enc = np.stack([prev, diag])[None].astype(np.float32)  # (1, 2, 5, 5)
    maps = SentenceMaps(enc, enc, enc, tokens, tokens, ["<bos>"] + tokens[:-1])
    table = hs.head_table(maps, "encoder")
    assert list(table["label"]) == [hs.LABELS["previous"], hs.LABELS["diagonal"]]
    assert "monotonicity" not in table and "bos" not in table
    flipped = np.stack([diag[::-1], diag])[None].astype(np.float32)  # reversed, in order
    maps = SentenceMaps(enc, enc, flipped, tokens, tokens, ["<bos>"] + tokens[:-1])
    cross_table = hs.head_table(maps, "cross")
    assert cross_table["monotonicity"].tolist() == pytest.approx([-1.0, 1.0])
    assert "previous" not in cross_table and "near diagonal" in cross_table
    assert "bos" in hs.head_table(maps, "decoder_self")
