"""Attention read both ways (awesome-align's extraction on one map), its cut chosen on the dev
gold set, and the supervised head it makes better than eflomal on both gold sets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import align as align_cmd
from core.alignment import both_ways, extract
from core.alignment.aer import score
from core.alignment.extract import BOTH_WAYS, WHOLE, PairMaps, Reader, links, pair_maps, readers
from core.alignment.gold import GOLD_DIR, read_links, read_pairs, studio_gold, write_links
from core.alignment.grid import alignment_grid
from core.alignment.held_out import DEV, HELD_OUT, gold_rows, held_out_gold
from core.alignment.symmetrised import symmetrised
from core.corpus.splits import load_splits
from core.model.checkpoints import trained_data
from core.model.studio_model import StudioModel
from tests import helpers
from tests.test_align_command import files  # noqa: F401  (a fixture)

CHECKPOINTS = helpers.ROOT / "checkpoints"
SHIPPED = ("fra-eng-small.pt", "fra-eng-small-aligned.pt", "fr-en-small-aligned.pt")


def one_map(w: np.ndarray) -> PairMaps:
    """A pair of one layer and head whose (T - 1, S - 1) weights are ``w``: each piece its word;
    an <eos> column of zeros and a last row are added as the reader drops them."""
    t, s = w.shape
    cross = np.zeros((1, 1, t + 1, s + 1))  # (L, H, T, S)
    cross[0, 0, :t, :s] = w
    return PairMaps(cross, np.arange(s), np.arange(t))


def test_a_link_is_a_weight_both_its_row_and_its_column_choose():
    w = np.array(  # rows: target words, columns: source words
        [
            [0.90, 0.10, 0.00],  # target 0 -> source 0
            [0.50, 0.50, 0.00],  # target 1 splits between sources 0 and 1
            [0.05, 0.45, 0.50],  # target 2 -> sources 1 and 2
        ]
    )
    share = extract.shares(w, both_ways=True)
    expected = (w / w.sum(1, keepdims=True)) * (w / w.sum(0, keepdims=True))  # row x column
    np.testing.assert_allclose(share, expected)
    found = links(one_map(w), Reader(0, 0), both_ways=True)  # the cut BOTH_WAYS
    assert found == {(s, t) for t, s in zip(*np.nonzero(expected >= BOTH_WAYS))}
    assert found == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)}  # target 1 and 2: two words each
    assert (1, 0) not in found and (0, 2) not in found  # weak in its row or its column
    assert links(one_map(w), Reader(0, 0)) == {(0, 0), (0, 1), (2, 2)}  # argmax: one each
    assert links(one_map(w), Reader(0, 0), 0.5, both_ways=True) == {(0, 0), (2, 2)}  # own cut


def test_a_word_nobody_chooses_stays_unlinked():
    w = np.full((4, 2), 0.5)  # four target words share two source words evenly
    assert links(one_map(w), Reader(0, 0)) == {(0, t) for t in range(4)}  # argmax links all
    assert links(one_map(w), Reader(0, 0), both_ways=True) == set()  # 1/2 x 1/4 < the cut


def test_the_grid_read_both_ways_scores_each_reader_s_own_links(tiny_model):
    pairs, gold = studio_gold()
    grid = alignment_grid(tiny_model, pairs, gold, both_ways=True)
    maps = pair_maps(tiny_model, pairs, english_first=True)
    cfg = tiny_model.cfg
    assert len(grid.rows) == len(readers(cfg.num_decoder_layers, cfg.num_heads))
    for row in grid.rows[:6]:
        own = score([links(m, row.reader(), None, True) for m in maps], gold)
        assert (row.aer, row.precision, row.recall) == (own.aer, own.precision, own.recall)
    argmax = alignment_grid(tiny_model, pairs, gold)
    assert [r.aer for r in grid.rows] != [r.aer for r in argmax.rows]


def test_the_cut_is_the_lowest_mean_over_models_and_a_tie_takes_the_smaller():
    tables = [{0.1: 0.3, 0.15: 0.2, 0.2: 0.25}, {0.1: 0.2, 0.15: 0.2, 0.2: 0.1}]
    cut, means = both_ways.chosen_cut(tables)
    assert means == pytest.approx({0.1: 0.25, 0.15: 0.2, 0.2: 0.175}) and cut == 0.2
    assert both_ways.chosen_cut([{0.1: 0.2, 0.2: 0.2}])[0] == 0.1
    assert BOTH_WAYS in both_ways.CUTS


def test_a_model_s_table_is_its_best_reader_at_each_cut(tiny_model):
    pairs, gold = studio_gold()
    table = both_ways.best_aer_by_cut(tiny_model, pairs[:30], gold[:30], (0.1, 0.3))
    for cut, aer in table.items():
        grid = alignment_grid(tiny_model, pairs[:30], gold[:30], None, cut, both_ways=True)
        assert aer == grid.best.aer


def test_the_command_reads_both_ways_and_agrees_with_the_library(
    tiny_checkpoint,
    tiny_model,
    files,  # noqa: F811
    capsys,
):
    pairs_file, gold_file = files
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs_file)]
    assert align_cmd.main([*args, "--gold", str(gold_file), "--both-ways"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    pairs, gold = read_pairs(pairs_file), read_links(gold_file)
    grid = alignment_grid(tiny_model, pairs, gold, both_ways=True)
    assert [r["aer"] for r in rows[:-1]] == [r.aer for r in grid.rows]
    assert rows[-1]["best"]["aer"] == grid.best.aer
    assert align_cmd.main([*args, "--both-ways", "--layer", "1", "--head", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    best = alignment_grid(tiny_model, *studio_gold(), [Reader(1, 2)], both_ways=True).best
    maps = pair_maps(tiny_model, pairs, english_first=True)
    assert printed == [write_links(links(m, best.reader(), None, True)) for m in maps]
    assert align_cmd.main([*args, "--both-ways", "--threshold", "1.5"]) == 2
    assert "--threshold" in capsys.readouterr().err


def test_both_directions_combine_the_readers_read_both_ways(tiny_model, reverse_run):
    reverse = StudioModel.load(reverse_run / "last.pt")
    pairs, gold = studio_gold()
    rows = symmetrised(tiny_model, reverse, pairs[:40], gold[:40], None, True)
    assert all(r["forward_reader"].endswith(", both ways") for r in rows)
    forward = alignment_grid(tiny_model, pairs[:40], gold[:40], both_ways=True).best
    assert rows[0]["combination"] == "forward" and rows[0]["aer"] == forward.aer


def test_the_dev_set_is_validation_pairs_no_other_gold_set_holds(fra_eng):
    pairs, gold = held_out_gold(fra_eng, DEV)
    assert len(pairs) == len(gold) == 100
    numbers = {n for n, _, _ in gold_rows(DEV)}
    assert not numbers & {n for n, _, _ in gold_rows(HELD_OUT)}
    studio = {(tuple(s), tuple(t)) for s, t in studio_gold()[0]}
    for name in SHIPPED:
        meta = StudioModel.load(CHECKPOINTS / name).meta
        splits = load_splits(trained_data(meta, str(fra_eng)))
        turned = meta["data_config"].get("direction") == "fr-en"
        val = {
            (tuple(t), tuple(s)) if turned else (tuple(s), tuple(t)) for s, t in splits.val.pairs
        }
        for s, t in pairs:
            assert (tuple(s), tuple(t)) in val and (tuple(s), tuple(t)) not in studio


def tuple_pair(pair) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A pair of token lists as a pair of tuples (a set's item)."""
    return tuple(pair[0]), tuple(pair[1])


