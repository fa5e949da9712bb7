"""Tests for core.attention.maps: one sentence's maps, views cut from them, CSV and decoding
playback."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest
import torch

from core.attention import maps as mp
from core.attention.head_stats import rollout
from core.attention.kinds import KINDS
from core.model.decode import prepare_source, teacher_forced
from core.model.parts import TranslationError


def _maps(cross: np.ndarray, src: list[str], out: list[str]) -> mp.SentenceMaps:
    """SentenceMaps around a hand-made cross map (1, 1, T, S); the other kinds are uniform."""
    s, t = len(src), len(out)
    enc = np.full((1, 1, s, s), 1 / s, dtype=np.float32)
    dec = np.tril(np.ones((t, t), dtype=np.float32))
    dec = (dec / dec.sum(-1, keepdims=True))[None, None]
    return mp.SentenceMaps(
        enc, dec, np.asarray(cross, dtype=np.float32), src, out, ["<bos>"] + out[:-1]
    )


# ----------------------------------------------------------------------------- maps and views


def test_sentence_maps_shapes_and_axes(home_translation):
    t, maps = home_translation
    s, n = len(t.src_tokens), len(t.output_tokens)
    assert maps.encoder.shape == (2, 4, s, s) and maps.encoder.dtype == np.float32
    assert maps.decoder_self.shape == (2, 4, n, n)
    assert maps.cross.shape == (2, 4, n, s)
    assert maps.tokens("encoder") == (t.src_tokens, t.src_tokens)
    assert maps.tokens("decoder_self") == (t.output_tokens, ["<bos>"] + t.tokens)
    assert maps.tokens("cross") == (t.output_tokens, t.src_tokens)
    for kind in KINDS:
        q, k = maps.tokens(kind)
        assert maps.weights(kind).shape[-2:] == (len(q), len(k))
        np.testing.assert_allclose(maps.weights(kind).sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(maps.decoder_self, k=1) == 0)  # causal: masked cells are exactly 0
    with pytest.raises(ValueError, match="kind"):
        maps.weights("sideways")


def test_select_view_head_mean_max_and_rollout(home_translation):
    _, maps = home_translation
    np.testing.assert_array_equal(mp.select_view(maps, "cross", 1, 2).weights, maps.cross[1, 2])
    np.testing.assert_allclose(
        mp.select_view(maps, "cross", 0, "mean").weights, maps.cross[0].mean(0), rtol=1e-6
    )
    np.testing.assert_allclose(
        mp.select_view(maps, "decoder_self", 1, "max").weights, maps.decoder_self[1].max(0)
    )
    roll = mp.select_view(maps, "encoder", 1, "rollout")
    np.testing.assert_allclose(roll.weights, rollout(maps.encoder)[1], rtol=1e-5)
    assert "rollout through layers 0–1" in roll.title and roll.note == ""


@pytest.mark.parametrize(
    ("kind", "layer", "head", "error"),
    [
        ("cross", 0, "rollout", ValueError),
        ("cross", 5, "0", IndexError),
        ("cross", 0, "4", IndexError),
        ("cross", 0, "median", IndexError),
    ],
)
def test_select_view_rejects_impossible_views(home_translation, kind, layer, head, error):
    with pytest.raises(error):
        mp.select_view(home_translation[1], kind, layer, head)


def test_hiding_specials_drops_columns_and_renormalises_rows():
    cross = np.array(
        [
            [
                [
                    [0.5, 0.25, 0.25],  # "a b <eos>"
                    [0.0, 0.0, 1.0],
                ]
            ]
        ]
    )  # all on <eos>: blank (NaN) and named, never a silent row of zeros
    maps = _maps(cross, ["a", "b", "<eos>"], ["x", "<eos>"])
    view = mp.select_view(maps, "cross", 0, 0, hide=True)
    assert view.key_tokens == ["a", "b"] and view.note.startswith(mp.HIDDEN_NOTE)
    np.testing.assert_allclose(view.weights[0], [2 / 3, 1 / 3], rtol=1e-6)
    assert np.isnan(view.weights[1]).all() and view.blank == {1: "<eos>"}
    assert "row 1 (<eos>) attends only to <eos>: left blank" in view.note
    self_view = mp.select_view(maps, "decoder_self", 0, 0, hide=True)
    assert self_view.key_tokens == ["x"]  # <bos> hidden from the decoder's keys
    assert np.isnan(self_view.weights[0]).all() and self_view.weights[1] == 1.0
    assert self_view.blank == {0: "<bos>"}
    assert "row 0 (x) attends only to <bos>: left blank" in self_view.note
    assert mp.select_view(maps, "cross", 0, 0).blank == {}  # nothing hidden, nothing blank


def test_decoder_step_zero_is_blank_not_zero_when_bos_is_hidden(home_translation):
    """Output step 0 reads only <bos>: hidden, its row has nothing left to renormalise."""
    _, maps = home_translation
    view = mp.select_view(maps, "decoder_self", 0, 1, hide=True)
    assert np.isnan(view.weights[0]).all() and not np.isnan(view.weights[1:]).any()
    np.testing.assert_allclose(np.nansum(view.weights[1:], -1), 1.0, rtol=1e-5)
    assert view.blank == {0: "<bos>"} and "row 0 (je) attends only to <bos>" in view.note
    frame = pd.read_csv(io.BytesIO(mp.view_csv(view)), keep_default_na=False)
    first, rest = frame[frame["query_index"] == 0], frame[frame["query_index"] > 0]
    assert (first["weight"] == "").all() and (first["note"] != "").all()
    assert "all weight on hidden <bos>" in first["note"].iloc[0]
    assert (rest["note"] == "").all() and rest["weight"].astype(float).notna().all()


def test_blank_rows_of_some_heads_only_say_so():
    weights = np.array([[[[0.0, 1.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.5, 0.5]]]])  # (2, 1, 2, 2)
    cut = mp.hide_columns(weights, ["p", "q"], ["a", "<eos>"], hide=True)
    assert cut.blank == {0: "<eos>"} and cut.keys == ["a"]
    assert "row 0 (p) attends only to <eos> in some heads: left blank" in cut.note
    assert np.isnan(cut.weights[0, 0, 0]).all() and cut.weights[1, 0, 0] == 1.0


def test_weights_frame_long_form():
    weights = np.arange(6, dtype=float).reshape(2, 3)
    frame = mp.weights_frame(weights, ["le", "chat"], ["the", "cat", "<eos>"])
    assert len(frame) == 2 * 3
    columns = ["query_index", "query_token", "key_index", "key_token", "weight", "note"]
    assert list(frame.columns) == columns
    last = frame.iloc[-1]
    assert (last["query_token"], last["key_token"], last["weight"]) == (
        "chat",
        "<eos>",
        5.0,
    )


def test_view_csv_has_one_row_per_cell(home_translation):
    view = mp.select_view(home_translation[1], "cross", 0, 0)
    lines = mp.view_csv(view).decode().splitlines()
    assert lines[0] == "query_index,query_token,key_index,key_token,weight,note"
    assert len(lines) == 1 + view.weights.size


FORMULAS = ['=hyperlink("http://x")', "+cmd", "-1+2", "@sum(1)", "\tx", "\rx"]


def test_csv_cells_never_start_a_formula():
    """OWASP: a token starting with = + - @ TAB or CR is written after a ' (text, not a formula)."""
    tokens = [*FORMULAS, "ok", "<eos>"]
    view = mp.View("encoder", np.eye(len(tokens), dtype=np.float32), tokens, tokens, "t")
    frame = pd.read_csv(io.BytesIO(mp.view_csv(view)), keep_default_na=False)
    cells = set(frame["query_token"]) | set(frame["key_token"])
    assert cells == {"'" + t for t in FORMULAS} | {"ok", "<eos>"}
    assert not any(c.startswith(mp.FORMULA_STARTS) for c in cells)


