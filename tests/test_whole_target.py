"""Garg et al.'s full-context alignment head (issue 52): the supervised head trained and read
with the whole target visible (no future mask), beside the causal pass every map shows."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

from core.align import main as align_main
from core.model.align_loss import AlignTarget, alignment_loss
from core.model.studio_model import StudioModel
from tests.helpers import ROOT
from tests.test_align_supervision import diagonal, tiny_pairs, tiny_trainer

GOLD = ["--data", "core/alignment/gold/studio.src-tgt", "--gold", "core/alignment/gold/studio.gold"]


def batch(model_and_batch):
    """(model, src, tgt_in, tgt_out, an alignment target on every row)."""
    model, src, tgt = model_and_batch
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    target = torch.zeros(src.size(0), tgt_in.size(1), src.size(1))
    target[:, :, 0] = 1.0  # every row supervised toward the first source token
    return model, src, tgt_in, tgt_out, target


def test_the_full_context_loss_reads_the_head_with_the_whole_target(model_and_batch):
    model, src, tgt_in, tgt_out, target = batch(model_and_batch)
    ce, causal = model.loss_terms(src, tgt_in, tgt_out, 0.0, AlignTarget(1, 2, target))
    ce_full, full = model.loss_terms(src, tgt_in, tgt_out, 0.0, AlignTarget(1, 2, target, True))
    assert torch.equal(ce, ce_full)  # the translation loss is the causal pass's either way
    with model.whole_target():
        _, maps = model(src, tgt_in, need_weights=True)
    expected = alignment_loss(maps.cross[1, :, 2], target)
    torch.testing.assert_close(full, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(full, causal)  # the head sees other things
    _, causal_maps = model(src, tgt_in, need_weights=True)
    torch.testing.assert_close(causal, alignment_loss(causal_maps.cross[1, :, 2], target))


def test_the_whole_target_holds_in_this_thread_only_and_is_restored(model_and_batch):
    model, src, tgt_in, _, _ = batch(model_and_batch)
    seen = {}

    def masks(where):
        seen[where] = model.tgt_mask(tgt_in).shape

    with model.whole_target():
        masks("inside")
        other = threading.Thread(target=masks, args=("other thread",))
        other.start()
        other.join()
        _, maps = model(src, tgt_in, need_weights=True)
    masks("after")
    t = tgt_in.size(1)
    assert seen == {
        "inside": (src.size(0), 1, 1, t),
        "other thread": (src.size(0), 1, t, t),
        "after": (src.size(0), 1, t, t),
    }
    upper = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    assert maps.decoder_self[:, 0, :, upper].sum() > 0  # later positions are read


def test_the_trainer_supervises_the_full_context_head_when_asked():
    table = {(tuple(s), tuple(t)): sorted(diagonal(s, t)) for s, t in tiny_pairs()}
    trainer = tiny_trainer(1.0, table)
    trainer.cfg.align_full_context = True
    seen = []
    real = trainer.objective

    def spy(*args):
        seen.append(args[-1].full_context)
        return real(*args)

    trainer.objective = spy
    trainer.cfg.max_steps = 3
    trainer.run()
    assert seen and all(seen)


def test_the_command_reads_with_the_whole_target(tiny_checkpoint, capsys):
    assert align_main(["--checkpoint", str(tiny_checkpoint), *GOLD, "--whole-target"]) == 0
    full = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert align_main(["--checkpoint", str(tiny_checkpoint), *GOLD]) == 0
    causal = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(full) == len(causal) and full != causal  # every reader read again, otherwise


def test_a_hugging_face_model_says_it_reads_causal_passes_only(hf_models, capsys):
    folder = str(next(iter(hf_models.values())))
    assert align_main(["--checkpoint", folder, *GOLD, "--whole-target"]) == 2
    err = capsys.readouterr().err
    assert "whole target" in err and err.count("\n") == 1


@pytest.mark.skipif(not (ROOT / "checkpoints" / "fra-eng-small.pt").is_file(), reason="shipped")
def test_the_shipped_model_decodes_as_before_after_a_whole_target_block():
    lm = StudioModel.load(ROOT / "checkpoints" / "fra-eng-small.pt")
    from core.model.parts import DecodeSettings

    before = lm.translate("i'm home .", DecodeSettings()).text
    with lm.whole_target():
        pass
    assert lm.translate("i'm home .", DecodeSettings()).text == before


def full_context_copy(source, path):
    """A supervised copy (cross layer 1 head 2) recorded as trained with the whole target."""
    from core.model.checkpoints import atomic_save, read_checkpoint
    from tests.test_supervision_effect import supervised_copy

    supervised_copy(source, path)
    ckpt = read_checkpoint(path)
    ckpt["train_config"]["align_full_context"] = True
    atomic_save(ckpt, path)
    return path


def test_a_full_context_head_is_compared_as_it_was_trained(tmp_path, tiny_checkpoint, capsys):
    from core.alignment.extract import Reader
    from core.alignment.gold import studio_gold
    from core.alignment.grid import alignment_grid
    from core.alignment.supervision_effect import compared

    sup = full_context_copy(tiny_checkpoint, tmp_path / "full.pt")
    lm, plain = StudioModel.load(sup), StudioModel.load(tiny_checkpoint)
    pairs, gold = studio_gold()
    rows = compared(lm, plain, pairs, gold, alignment_grid(lm, pairs, gold))
    assert [r.reader for r in rows][-1] == "supervised head, AWO, whole target"
    with lm.whole_target():
        expected = alignment_grid(lm, pairs, gold, [Reader(1, 2, "awo")]).rows[0]
    assert rows[-1].supervised == expected and rows[-1].supervised != rows[0].supervised
    argv = ["--checkpoint", str(sup), *GOLD, "--compare-with", str(tiny_checkpoint)]
    assert align_main(argv) == 0
    printed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert printed[-1]["supervision"] == rows[-1].to_json()  # the command's line, the same


def test_the_alignment_section_reads_a_full_context_head_as_trained(studio_dirs):
    from core.runs import catalogue
    from tests import helpers

    ckpts = studio_dirs["checkpoints"]
    full_context_copy(ckpts / catalogue.SHIPPED_NAME, ckpts / catalogue.ALIGNED_NAME)
    query = {"section": "alignment", "model": f"checkpoints/{catalogue.ALIGNED_NAME}"}
    at = helpers.run_page_script("attention.py", query)
    helpers.assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "AER plain" in d.value.columns]
    assert list(table["reader"])[-1] == "supervised head, AWO, whole target"
    assert any("whole target visible" in c.value for c in at.caption)


def test_a_full_context_model_is_read_in_a_third_mode_every_grid_scores(tmp_path, tiny_checkpoint):
    from core.alignment.extract import WHOLE, Reader, mode_label, modes, pair_maps, read
    from core.alignment.gold import studio_gold
    from core.alignment.grid import alignment_grid
    from core.alignment.symmetrised import reader_name
    from tests.test_supervision_effect import supervised_copy

    lm = StudioModel.load(full_context_copy(tiny_checkpoint, tmp_path / "full.pt"))
    plain = StudioModel.load(supervised_copy(tiny_checkpoint, tmp_path / "causal.pt"))
    assert modes(plain) == ("awo", "awi") and modes(lm) == ("awo", "awi", WHOLE)
    pairs, gold = studio_gold()
    grid, causal = alignment_grid(lm, pairs, gold), alignment_grid(plain, pairs, gold)
    assert [r for r in grid.rows if r.mode != WHOLE] == causal.rows  # the causal ones unchanged
    whole = [r for r in grid.rows if r.mode == WHOLE]
    assert len(whole) == len(causal.rows) // 2  # every layer x head, the means, in one mode
    with lm.whole_target():  # as --whole-target reads AWO: the same figures
        awo = [r for r in alignment_grid(lm, pairs, gold).rows if r.mode == "awo"]
    assert [(r.layer, r.head, r.aer) for r in whole] == [(r.layer, r.head, r.aer) for r in awo]
    one = pair_maps(lm, pairs[:3], english_first=True)
    assert all(m.whole is not None for m in one)
    assert all(p.whole is None for p in pair_maps(plain, pairs[:3], english_first=True))
    with pytest.raises(ValueError, match="whole target"):
        read(pair_maps(plain, pairs[:1])[0], Reader(0, 0, WHOLE))
    best = min(whole, key=lambda r: (r.aer, -r.precision))
    name = reader_name(best)  # as both directions combined name a model's best reader
    assert name.endswith(", AWO, whole target") and mode_label("awi") == "AWI"


def test_a_translation_is_read_again_with_the_whole_target(tmp_path, tiny_checkpoint):
    from core.alignment.extract import (
        WHOLE,
        Reader,
        from_sentence,
        links,
        pair_maps,
        whole_target_cross,
    )
    from core.model.parts import DecodeSettings

    lm = StudioModel.load(full_context_copy(tiny_checkpoint, tmp_path / "full.pt"))
    t = lm.force("the cat sees the dog .", "le chat voit le chien .", DecodeSettings())
    cross = t.attention.cross.float().numpy()  # (L, H, T, S)
    whole = whole_target_cross(lm, t.src_ids, t.out_ids)
    assert whole.shape == cross.shape and not np.allclose(whole, cross)
    sentence = from_sentence(cross, t.src_tokens, t.output_tokens, whole)
    (forced,) = pair_maps(lm, [(t.src_tokens[:-1], t.words)])  # the same pair teacher-forced
    np.testing.assert_allclose(sentence.whole, forced.whole, atol=1e-5)
    np.testing.assert_allclose(sentence.cross, forced.cross, atol=1e-5)
    reader = Reader(1, 2, WHOLE)
    assert links(sentence, reader) == links(forced, reader)


def test_the_command_offers_the_whole_mode_only_where_trained_so(tmp_path, tiny_checkpoint, capsys):
    full = full_context_copy(tiny_checkpoint, tmp_path / "full.pt")
    argv = [*GOLD, "--mode", "whole", "--layer", "1", "--head", "2"]
    assert align_main(["--checkpoint", str(full), *argv]) == 0
    (row, best) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert row["mode"] == "whole" and best["best"] == row
    assert align_main(["--checkpoint", str(full), *GOLD, "--mode", "awo", "--layer", "1"]) == 0
    out = capsys.readouterr().out
    assert align_main(["--checkpoint", str(tiny_checkpoint), *argv]) == 2
    err = capsys.readouterr().err
    assert "--align-full-context" in err and err.count("\n") == 1
    assert '"whole"' not in out


def test_the_sentence_view_reads_the_translation_with_the_whole_target(studio_dirs):
    from core.alignment.extract import WHOLE, Reader, from_sentence, links, whole_target_cross
    from core.model.parts import DecodeSettings
    from core.runs import catalogue
    from tests import helpers
    from tests.test_app_alignment import SENTENCE, pharaoh
    from tests.test_app_attribution import specs, title

    ckpts = studio_dirs["checkpoints"]
    full_context_copy(ckpts / catalogue.SHIPPED_NAME, ckpts / catalogue.ALIGNED_NAME)
    target = "le chat voit le chien ."
    query = {"section": "alignment", "sentence": SENTENCE, "target": target, "layer": "1"}
    at = helpers.run_page_script(
        "attention.py", {**query, "model": f"checkpoints/{catalogue.ALIGNED_NAME}", "head": "2"}
    )
    helpers.assert_clean(at)
    offered = at.button_group(key="al_mode").options
    assert offered[-1] == "AWO, whole target (as the head was trained)" and len(offered) == 3
    at.button_group(key="al_mode").set_value(WHOLE).run()
    helpers.assert_clean(at)
    titles = [title(s) for s in specs(at)]
    assert any(t.startswith("AWO, whole target (as the head was trained)") for t in titles)
    lm = StudioModel.load(ckpts / catalogue.ALIGNED_NAME)
    t = lm.force(SENTENCE, target, DecodeSettings())
    whole = whole_target_cross(lm, t.src_ids, t.out_ids)
    pair = from_sentence(t.attention.cross.float().numpy(), t.src_tokens, t.output_tokens, whole)
    assert pharaoh(at) == links(pair, Reader(1, 2, WHOLE))
    plain = helpers.run_page_script("attention.py", {**query, "align": WHOLE})  # not trained so
    helpers.assert_clean(plain)
    assert len(plain.button_group(key="al_mode").options) == 2
    assert plain.button_group(key="al_mode").value == "awo"


def test_the_scoring_bound_counts_the_full_context_pass(tmp_path, tiny_checkpoint):
    from core.alignment.extract import pair_maps
    from core.alignment.gold import studio_gold
    from core.runs import budget

    lm = StudioModel.load(full_context_copy(tiny_checkpoint, tmp_path / "full.pt"))
    pairs, _ = studio_gold()
    cfg = vars(lm.cfg)
    causal, whole = budget.scoring_cells(cfg, pairs), budget.scoring_cells(cfg, pairs, whole=True)
    kept = sum(m.cross.size + m.whole.size for m in pair_maps(lm, pairs, english_first=True))
    L, H = lm.cfg.num_decoder_layers, lm.cfg.num_heads
    assert whole - causal == sum(  # one more cross-attention per pair: <bos> + words, <eos>
        L * H * (len(t) + 1) * (len(s) + 1) for s, t in pairs
    )
    assert kept <= whole  # the bound holds what the grid keeps
    assert budget.scoring_problem(cfg, pairs, "word", True) is None