def eflomal(reference: str) -> float:
    """eflomal's AER (its median run) that bench/alignment.py wrote for a gold set."""
    return json.loads((GOLD_DIR / reference).read_text())["aer"]


@pytest.mark.slow
def test_the_shipped_models_choose_the_cut_on_the_dev_set(fra_eng):
    pairs, gold = held_out_gold(fra_eng, DEV)
    tables = [
        both_ways.best_aer_by_cut(StudioModel.load(CHECKPOINTS / n), pairs, gold) for n in SHIPPED
    ]
    assert both_ways.chosen_cut(tables)[0] == BOTH_WAYS


@pytest.mark.slow
def test_the_supervised_head_read_both_ways_aligns_better_than_eflomal(fra_eng):
    lm = StudioModel.load(CHECKPOINTS / "fr-en-small-aligned.pt")
    head = [Reader(0, 0, WHOLE)]  # the head trained toward eflomal's links, as it was trained
    sets = {"reference.json": studio_gold(), "tatoeba-test.reference.json": held_out_gold(fra_eng)}
    for reference, (pairs, gold) in sets.items():
        both = alignment_grid(lm, pairs, gold, head, both_ways=True).rows[0]
        argmax = alignment_grid(lm, pairs, gold, head).rows[0]
        assert both.aer <= eflomal(reference) and both.aer < argmax.aer