NAME_OK = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("checkpoints/fra-eng-small.pt", "I'm home.", "cross", 1, "2"),
            "fra-eng-small_im-home_cross_layer1_head2",
        ),
        (
            ("runs/tiny/best.pt", "go .", "encoder", 0, "rollout"),
            "tiny-best_go_encoder_layer0_rollout",
        ),
        (
            (
                "checkpoints/m.pt",
                "Crème brûlée, s’il vous plaît!",
                "decoder_self",
                None,
                None,
                "grid",
            ),
            "m_creme-brulee-sil-vous-plait_decoder-self_grid",
        ),
        (
            ("checkpoints/m.pt", "你好 <b>**x**</b>", "cross", 0, "mean"),
            "m_b-x-b_cross_layer0_mean",
        ),
        (("checkpoints/m.pt", "日本語", "cross", 0, 0), "m_cross_layer0_head0"),
        (
            ("../../etc/passwd", "../../x/..\\y", "cross", 0, "1"),
            "etc-passwd_x-y_cross_layer0_head1",
        ),
        (("", "", None, None, None, ""), "model"),
        (
            ("checkpoints/m.pt", "hi", None, 2, None, "step 3 candidates"),
            "m_hi_layer2_step-3-candidates",
        ),
    ],
)
def test_export_name_is_a_safe_slug(args, expected):
    assert mp.export_name(*args) == expected


def test_export_name_drops_whole_words_to_stay_short():
    words = [f"word{i}" for i in range(300)]  # a 1,500-character sentence
    name = mp.export_name(
        "checkpoints/fra-eng-small.pt", " ".join(words), "decoder_self", 1, "2", "output"
    )
    assert NAME_OK.match(name) and len(name) <= mp.EXPORT_NAME_CHARS
    model, sentence, *rest = name.split("_")
    assert model == "fra-eng-small" and rest == ["decoder-self", "layer1", "head2", "output"]
    assert sentence.split("-") == words[: len(sentence.split("-"))]  # whole words, in order
    huge = mp.export_name("checkpoints/" + "x" * 500 + ".pt", "a" * 500 + " end", "cross")
    assert huge == "model_cross"  # a word longer than the limit is dropped, never cut


