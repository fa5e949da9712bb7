"""Alignment-supervised training (Garg et al. 2019): one cross-attention head trained toward
word alignments of the training pairs, from an aligner's files or a teacher checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.alignment.extract import Reader, pair_maps, read
from core.alignment.teacher import read_source
from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.corpus.splits import load_corpus, load_splits
from core.corpus.supervision import (
    alignment_targets,
    parse_supervision_line,
    piece_links,
    read_supervision,
    supervision_line,
)
from core.model.align_loss import AlignTarget, alignment_loss
from core.model.parts import evaluating
from core.model.studio_loading import load_checkpoint
from core.model.studio_model import StudioModel
from core.model.transformer import Transformer
from core.training.config import TrainConfig
from core.training.loop import Trainer
from core.training.settings import config_problems
from tests import helpers


def tiny_pairs() -> list:
    """The tiny corpus's 30 pairs as our tokenizer reads them."""
    cfg = DataConfig(**{**helpers.TINY_RUN["data"], "source": str(helpers.TINY)})
    return load_splits(cfg).train.pairs


def diagonal(src, tgt) -> set:
    """Word i of the source linked to word i of the target, as far as both go."""
    return {(i, i) for i in range(min(len(src), len(tgt)))}


def write_aligner_files(folder, pairs, links=diagonal):
    """An aligner's two files: 'english ||| french' lines and Pharaoh lines."""
    p, k = folder / "pairs.txt", folder / "links.txt"
    p.write_text("".join(f"{' '.join(s)} ||| {' '.join(t)}\n" for s, t in pairs))
    k.write_text(
        "".join(" ".join(f"{i}-{j}" for i, j in sorted(links(s, t))) + "\n" for s, t in pairs)
    )
    return p, k


def test_alignment_loss_is_the_cross_entropy_of_supervised_rows():
    weights = torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]])  # (1, 3, 2)
    target = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [0.5, 0.5]]])  # row 1 unsupervised
    expected = (-np.log(0.5) + -(0.5 * np.log(0.2) + 0.5 * np.log(0.8))) / 2
    assert alignment_loss(weights, target).item() == pytest.approx(expected, rel=1e-6)
    assert alignment_loss(weights, torch.zeros_like(target)).item() == 0.0


def test_supervision_lines_round_trip_and_bad_lines_name_their_number():
    line = supervision_line(["i", "am", "cold"], ["j'ai", "froid"], {(2, 1), (0, 0)})
    assert line == "i am cold ||| j'ai froid ||| 0-0 2-1"
    assert parse_supervision_line(line) == (
        ("i", "am", "cold"),
        ("j'ai", "froid"),
        [(0, 0), (2, 1)],
    )
    for bad in ("i am ||| je suis", "i ||| je ||| 0-x", "i ||| je ||| 3-0"):
        with pytest.raises(DataError, match="line 7"):
            parse_supervision_line(bad, 7)


def test_piece_links_follow_words_and_targets_are_distributions(bpe_run):
    lm = load_checkpoint(bpe_run / "last.pt")
    src, tgt = ["i", "am", "unbelievably", "cold"], ["j'ai", "incroyablement", "froid"]
    table = {(tuple(src), tuple(tgt)): [(0, 0), (2, 1), (3, 2)]}
    (pairs,) = piece_links([(src, tgt)], lm.src_vocab, lm.tgt_vocab, table)
    src_pieces, tgt_pieces = lm.src_vocab.pieces(src), lm.tgt_vocab.pieces(tgt)
    assert len(src_pieces) > len(src)  # the rare word is cut into pieces
    from core.alignment.extract import piece_words

    sw, tw = piece_words(src_pieces), piece_words(tgt_pieces)
    expected = {
        (a, b)
        for a in range(len(sw))
        for b in range(len(tw))
        if (sw[a], tw[b]) in table[(tuple(src), tuple(tgt))]
    }
    assert {tuple(x) for x in pairs.tolist()} == expected
    assert piece_links([(["go"], ["va"])], lm.src_vocab, lm.tgt_vocab, table) == [None]
    target = alignment_targets([pairs, None], len(src_pieces) + 3, len(tgt_pieces) + 2)
    sums = target.sum(-1)  # (2, T)
    assert torch.allclose(sums[0, : len(tgt_pieces)], torch.ones(len(tgt_pieces)))
    assert sums[0, len(tgt_pieces) :].eq(0).all() and sums[1].eq(0).all()


