"""The AER grid (core.alignment.grid) and ``python -m core.align``: lines, best, bad files."""

from __future__ import annotations

import json

import pytest

from core import align as align_cmd
from core.alignment import grid as grid_module
from core.alignment.extract import Reader, links, pair_maps, readers
from core.alignment.gold import GoldLinks, read_links, read_pairs, studio_gold, write_links
from core.alignment.grid import alignment_grid
from core.model.studio_model import StudioModel
from tests import helpers

PAIRS = "i'm home . ||| je suis chez moi .\ngo . ||| va !\n"
GOLD = "0-0 0-1 1-2 1p3 2-4\n0-0 1-1\n"


@pytest.fixture
def files(tmp_path):
    """(pairs file, gold file) of two hand-aligned pairs."""
    return helpers.gold_files(tmp_path, PAIRS, GOLD)


def test_the_grid_scores_every_reader_and_the_best_is_the_lowest_aer(tiny_model):
    pairs, gold = studio_gold()
    grid = alignment_grid(tiny_model, pairs, gold)
    cfg = tiny_model.model.cfg
    assert len(grid.rows) == len(readers(cfg.num_decoder_layers, cfg.num_heads))
    assert grid.best.aer == min(r.aer for r in grid.rows)
    assert all(0 <= r.aer <= 1 and r.pairs == len(pairs) for r in grid.rows)
    again = alignment_grid(tiny_model, pairs, gold, [grid.best.reader()])
    assert again.rows[0] == grid.best  # a row names the reader it scored


def test_perfect_links_score_zero_and_the_grid_uses_them(tiny_model, monkeypatch):
    gold = [GoldLinks({(0, 0), (1, 1)}), GoldLinks({(0, 0)})]
    perfect = [g.sure for g in gold]
    monkeypatch.setattr(grid_module, "predicted", lambda maps, r, t=None, w=False: perfect)
    grid = alignment_grid(tiny_model, [(["a", "b"], ["x", "y"]), (["c"], ["z"])], gold)
    assert {r.aer for r in grid.rows} == {0.0}


def test_without_gold_the_command_prints_one_pharaoh_line_per_pair(tiny_checkpoint, files, capsys):
    pairs, _ = files
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs)]
    assert align_cmd.main([*args, "--layer", "1", "--head", "mean", "--mode", "awo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    lm = StudioModel.load(tiny_checkpoint)
    maps = pair_maps(
        lm, [(["i'm", "home", "."], ["je", "suis", "chez", "moi", "."]), (["go", "."], ["va", "!"])]
    )
    assert lines == [write_links(links(m, Reader(1, None, "awo"))) for m in maps]


def test_with_gold_the_command_prints_the_grid_then_the_best(tiny_checkpoint, files, capsys):
    pairs, gold = files
    assert (
        align_cmd.main(
            ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs), "--gold", str(gold)]
        )
        == 0
    )
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    *grid, last = rows
    assert {"layer", "head", "mode", "aer", "precision", "recall", "pairs"} == set(grid[0])
    assert last["best"]["aer"] == min(r["aer"] for r in grid)
    assert {r["mode"] for r in grid} == {"awo", "awi"} and grid[0]["pairs"] == 2


def test_the_command_and_the_library_agree_on_every_figure(
    tiny_checkpoint, tiny_model, files, capsys
):
    pairs, gold = files
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs), "--gold", str(gold)]
    assert align_cmd.main([*args, "--mode", "awi"]) == 0
    printed = [json.loads(x) for x in capsys.readouterr().out.splitlines()[:-1]]
    grid = alignment_grid(tiny_model, read_pairs(pairs), read_links(gold))
    expected = [r.to_json() for r in grid.rows if r.mode == "awi"]
    assert printed == expected


@pytest.mark.parametrize(
    "pairs_text, gold_text, extra, message",
    [
        ("i'm home . ||| je suis là .\ngo .\n", "0-0\n0-0\n", [], "line 2"),
        (PAIRS, "0-0 9-9\n0-0\n", [], "out of range"),
        (PAIRS, "0-0\n", [], "2"),
        (PAIRS, "0-0 x\n0-0\n", [], "line 1"),
        (PAIRS, "1-1 1-2\n1-1\n", ["--one-indexed", "--layer", "5"], "--layer must be"),
        (PAIRS, GOLD, ["--mode", "sideways"], "--mode must be"),
        (PAIRS, GOLD, ["--threshold", "0"], "--threshold"),
    ],
)
def test_bad_files_and_flags_are_one_line_errors(
    tiny_checkpoint, tmp_path, capsys, pairs_text, gold_text, extra, message
):
    pairs, gold = tmp_path / "p.txt", tmp_path / "g.txt"
    pairs.write_text(pairs_text, encoding="utf-8")
    gold.write_text(gold_text, encoding="utf-8")
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs), "--gold", str(gold)]
    assert align_cmd.main([*args, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_one_indexed_gold_is_read_as_such(tiny_checkpoint, tmp_path, files, capsys):
    pairs, _ = files
    gold = tmp_path / "one.txt"
    gold.write_text("1-1 1-2 2-3 2p4 3-5\n1-1 2-2\n", encoding="utf-8")
    base = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs)]
    assert align_cmd.main([*base, "--gold", str(gold), "--one-indexed"]) == 0
    one = capsys.readouterr().out
    assert align_cmd.main([*base, "--gold", str(files[1])]) == 0
    assert capsys.readouterr().out == one


def test_an_attribution_method_aligns_through_the_same_reader(tiny_checkpoint, files, capsys):
    """The attention "method" is the last layer's mean over heads: the same AER as that reader."""
    pairs, gold = files
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(pairs), "--gold", str(gold)]
    assert align_cmd.main([*args, "--method", "attention", "--method", "alti"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    by_method = {r["method"]: r for r in rows if "method" in r}
    last_mean = next(
        r
        for r in rows
        if r.get("layer") == 1 and r.get("head") == "mean" and r.get("mode") == "awo"
    )
    assert by_method["attention"]["aer"] == pytest.approx(last_mean["aer"])
    assert 0 <= by_method["alti"]["aer"] <= 1 and "best" in rows[-1]
    assert align_cmd.main([*args, "--method", "lime"]) == 2
    assert "unknown method" in capsys.readouterr().err
