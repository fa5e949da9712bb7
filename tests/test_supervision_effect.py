"""What alignment supervision changed: the supervised head and the best reader beside a plain
model's, on one gold set — the library, the command, the Attention page and the shipped pair."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from core import align
from core.alignment.gold import STUDIO_LINKS, STUDIO_PAIRS, read_links, read_pairs, studio_gold
from core.alignment.grid import AlignmentGrid, GridRow, alignment_grid
from core.alignment.supervision_effect import compared, supervision_effect
from core.model.checkpoints import atomic_save, read_checkpoint
from core.model.studio_model import StudioModel
from core.runs import catalogue
from tests import helpers

ROOT = Path(__file__).resolve().parents[1]
SUPERVISED = {"align_weight": 0.05, "align_layer": 1, "align_head": 2, "align_source": "t.links"}


def row(layer, head, mode, aer) -> GridRow:
    return GridRow(layer, str(head), mode, aer, 1 - aer, 1 - aer, 5)


def grid(aers: dict) -> AlignmentGrid:
    """A grid of two layers x two heads in both modes, AER 0.5 unless ``aers`` says."""
    rows = [
        row(layer, head, mode, aers.get((layer, head, mode), 0.5))
        for mode in ("awo", "awi")
        for layer in (0, 1)
        for head in (0, 1)
    ]
    return AlignmentGrid(rows, 0.0)


def test_the_supervised_head_and_each_best_reader_side_by_side():
    plain = grid({(1, 1, "awo"): 0.8, (0, 0, "awi"): 0.3})
    supervised = grid({(1, 1, "awo"): 0.1, (1, 1, "awi"): 0.6})
    rows = supervision_effect(plain, supervised, 1, 1)
    assert [r.reader for r in rows] == [
        "supervised head, AWO",
        "supervised head, AWI",
        "best reader",
    ]
    assert [round(r.change, 6) for r in rows] == [-0.7, 0.1, -0.2]
    assert (rows[2].plain.layer, rows[2].plain.head, rows[2].plain.mode) == (0, "0", "awi")
    assert (rows[2].supervised.layer, rows[2].supervised.head) == (1, "1")
    line = rows[0].to_json()
    assert line["plain"]["aer"] == 0.8 and line["supervised"]["aer"] == 0.1
    with pytest.raises(ValueError, match="no cross-attention layer 1 head 7"):
        supervision_effect(plain, supervised, 1, 7)


def supervised_copy(source: Path, path: Path, perturb: bool = True) -> Path:
    """A copy of a checkpoint recorded as trained with cross layer 1 head 2 aligned (and its
    weights moved a little, so that it reads differently from the original)."""
    ckpt = read_checkpoint(source)
    ckpt["train_config"] = {**ckpt["train_config"], **SUPERVISED}
    if perturb:
        gen = torch.Generator().manual_seed(0)
        for name, tensor in ckpt["state_dict"].items():
            if tensor.is_floating_point():
                noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float32)
                ckpt["state_dict"][name] = tensor + (0.3 * noise).to(tensor.dtype)
    atomic_save(ckpt, path)
    return path


def test_the_command_prints_what_compared_computes(tmp_path, tiny_checkpoint):
    sup = supervised_copy(tiny_checkpoint, tmp_path / "sup.pt")
    data, links = STUDIO_PAIRS, STUDIO_LINKS
    argv = ["--checkpoint", str(sup), "--data", str(data), "--gold", str(links)]
    lines = [
        json.loads(x)
        for x in align.run(
            align.build_parser().parse_args(argv + ["--compare-with", str(tiny_checkpoint)])
        )
    ]
    printed = [x["supervision"] for x in lines if "supervision" in x]
    lm, plain = StudioModel.load(sup), StudioModel.load(tiny_checkpoint)
    pairs_read, gold_read = read_pairs(data), read_links(links)
    expected = compared(lm, plain, pairs_read, gold_read, alignment_grid(lm, pairs_read, gold_read))
    assert printed == [r.to_json() for r in expected]
    assert [p["reader"] for p in printed][:2] == ["supervised head, AWO", "supervised head, AWI"]
    assert printed[0]["plain"]["layer"] == 1 and printed[0]["plain"]["head"] == "2"
    assert any(abs(p["change"]) > 0 for p in printed)  # the two models read differently


def test_the_command_refuses_a_model_without_a_supervised_head(tmp_path, tiny_checkpoint, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("i'm home . ||| je suis chez moi .\n")
    links = tmp_path / "gold.txt"
    links.write_text("0-0 1-3 2-4\n")
    code = align.main(
        [
            "--checkpoint",
            str(tiny_checkpoint),
            "--data",
            str(pairs),
            "--gold",
            str(links),
            "--compare-with",
            str(tiny_checkpoint),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no head trained to align" in err


def test_the_plain_shipped_model_stays_the_default_beside_the_supervised_one(studio_dirs):
    ckpts = studio_dirs["checkpoints"]
    aligned = supervised_copy(ckpts / catalogue.SHIPPED_NAME, ckpts / catalogue.ALIGNED_NAME)
    os.utime(aligned, (2e9, 2e9))  # newer than the plain one
    entries = catalogue.list_models(ckpts, studio_dirs["runs"])
    assert entries[0].key == f"checkpoints/{catalogue.ALIGNED_NAME}"  # newest first
    assert entries[0].origin == "shipped model"
    assert catalogue.default_entry(entries).key == f"checkpoints/{catalogue.SHIPPED_NAME}"


def test_the_alignment_section_shows_what_supervision_changed(studio_dirs):
    ckpts = studio_dirs["checkpoints"]
    plain_path = ckpts / catalogue.SHIPPED_NAME
    aligned = supervised_copy(plain_path, ckpts / catalogue.ALIGNED_NAME)
    query = {"section": "alignment", "sentence": "i'm home ."}
    at = helpers.run_page_script("attention.py", query)  # the plain model: points to the other
    helpers.assert_clean(at)
    assert any(catalogue.ALIGNED_NAME in c.value and "supervision" in c.value for c in at.caption)
    assert not any("What supervision changed" in h.value for h in at.subheader)
    at = helpers.run_page_script(
        "attention.py", {**query, "model": f"checkpoints/{catalogue.ALIGNED_NAME}"}
    )
    helpers.assert_clean(at)
    assert any("What supervision changed: cross layer 1 head 2" in h.value for h in at.subheader)
    assert at.selectbox(key="al_plain").value == f"checkpoints/{catalogue.SHIPPED_NAME}"
    (table,) = [d.value for d in at.dataframe if "AER plain" in d.value.columns]
    pairs, gold = studio_gold()
    lm, plain = StudioModel.load(aligned), StudioModel.load(plain_path)
    expected = compared(lm, plain, pairs, gold, alignment_grid(lm, pairs, gold))
    assert list(table["reader"]) == [r.reader for r in expected]
    assert list(table["AER plain"]) == pytest.approx([r.plain.aer for r in expected], abs=1e-12)
    assert list(table["AER this model"]) == pytest.approx(
        [r.supervised.aer for r in expected], abs=1e-12
    )
    assert list(table["change"]) == pytest.approx([r.change for r in expected], abs=1e-12)
    assert table["in this model"][0] == "layer 1, head 2, AWO"


ALIGNED = ROOT / "checkpoints" / catalogue.ALIGNED_NAME
PLAIN = ROOT / "checkpoints" / catalogue.SHIPPED_NAME


@pytest.mark.skipif(not ALIGNED.is_file(), reason="the supervised shipped model is not here")
def test_the_shipped_supervised_head_aligns_far_better_than_the_same_head_unsupervised():
    lm, plain = StudioModel.load(ALIGNED), StudioModel.load(PLAIN)
    pairs, gold = studio_gold()
    rows = compared(lm, plain, pairs, gold, alignment_grid(lm, pairs, gold))
    awo = rows[0]
    assert awo.reader == "supervised head, AWO"
    assert awo.supervised.aer < 0.2 < 0.4 < awo.plain.aer  # docs/training.md gives the figures
    assert rows[-1].supervised.aer <= rows[-1].plain.aer + 0.03  # the best reader no worse
