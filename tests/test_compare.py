"""Tests for core.attention.comparison: differences of two models' maps, two sentences on one
merged axis (shared tokens matched, differing ones marked, none dropped)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from core.attention import comparison as compare
from core.attention.kinds import KINDS
from core.attention.maps import HIDDEN_NOTE, teacher_forced_maps
from core.attention.sentence_maps import SentenceMaps
from core.model.checked_translation import DEFAULT_SENTENCE


def rows_of(shape: tuple[int, ...], seed: int, causal: bool = False) -> np.ndarray:
    """Random attention rows (each sums to 1) of ``shape``; ``causal``: none after the row."""
    w = np.random.default_rng(seed).random(shape).astype(np.float32) + 0.01
    if causal:
        w = w * np.tril(np.ones(shape[-2:], dtype=np.float32))
    return w / w.sum(axis=-1, keepdims=True)


def fake_maps(src: list[str], out: list[str], layers: int = 2, heads: int = 4, seed: int = 0):
    """SentenceMaps of random rows for a source and an output (both ending in <eos>)."""
    s, t = len(src), len(out)
    return SentenceMaps(
        rows_of((layers, heads, s, s), seed),
        rows_of((layers, heads, t, t), seed + 1, causal=True),
        rows_of((layers, heads, t, s), seed + 2),
        src,
        out,
        ["<bos>", *out[:-1]],
    )


SRC = ["i'm", "home", ".", "<eos>"]
OUT = ["je", "suis", "chez", "moi", ".", "<eos>"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("head", ["0", "3", "mean", "max"])
def test_a_model_compared_with_itself_differs_nowhere(kind, head):
    maps = fake_maps(SRC, OUT)
    pair = compare.pair_view(maps, maps, kind, 1, head)
    assert pair.diff.shape == pair.a.weights.shape == maps.weights(kind).shape[2:]
    assert np.all(pair.diff == 0) and pair.largest == 0
    grid = compare.pair_grid(maps, maps, kind)
    assert grid.diff.shape == maps.weights(kind).shape and np.all(grid.diff == 0)
    assert pair.only_a == pair.only_b == {"query": [], "key": []}


def test_difference_is_b_minus_a_cell_by_cell():
    a = fake_maps(SRC, OUT, seed=0)
    b = fake_maps(SRC, OUT, seed=5)
    pair = compare.pair_view(a, b, "cross", 1, "2")
    np.testing.assert_allclose(pair.diff, b.cross[1, 2] - a.cross[1, 2], atol=1e-6)
    np.testing.assert_allclose(pair.a.weights, a.cross[1, 2])
    np.testing.assert_allclose(pair.b.weights, b.cross[1, 2])
    assert pair.largest == pytest.approx(np.abs(b.cross[1, 2] - a.cross[1, 2]).max())
    b.cross[0, 1, 2, 3] += 0.5  # B attends more to key 3 at row 2: a positive difference
    grid = compare.pair_grid(a, b, "cross")
    assert grid.diff.shape == (2, 4, len(OUT), len(SRC)) and grid.layers == [0, 1]
    assert grid.diff[0, 1, 2, 3] == pytest.approx(b.cross[0, 1, 2, 3] - a.cross[0, 1, 2, 3])
    assert grid.diff[0, 1, 2, 3] > 0


def test_models_of_different_sizes_compare_what_both_have():
    small = fake_maps(SRC, OUT, layers=2, heads=4)
    wide = fake_maps(SRC, OUT, layers=6, heads=8, seed=9)
    assert compare.common_size(small, wide, "encoder") == (2, 4)
    note = compare.size_note(small, wide, "encoder")
    assert "A has 2 layers × 4 heads" in note and "B has 6 × 8" in note
    assert "layers 0–1 and heads 0–3" in note
    assert compare.size_note(small, small, "encoder") == ""
    assert compare.common_view(small, wide, "encoder", 5, "7") == (1, "0")
    assert compare.common_view(small, wide, "encoder", 5, "mean") == (1, "mean")
    pair = compare.pair_view(small, wide, "encoder", 5, "7")  # clamped to layer 1, head 0
    np.testing.assert_allclose(pair.diff, wide.encoder[1, 0] - small.encoder[1, 0], atol=1e-6)
    assert "layer 1, head 0" in pair.a.title
    assert compare.pair_grid(small, wide, "cross").diff.shape == (2, 4, len(OUT), len(SRC))
    assert compare.pair_grid(small, wide, "cross", layers=[1, 5]).layers == [1]


def test_different_outputs_cannot_be_subtracted_without_alignment():
    a = fake_maps(SRC, OUT)
    b = fake_maps(SRC, ["je", "suis", "à", "la", "maison", ".", "<eos>"], seed=3)
    with pytest.raises(compare.CompareError, match="different tokens.*same output"):
        compare.pair_view(a, b, "cross", 0, "0")
    with pytest.raises(compare.CompareError):
        compare.pair_grid(a, b, "decoder_self")
    encoder = compare.pair_view(a, b, "encoder", 0, "0")  # the same source: comparable
    np.testing.assert_allclose(encoder.diff, b.encoder[0, 0] - a.encoder[0, 0], atol=1e-6)


def test_merged_positions_keep_every_token_of_both_in_order():
    a = ["i", "am", "home", ".", "<eos>"]
    b = ["i", "am", "cold", "at", "home", ".", "<eos>"]
    pos_a, pos_b, labels = compare.merged_positions(a, b)
    assert [i for i in pos_a if i is not None] == list(range(len(a)))  # every token of A
    assert [j for j in pos_b if j is not None] == list(range(len(b)))  # and of B, in order
    assert labels == ["i", "am", "cold (B only)", "at (B only)", "home", ".", "<eos>"]
    crossed = compare.merged_positions(["x", "y"], ["y", "x"])[2]  # never crossing: one match
    assert crossed == ["y (B only)", "x", "y (A only)"]
    assert compare.merged_positions(["go"], [])[:2] == ([0], [None])


B_SRC = ["i'm", "cold", ".", "<eos>"]
B_OUT = ["j'ai", "froid", ".", "<eos>"]


def test_two_sentences_keep_every_row_of_both_in_cross_attention():
    """Issue #21, item 9: the words that differ used to be dropped, leaving only ./<eos>.
    Issue 53: runs of different lengths are not paired by place ("je ≠ j'ai" meant nothing)."""
    a, b = fake_maps(SRC, OUT), fake_maps(B_SRC, B_OUT, seed=4)
    pair = compare.pair_view(a, b, "cross", 0, "0", by_token=True)
    assert (
        pair.a.query_tokens
        == pair.b.query_tokens
        == [
            "je (A only)",
            "suis (A only)",
            "chez (A only)",
            "moi (A only)",
            "j'ai (B only)",
            "froid (B only)",
            ".",
            "<eos>",
        ]
    )
    assert pair.a.key_tokens == ["i'm", "home ≠ cold", ".", "<eos>"]  # one word for one word
    rows_a, rows_b = [0, 1, 2, 3, 6, 7], [4, 5, 6, 7]
    np.testing.assert_allclose(pair.a.weights[rows_a], a.cross[0, 0])  # all of A's rows
    np.testing.assert_allclose(pair.b.weights[rows_b], b.cross[0, 0])
    assert np.isnan(pair.b.weights[[0, 1, 2, 3]]).all() and np.isnan(pair.a.weights[[4, 5]]).all()
    expected = b.cross[0, 0][[2, 3]] - a.cross[0, 0][[4, 5]]
    np.testing.assert_allclose(pair.diff[[6, 7]], expected, atol=1e-6)
    assert np.isnan(pair.diff[:6]).all()
    assert pair.only_a == {
        "query": ["je (0)", "suis (1)", "chez (2)", "moi (3)"],
        "key": ["home (1)"],
    }
    assert pair.only_b == {"query": ["j'ai (0)", "froid (1)"], "key": ["cold (1)"]}
    grid = compare.pair_grid(a, b, "cross", by_token=True)
    assert grid.diff.shape == (2, 4, 8, 4) and grid.query_tokens == pair.a.query_tokens
    np.testing.assert_allclose(grid.diff[0, 0], pair.diff, atol=1e-6, equal_nan=True)
    table = pd.read_csv(io.BytesIO(compare.pair_csv(pair)), keep_default_na=False)
    assert len(table) == 8 * 4 and set(table["query_token"]) >= {"chez (A only)", "j'ai (B only)"}
    missing = table[table["query_token"] == "moi (A only)"]
    assert (missing["weight_b"] == "").all() and (missing["b_minus_a"] == "").all()
    assert (missing["note"] == "B: no such row or column in sentence B").all()


def test_two_sentences_share_encoder_rows_and_mark_the_rest():
    a, b = fake_maps(SRC, OUT), fake_maps(B_SRC, B_OUT, seed=4)
    pair = compare.pair_view(a, b, "encoder", 0, "1", by_token=True)
    assert pair.a.query_tokens == pair.a.key_tokens == ["i'm", "home ≠ cold", ".", "<eos>"]
    np.testing.assert_allclose(pair.diff, b.encoder[0, 1] - a.encoder[0, 1], atol=1e-6)
    assert pair.only_a == {"query": ["home (1)"], "key": ["home (1)"]}
    assert pair.only_b == {"query": ["cold (1)"], "key": ["cold (1)"]}


def test_sentences_with_nothing_in_common_are_compared_place_by_place():
    a = fake_maps(["go", "."], ["va", "!"])
    b = fake_maps(["run", "!"], ["cours", "?"], seed=2)
    pair = compare.pair_view(a, b, "cross", 0, "0", by_token=True)
    assert pair.a.query_tokens == ["va ≠ cours", "! ≠ ?"]
    assert pair.a.key_tokens == ["go ≠ run", ". ≠ !"]
    np.testing.assert_allclose(pair.diff, b.cross[0, 0] - a.cross[0, 0], atol=1e-6)


def test_hidden_specials_are_hidden_on_both_sides_before_aligning():
    a, b = fake_maps(SRC, OUT), fake_maps(SRC, OUT, seed=8)
    pair = compare.pair_view(a, b, "cross", 0, "0", hide=True)
    assert pair.a.key_tokens == ["i'm", "home", "."]
    np.testing.assert_allclose(pair.a.weights.sum(axis=-1), 1.0, atol=1e-5)
    grid = compare.pair_grid(a, b, "decoder_self", hide=True)
    assert grid.key_tokens == OUT[:-1] and grid.note == HIDDEN_NOTE
    assert np.isnan(grid.diff[:, :, 0]).all()  # step 0 reads only <bos>: blank on both sides


def test_pair_csv_has_both_weights_and_the_difference_and_is_formula_safe():
    a = fake_maps(["=cmd()", ".", "<eos>"], ["-1", "<eos>"])
    b = fake_maps(["=cmd()", ".", "<eos>"], ["-1", "<eos>"], seed=6)
    pair = compare.pair_view(a, b, "cross", 0, "0")
    table = pd.read_csv(io.BytesIO(compare.pair_csv(pair)), keep_default_na=False)
    assert list(table.columns) == [
        "query_index",
        "query_token",
        "key_index",
        "key_token",
        "weight_a",
        "weight_b",
        "b_minus_a",
        "note",
    ]
    assert len(table) == 2 * 3
    assert set(table["key_token"]) == {"'=cmd()", ".", "<eos>"}
    assert set(table["query_token"]) == {"'-1", "<eos>"}
    np.testing.assert_allclose(table["b_minus_a"], table["weight_b"] - table["weight_a"], atol=1e-6)


def test_blank_rows_leave_an_empty_difference_and_a_note():
    a, b = fake_maps(SRC, OUT), fake_maps(SRC, OUT, seed=2)
    pair = compare.pair_view(a, b, "decoder_self", 0, "0", hide=True)
    assert 0 in pair.a.blank and np.isnan(pair.diff[0]).all()
    table = pd.read_csv(io.BytesIO(compare.pair_csv(pair)), keep_default_na=False)
    first = table[table["query_index"] == 0]
    assert (first["b_minus_a"] == "").all()
    assert first["note"].str.startswith("A: all weight on hidden <bos>").all()
    assert "B: all weight on hidden <bos>" in first["note"].iloc[0]


def test_outputs_and_candidates_side_by_side(home_translation):
    t, _ = home_translation
    frame = compare.topk_pair_frame(t, t)
    assert len(frame) == len(t.output_tokens) and frame["same"].all()
    assert list(frame["A token"]) == t.output_tokens
    assert frame["A candidates"][0].startswith(t.topk[0][0][0])
    assert t.text == "je suis chez moi ."
    assert "same output" in compare.outputs_note(t.output_tokens, t.output_tokens)
    assert "teacher forcing" in compare.outputs_note(t.output_tokens, ["va", "<eos>"])
    formula = pd.DataFrame({"token": ["=1+1", "ok"], "n": [1, 2]})
    assert compare.frame_csv(formula).decode().splitlines()[1] == "'=1+1,1"


def test_forcing_a_model_on_its_own_output_gives_its_own_maps(tiny_model, home_translation):
    t, maps = home_translation
    forced = teacher_forced_maps(tiny_model, DEFAULT_SENTENCE, t.text)
    assert forced.output_tokens == maps.output_tokens
    pair = compare.pair_view(maps, forced, "cross", 1, "mean")
    assert np.abs(pair.diff).max() < 1e-4
    assert compare.unknown_words(tiny_model, "je suis zzz") == ["zzz"]


def test_words_not_in_the_vocabulary_are_named_once_with_a_count(tiny_model):
    """Issue 69, item 9: "Not in B's output vocabulary: kind, kind, kind…"."""
    said = compare.unknown_words(tiny_model, "kind kind je zzz kind")
    assert said == ["kind (×3)", "zzz"]


def test_an_empty_output_is_named_and_the_other_is_fed():
    """Issue 68, item 1: with T5 as A (an empty output) Compare said "The reference is empty:
    type the translation to force" though nothing was typed."""
    assert compare.fed_output({"A": "je suis", "B": "tu es"}, "A") == ("A", "")
    which, note = compare.fed_output({"A": "", "B": "tu es"}, "A")
    assert which == "B" and note.startswith("Model A's output is empty")
    which, note = compare.fed_output({"A": " ", "B": ""}, "B")
    assert which is None and "Both models' outputs are empty" in note


def test_a_suggested_second_sentence_shares_words():
    picked = compare.suggest_sentence("i'm home .", ["go .", "i'm cold .", "i'm home ."])
    assert picked == "i'm cold ."
    assert compare.suggest_sentence("go .", []) == ""