def test_the_supervised_head_is_the_one_forward_returns(random_model):
    model = random_model[0]
    src = torch.randint(4, 11, (2, 5))
    tgt = torch.randint(4, 11, (2, 6))
    with evaluating(model):
        _, maps = model(src, tgt[:, :-1], need_weights=True)
        target = torch.softmax(torch.randn(2, 5, 5), -1)
        for layer in range(model.cfg.num_decoder_layers):
            ce, al = model.loss_terms(
                src, tgt[:, :-1], tgt[:, 1:], 0.1, AlignTarget(layer, 1, target)
            )
            assert ce.item() == pytest.approx(
                model.loss(src, tgt[:, :-1], tgt[:, 1:], 0.1).item(), rel=1e-6
            )
            assert al.item() == pytest.approx(
                alignment_loss(maps.cross[layer, :, 1], target).item(), rel=1e-5
            )


def tiny_trainer(weight: float, alignments: dict | None, seed: int = 0) -> Trainer:
    data = DataConfig(**{**helpers.TINY_RUN["data"], "source": str(helpers.TINY)})
    corpus = load_corpus(data)
    from core.model.config import ModelConfig

    torch.manual_seed(seed)
    model = Transformer(
        ModelConfig(
            src_vocab_size=len(corpus.src_vocab),
            tgt_vocab_size=len(corpus.tgt_vocab),
            **{**helpers.TINY_RUN["model"], "num_encoder_layers": 1, "num_decoder_layers": 1},
        )
    )
    cfg = TrainConfig(
        **{
            **helpers.TINY_RUN["train"],
            "epochs": 0,
            "max_steps": 12,
            "eval_every": 1000,
            "log_every": 4,
            "align_weight": weight,
            "probes": [],
        }
    )
    return Trainer(model, corpus, cfg, alignments=alignments)


def test_weight_zero_trains_exactly_as_without_alignments():
    table = {(tuple(s), tuple(t)): sorted(diagonal(s, t)) for s, t in tiny_pairs()}
    records = []
    for alignments in (None, table):
        trainer = tiny_trainer(0.0, alignments)
        seen = []
        trainer.on("step", lambda t, info, seen=seen: seen.append(info["loss"]))
        trainer.run()
        records.append(seen)
    assert records[0] == records[1]
    with pytest.raises(ValueError, match="no alignments"):
        tiny_trainer(0.5, None)


def test_a_supervised_run_records_its_alignment_loss_and_it_falls():
    table = {(tuple(s), tuple(t)): sorted(diagonal(s, t)) for s, t in tiny_pairs()}
    trainer = tiny_trainer(1.0, table)
    trainer.cfg.max_steps = 60
    seen = []
    trainer.on("step", lambda t, info: seen.append(info))
    trainer.run()
    assert all("align_loss" in r for r in seen)
    assert seen[-1]["align_loss"] < 0.5 * seen[0]["align_loss"]
    assert sum(t is not None for t in trainer.train_links) == len(tiny_pairs())


def diagonal_mass(checkpoint, pairs, layer: int, head: int) -> float:
    """Mean weight the head puts on the diagonal link of each target word (AWO)."""
    lm = StudioModel.load(checkpoint)
    masses = []
    for m in pair_maps(lm, pairs):
        w = read(m, Reader(layer, head, "awo"))  # (T, S)
        masses += [w[i, i] for i in range(min(w.shape))]
    return float(np.mean(masses))