@pytest.mark.parametrize(
    "text",
    ["../../..", 'a/b\\c:d*e?f"g<h>i|j', "\x00\n\t", "é" * 200, "x " * 900],
    ids=["dots", "path-characters", "control-characters", "one-long-accented-word", "long"],
)
def test_export_name_never_holds_path_characters(text):
    name = mp.export_name(text, text, "cross", 0, text, text)
    assert NAME_OK.match(name) and len(name) <= mp.EXPORT_NAME_CHARS


def test_head_options_offer_rollout_only_for_the_encoder():
    assert mp.head_options("encoder", 2) == ["0", "1", "mean", "max", "rollout"]
    assert mp.head_options("cross", 2) == ["0", "1", "mean", "max"]


# ----------------------------------------------------------------------------- playback


@pytest.mark.parametrize("step", [0, 2, 3])
def test_playback_rows_slices_and_masks_future(step):
    rng = np.random.default_rng(2)
    dec = rng.random((2, 3, 4, 4))  # (L, H, T, T)
    cross = rng.random((2, 3, 4, 5))  # (L, H, T, S)
    self_row, cross_row = mp.playback_rows(dec, cross, step)
    assert self_row.shape == (2, 3, 4)
    np.testing.assert_array_equal(self_row[..., : step + 1], dec[:, :, step, : step + 1])
    assert not self_row[..., step + 1 :].any()
    np.testing.assert_array_equal(cross_row, cross[:, :, step, :])
    assert dec[:, :, step, step + 1 :].all()  # the input itself is left untouched


def test_playback_rows_rejects_step_past_the_end():
    with pytest.raises(IndexError):
        mp.playback_rows(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 2)), 3)


def test_playback_rows_match_the_full_maps(home_translation):
    t, maps = home_translation
    for step in range(len(t.output_tokens)):
        p = mp.playback_step(maps, t.topk, step, 1)
        np.testing.assert_array_equal(p.cross, maps.cross[1, :, step])
        np.testing.assert_array_equal(p.self_row, maps.decoder_self[1, :, step, : step + 1])
        assert p.self_keys == t.decoder_inputs[: step + 1]
        assert p.prefix == t.output_tokens[: step + 1] and p.produced == t.output_tokens[step]
        assert p.topk[0][0] == p.produced  # greedy: the most likely candidate was chosen
    with pytest.raises(IndexError):
        mp.playback_step(maps, t.topk, len(t.output_tokens), 0)
    with pytest.raises(IndexError):
        mp.playback_step(maps, t.topk, 0, 2)


def test_free_running_maps_equal_one_pass_over_the_models_own_output(tiny_model, home_translation):
    t, maps = home_translation
    ids, _, _, _ = prepare_source("i'm home .", tiny_model.src_vocab, 512)
    out_ids = tiny_model.tgt_vocab.encode(t.output_tokens)
    _, forced = teacher_forced(tiny_model.model, torch.tensor([ids]), out_ids)
    np.testing.assert_allclose(maps.cross, forced.cross[:, 0].numpy(), atol=1e-5)
    np.testing.assert_allclose(maps.decoder_self, forced.decoder_self[:, 0].numpy(), atol=1e-5)


def test_teacher_forced_maps_follow_the_reference(tiny_model, home_translation):
    forced = mp.teacher_forced_maps(tiny_model, "i'm home .", "je suis à la maison .")
    assert forced.output_tokens == ["je", "suis", "à", "la", "maison", ".", "<eos>"]
    assert forced.decoder_inputs == ["<bos>", "je", "suis", "à", "la", "maison", "."]
    assert forced.cross.shape == (2, 4, 7, 4) and forced.decoder_self.shape == (2, 4, 7, 7)
    same = mp.teacher_forced_maps(tiny_model, "i'm home .", "je suis chez moi .")
    np.testing.assert_allclose(same.cross, home_translation[1].cross, atol=1e-5)
    with pytest.raises(TranslationError, match="reference is empty"):
        mp.teacher_forced_maps(tiny_model, "i'm home .", "  ")


@pytest.mark.parametrize(
    ("asked", "shown"),
    [
        (("encoder", 0, "rollout"), ("cross", 0, "mean")),  # the decoder has no rollout
        (("cross", 9, "3"), ("cross", 1, "3")),  # the layer clamped to the model's
        (("decoder_self", 1, "max"), ("decoder_self", 1, "max")),
        (("cross", 0, "99"), ("cross", 0, "mean")),
    ],
)
def test_decoder_view_is_the_nearest_decoder_view(home_translation, asked, shown):
    _, maps = home_translation
    assert mp.decoder_view(maps, *asked) == shown


def test_head_row_and_short_titles(home_translation):
    from core.attention.head_stats import head_row, head_table
    from core.attention.kinds import short_title

    _, maps = home_translation
    table = head_table(maps, "cross")
    chosen = table[(table["layer"] == 1) & (table["head"] == 2)]
    assert len(chosen) == 1 and head_row(maps, "cross", 1, 2).equals(chosen.iloc[0])
    titles = [short_title(k) for k in KINDS]
    assert titles == ["Encoder self-attention", "Decoder self-attention", "Cross attention"]
