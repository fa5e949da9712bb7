"""Alignments read from cross-attention (core.alignment.extract): rows, modes, pieces, readers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.alignment import extract as ex
from core.model.decode import teacher_forced


def pair(cross: np.ndarray, src_pieces, tgt_pieces) -> ex.PairMaps:
    """A PairMaps from hand-written weights (L, H, T, S) and pieces."""
    return ex.PairMaps(cross, ex.piece_words(src_pieces), ex.piece_words(tgt_pieces))


def one_hot_rows(rows: list[int], S: int) -> np.ndarray:
    """(1, 1, T, S) weights: row t puts all its weight on column rows[t]."""
    w = np.zeros((1, 1, len(rows), S), dtype=np.float32)
    for t, s in enumerate(rows):
        w[0, 0, t, s] = 1.0
    return w


def test_awo_reads_the_predicting_step_and_awi_the_next():
    # source: a b <eos> (S = 3); target: x y (+ <eos> row) -> T = 3 rows
    m = pair(one_hot_rows([1, 0, 1], 3), ["a", "b"], ["x", "y"])
    assert ex.links(m, ex.Reader(0, 0, "awo")) == {(1, 0), (0, 1)}
    assert ex.links(m, ex.Reader(0, 0, "awi")) == {(0, 0), (1, 1)}


def test_eos_is_never_aligned():
    w = one_hot_rows([2, 2, 2], 3) * 0.9  # most weight on <eos>
    w[..., 1] = 0.1
    m = pair(w, ["a", "b"], ["x", "y"])
    for mode in ex.MODES:
        assert ex.links(m, ex.Reader(0, 0, mode)) == {(1, 0), (1, 1)}  # argmax of real words
    m = pair(one_hot_rows([2, 2, 2], 3), ["a", "b"], ["x", "y"])  # all of it on <eos>
    assert ex.links(m, ex.Reader(0, 0, "awo")) == set()


def test_bpe_pieces_link_their_words():
    # source pieces: un ##believ ##able ok <eos>; target: in ##croy ##able (3 pieces, 1 word)
    src, tgt = ["un", "##believ", "##able", "ok"], ["in", "##croy", "##able"]
    m = pair(one_hot_rows([0, 2, 1, 3], 5), src, tgt)
    assert ex.links(m, ex.Reader(0, 0, "awo")) == {(0, 0)}  # every piece -> word 0 -> word 0
    m = pair(one_hot_rows([3, 3, 0, 0], 5), src, tgt)
    assert ex.links(m, ex.Reader(0, 0, "awo")) == {(1, 0), (0, 0)}


def test_a_threshold_links_every_word_above_it():
    w = np.zeros((1, 1, 2, 4), dtype=np.float32)
    w[0, 0, 0] = [0.45, 0.35, 0.1, 0.1]  # 0.1 on <eos> is dropped, then renormalised
    w[0, 0, 1] = [0.0, 0.0, 0.0, 1.0]
    m = pair(w, ["a", "b", "c"], ["x"])
    assert ex.links(m, ex.Reader(0, 0, "awo"), threshold=0.35) == {(0, 0), (1, 0)}
    assert ex.links(m, ex.Reader(0, 0, "awo"), threshold=0.6) == set()


def test_readers_cover_every_layer_head_mean_and_mode():
    rs = ex.readers(2, 3)
    assert len(rs) == 2 * (2 * (3 + 1) + 1)
    assert {(r.layer_label, r.head_label) for r in rs} >= {(0, "0"), (1, "mean"), ("all", "mean")}


def test_means_average_heads_and_layers():
    w = np.zeros((2, 2, 2, 3), dtype=np.float32)
    w[0, 0, 0, 0] = w[0, 1, 0, 0] = 1.0  # layer 0: both heads on a
    w[1, :, 0, 1] = 1.0  # layer 1: both heads on b
    w[:, :, 1, 2] = 1.0
    m = pair(w, ["a", "b"], ["x"])
    assert np.allclose(ex.read(m, ex.Reader(0, None))[0], [1.0, 0.0])
    assert np.allclose(ex.read(m, ex.Reader(None, None))[0], [0.5, 0.5])


def test_teacher_forced_maps_equal_the_model_s_own(tiny_model):
    src, tgt = ["i'm", "home", "."], ["je", "suis", "chez", "moi", "."]
    (m,) = ex.pair_maps(tiny_model, [(src, tgt)])
    (w,) = ex.encoded(tiny_model, [(src, tgt)])  # a WordPair: its out_ids end with <eos>
    assert w.out_ids[-1] == tiny_model.eos_id and (w.src_start, w.tgt_start) == (0, 0)
    _, maps = teacher_forced(tiny_model.model, torch.tensor([w.src_ids]), w.out_ids)
    assert np.allclose(m.cross, maps.cross[:, 0].numpy(), atol=1e-6)
    assert m.cross.shape[2:] == (len(tgt) + 1, len(src) + 1)


def test_a_translated_sentence_aligns_like_its_teacher_forced_pair(tiny_model, home_translation):
    t, maps = home_translation
    m = ex.from_sentence(maps.cross, maps.src_tokens, maps.output_tokens)
    (forced,) = ex.pair_maps(tiny_model, [(t.src_tokens[:-1], t.output_tokens[:-1])])
    for r in ex.readers(maps.layers("cross"), maps.heads):
        assert ex.links(m, r) == ex.links(forced, r)


@pytest.mark.parametrize("mode", ex.MODES)
def test_batched_pairs_equal_one_at_a_time(tiny_model, mode):
    pairs = [(["i'm", "home", "."], ["je", "suis", "là", "."]), (["go", "."], ["va", "!"])]
    together = ex.pair_maps(tiny_model, pairs)
    alone = [ex.pair_maps(tiny_model, [p])[0] for p in pairs]
    for a, b in zip(together, alone):
        assert np.allclose(a.cross, b.cross, atol=1e-5)


def test_a_translation_cut_before_eos_leaves_its_last_word_unread_in_awi():
    cross = one_hot_rows([0, 1], 3)  # two output pieces, no <eos> row
    m = ex.from_sentence(cross, ["a", "b", "<eos>"], ["x", "y"])
    assert ex.links(m, ex.Reader(0, 0, "awo")) == {(0, 0), (1, 1)}
    assert ex.links(m, ex.Reader(0, 0, "awi")) == {(1, 0)}  # y's reading step never came