@pytest.mark.slow  # trains with the command
def test_the_command_trains_the_chosen_head_to_align(tmp_path, tiny_checkpoint):
    pairs = tiny_pairs()
    p, k = write_aligner_files(tmp_path, pairs)
    out = tmp_path / "aligned"
    code = helpers.train_tiny(
        out,
        "--align-links",
        str(k),
        "--align-pairs",
        str(p),
        "--align-layer",
        "1",
        "--align-head",
        "2",
        "--align-weight",
        "0.5",
    )
    assert code == 0
    train = json.loads((out / "config.json").read_text())["train"]
    assert (train["align_layer"], train["align_head"], train["align_weight"]) == (1, 2, 0.5)
    assert train["align_source"] == "links.txt (30 pairs); 30 pairs aligned"
    assert str(tmp_path) not in (out / "config.json").read_text()  # no folder of this machine
    assert read_source(out / "alignments.txt") == "links.txt (30 pairs)"
    assert len(read_supervision(out / "alignments.txt")) == 30
    meta = load_checkpoint(out / "last.pt").meta
    assert meta["train_config"]["align_head"] == 2
    supervised = diagonal_mass(out / "last.pt", pairs, 1, 2)
    plain = diagonal_mass(tiny_checkpoint, pairs, 1, 2)
    assert supervised > 0.8 and supervised > plain + 0.2
    # a resumed run reads the run's own alignments again
    assert helpers.train_tiny(out, "--resume", "--epochs", "160") == 0


def test_the_command_rejects_bad_alignment_files_in_one_line(tmp_path, capsys):
    pairs = tiny_pairs()
    p, k = write_aligner_files(tmp_path, pairs, links=lambda s, t: {(len(s) + 3, 0)})
    assert helpers.train_tiny(tmp_path / "r", "--align-links", str(k), "--align-pairs", str(p)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "links.txt" in err and err.count("\n") == 1
    assert helpers.train_tiny(tmp_path / "s", "--align-links", str(k)) == 2
    assert "--align-pairs" in capsys.readouterr().err


def test_a_head_the_model_lacks_is_a_settings_problem():
    cfg = helpers.tiny_config(train={"align_weight": 0.1, "align_layer": 5, "align_head": 9})
    problems = " ".join(config_problems(cfg))
    assert "align_layer must be below num_decoder_layers" in problems
    assert "align_head must be below num_heads (4)" in problems
    assert config_problems(helpers.tiny_config(train={"align_layer": 5})) == []  # off: unchecked


def supervised_meta() -> dict:
    return {
        "train_config": {
            "align_weight": 0.05,
            "align_layer": 1,
            "align_head": 2,
            "align_source": "train.links (30 pairs); 30 pairs aligned",
        }
    }


def test_the_supervised_head_is_labelled_in_the_table_and_the_run_record():
    from core.attention.head_stats import SUPERVISED_LABEL, mark_supervised, supervised_head
    from core.runs.status import supervision_label

    meta = supervised_meta()
    assert supervised_head(meta)[:2] == (1, 2) and supervised_head({}) is None
    import pandas as pd

    table = pd.DataFrame({"layer": [0, 1, 1], "head": [2, 1, 2], "label": ["a", "b", "c"]})
    marked = mark_supervised(table, "cross", meta)
    assert list(marked["label"]) == ["a", "b", f"c · {SUPERVISED_LABEL}"]
    assert mark_supervised(table, "encoder", meta).equals(table)
    label = supervision_label(meta["train_config"])
    assert label.startswith("cross layer 1 head 2 trained to align (weight 0.05")
    assert supervision_label({}) == ""


def test_the_attention_page_says_which_head_was_trained_to_align(studio_dirs):
    from core.model.checkpoints import atomic_save, read_checkpoint
    from core.runs.catalogue import SHIPPED_NAME

    path = studio_dirs["checkpoints"] / SHIPPED_NAME
    ckpt = read_checkpoint(path)
    ckpt["train_config"] = {**ckpt["train_config"], **supervised_meta()["train_config"]}
    atomic_save(ckpt, path)
    at = helpers.run_page_script("attention.py", {"kind": "cross", "layer": "1", "head": "2"})
    helpers.assert_clean(at)
    assert any("trained to align words" in i.value for i in at.info)
    labels = [df.value for df in at.dataframe if "label" in df.value.columns]
    assert labels and any(lbl.endswith("trained to align") for lbl in labels[0]["label"])
    at = helpers.run_page_script("attention.py", {"kind": "cross", "layer": "1", "head": "1"})
    assert not any("trained to align words" in i.value for i in at.info)
