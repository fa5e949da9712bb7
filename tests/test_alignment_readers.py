"""Readers beyond one head: the stacks' states (SimAlign's argmax and itermax), both directions
symmetrised with a French→English model, the held-out Tatoeba gold set, and the reverse
direction (``DataConfig.direction``) that makes such a model."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch

from core import align as align_cmd
from core.alignment import held_out
from core.alignment.aer import grow_diag_final_and, score
from core.alignment.extract import Reader, encoded, links, pair_maps
from core.alignment.gold import GoldError, GoldLinks, read_links, read_pairs, tokenized_like_ours
from core.alignment.grid import alignment_grid
from core.alignment.similarity import (
    StateReader,
    itermax,
    mutual_argmax,
    pair_states,
    similarity_scores,
    state_links,
    state_readers,
    word_means,
)
from core.alignment.symmetrised import direction_problem, symmetrised
from core.corpus.config import DataConfig
from core.corpus.splits import load_splits
from core.corpus.text import D2L_TEST_PAIRS
from core.figures import alignment_grid as grid_figs
from core.model.checkpoints import trained_data
from core.model.parts import TranslationError
from core.model.studio_model import StudioModel
from core.training.config import D2L_PROBES
from core.training.probes import probe_sentences
from tests import helpers

PAIRS = "i'm home . ||| je suis chez moi .\ngo . ||| va !\ni'm cold . ||| j'ai froid .\n"
GOLD = "0-0 0-1 1-2 1p3 2-4\n0-0 1-1\n0-0 1-1 2-2\n"


@pytest.fixture
def files(tmp_path):
    """(pairs file, gold file) of three hand-aligned pairs."""
    return helpers.gold_files(tmp_path, PAIRS, GOLD)


@pytest.fixture
def reverse_checkpoint(reverse_run):
    """The tiny model trained French→English: its last checkpoint."""
    return reverse_run / "last.pt"


# ----------------------------------------------------------------------------- the reverse model


def test_a_french_to_english_split_is_the_english_to_french_one_turned_round(tiny_corpus):
    forward = load_splits(DataConfig(source=str(tiny_corpus), val_fraction=0.1, test_fraction=0.1))
    turned = load_splits(
        DataConfig(source=str(tiny_corpus), val_fraction=0.1, test_fraction=0.1, direction="fr-en")
    )
    for a, b in zip(
        (forward.train, forward.val, forward.test), (turned.train, turned.val, turned.test)
    ):
        assert [(t, s) for s, t in a.pairs] == b.pairs  # the same pairs held out, each turned
    assert "direction" in " ".join(DataConfig(direction="de-en").problems())


def test_a_reverse_model_says_which_way_it_reads(reverse_checkpoint, tiny_model):
    lm = StudioModel.load(reverse_checkpoint)
    assert lm.languages == ("fr", "en") and tiny_model.languages == ("en", "fr")
    assert lm.source_label == "French sentence" and lm.target_name == "English"
    assert trained_data(lm.meta).direction == "fr-en"
    assert lm.src_vocab.encode(["je"]) != [lm.src_vocab.unk_id]  # its source words are French
    assert direction_problem(tiny_model, lm) is None
    assert "other direction" in direction_problem(tiny_model, tiny_model)


def test_a_reverse_run_probes_french_and_suggests_a_french_sentence(reverse_checkpoint):
    assert probe_sentences(D2L_PROBES, "fr-en") == [ref for _, ref in D2L_TEST_PAIRS]
    assert probe_sentences(D2L_PROBES, "en-fr") == D2L_PROBES
    assert probe_sentences(["bonjour ."], "fr-en") == ["bonjour ."]  # the user's own probes
    lm = StudioModel.load(reverse_checkpoint)
    with pytest.raises(TranslationError, match="j'ai froid"):
        lm.source("zzz qqq")


# ----------------------------------------------------------------------------- SimAlign


def test_mutual_argmax_links_only_where_both_directions_agree():
    sim = np.array([[0.9, 0.8], [0.95, 0.1]])
    # row 0 prefers column 0, column 0 prefers row 1: no link for row 0
    assert mutual_argmax(sim).tolist() == [[False, False], [True, False]]


def test_itermax_links_a_word_left_out_but_never_two_linked_words_again():
    sim = np.array([[0.9, 0.85, 0.1], [0.95, 0.1, 0.2], [0.1, 0.2, 0.3]])
    first = mutual_argmax(sim)
    more = itermax(sim)
    assert (more & first).sum() == first.sum() and more.sum() > first.sum()
    assert more[0, 1]  # row 0 was left out by argmax; its next choice is free
    # two words linked to each other are never linked again to one another's partners
    assert not (more[1, 1] or more[1, 2])


def test_word_states_are_the_mean_of_their_pieces():
    states = torch.arange(12.0).view(1, 4, 3)  # (L, P, D)
    means = word_means(states, [0, 0, 1, 2])
    assert np.allclose(means[0, 0], states[0, :2].mean(0).numpy())
    assert np.allclose(means[0, 2], states[0, 3].numpy())


def test_the_states_read_are_the_models_own_stream(tiny_model):
    pairs = read_pairs_text(PAIRS)
    states = pair_states(tiny_model, pairs, batch=2)  # padded batches
    w = encoded(tiny_model, pairs)[0]
    with tiny_model.evaluating(), torch.no_grad():
        rec = tiny_model.forced(w.src_ids, w.out_ids)
    enc, dec = rec.stream("encoder"), rec.stream("decoder")  # L + 1 x (1, ., D)
    n = len(w.tgt_words)
    for layer, s in enumerate(enc):
        expected = word_means(s[:, w.src_start : w.src_start + len(w.src_words)], w.src_words)
        assert np.allclose(states[0].source[layer], expected[0], atol=1e-5)
    for layer, s in enumerate(dec):
        reading = s[:, w.tgt_start + 1 : w.tgt_start + n + 1]
        assert np.allclose(states[0].reading[layer], word_means(reading, w.tgt_words)[0], atol=1e-5)


def test_every_state_reader_is_scored_and_the_rows_are_its_links(tiny_model, files):
    pairs, gold = read_pairs(files[0]), read_links(files[1])
    rows = similarity_scores(tiny_model, pairs, gold)
    La, Lb = tiny_model.depth
    assert len(rows) == len(state_readers(La, Lb)) == (La + 1) * (Lb + 1) * 4
    assert [r.aer for r in rows] == sorted(r.aer for r in rows)
    states = pair_states(tiny_model, pairs)
    for row in rows[:3]:
        r = StateReader(row.encoder_layer, row.decoder_layer, row.mode, row.method)
        assert score([state_links(p, r) for p in states], gold).aer == row.aer


# ----------------------------------------------------------------------------- both directions


def test_symmetrised_rows_combine_the_two_best_readers(tiny_model, reverse_checkpoint, files):
    pairs, gold = read_pairs(files[0]), read_links(files[1])
    reverse = StudioModel.load(reverse_checkpoint)
    rows = {r["combination"]: r for r in symmetrised(tiny_model, reverse, pairs, gold)}
    assert rows["forward"]["aer"] == alignment_grid(tiny_model, pairs, gold).best.aer
    assert rows["reverse"]["aer"] == alignment_grid(reverse, pairs, gold).best.aer
    p = {k: r["precision"] for k, r in rows.items()}
    rec = {k: r["recall"] for k, r in rows.items()}
    assert rec["intersection"] <= min(rec["forward"], rec["reverse"]) <= rec["union"]
    assert rec["intersection"] <= rec["grow-diag-final-and"] <= rec["union"]
    assert all(0 <= v <= 1 for v in p.values())
    with pytest.raises(ValueError, match="other direction"):
        symmetrised(tiny_model, tiny_model, pairs, gold)


def test_a_french_to_english_model_reads_a_gold_set_turned_round(reverse_checkpoint, files):
    """Gold pairs are English first: the reverse model reads them French first, and its links
    come back (English word, French word) before they are scored."""
    pairs, gold = read_pairs(files[0]), read_links(files[1])
    reverse = StudioModel.load(reverse_checkpoint)
    turned = [(t, s) for s, t in pairs]
    by_hand = [
        {(j, i) for i, j in links(m, Reader(1, None, "awo"))} for m in pair_maps(reverse, turned)
    ]
    grid = alignment_grid(reverse, pairs, gold, [Reader(1, None, "awo")])
    assert grid.rows[0].aer == score(by_hand, gold).aer
    assert [w.src_ids for w in encoded(reverse, pairs, english_first=True)] == [
        w.src_ids for w in encoded(reverse, turned)
    ]
    states = pair_states(reverse, pairs)
    assert states[0].turned and states[0].source.shape[1] == len(pairs[0][1])  # French words


def test_grow_diag_final_and_keeps_the_intersection_and_stays_in_the_union():
    fwd, rev = {(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (2, 2)}
    both = grow_diag_final_and(fwd, rev, 3, 3)
    assert fwd & rev <= both <= fwd | rev and (2, 2) in both or (2, 1) in both


def test_the_command_prints_state_and_symmetrised_rows(
    tiny_checkpoint, reverse_checkpoint, files, capsys
):
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(files[0]), "--gold", str(files[1])]
    assert align_cmd.main([*args, "--similarity", "--reverse", str(reverse_checkpoint)]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    states = [r["similarity"] for r in rows if "similarity" in r]
    both = [r["symmetrised"] for r in rows if "symmetrised" in r]
    lm = StudioModel.load(tiny_checkpoint)
    pairs, gold = read_pairs(files[0]), read_links(files[1])
    assert states == [
        json.loads(json.dumps(r.to_json()))["similarity"]
        for r in similarity_scores(lm, pairs, gold)
    ]
    assert [r["combination"] for r in both] == [
        "forward",
        "reverse",
        "intersection",
        "union",
        "grow-diag-final-and",
    ]
    assert "best" in rows[-1]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--similarity"], "--similarity scores readers"),
        (["--held-out"], "or --held-out"),
    ],
)
def test_reader_flags_without_a_gold_set_are_one_line_errors(
    tiny_checkpoint, files, capsys, extra, message
):
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(files[0])]
    assert align_cmd.main([*args, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- held-out gold


def test_the_held_out_file_keeps_no_text_of_the_corpus():
    rows = held_out.gold_rows()
    assert len(rows) >= 100
    for number, digest, found in rows:
        assert number >= 0 and len(digest) == held_out.HASH_DIGITS and found.sure
    text = held_out.HELD_OUT.read_text(encoding="utf-8")
    assert not any(c.isalpha() and c not in "abcdefp" for c in text)  # digits, hex and links


def test_without_the_corpus_the_held_out_set_says_how_to_get_it(
    monkeypatch, capsys, tiny_checkpoint
):
    monkeypatch.setattr(held_out, "fra_eng_copy", lambda: None)
    with pytest.raises(GoldError, match="FRA_ENG_ZIP"):
        held_out.held_out_gold()
    assert align_cmd.main(["--checkpoint", str(tiny_checkpoint), "--held-out"]) == 2
    assert "FRA_ENG_ZIP" in capsys.readouterr().err


def test_another_corpus_is_refused_by_the_hashes(tmp_path, monkeypatch):
    rows = [(1, "0" * 16, GoldLinks({(0, 0)}))]
    monkeypatch.setattr(held_out, "gold_rows", lambda path=None: rows)
    other = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("fra.txt", "Go.\tVa !\nHi.\tSalut !\n")
    with pytest.raises(GoldError, match="not the corpus"):
        held_out.held_out_gold(other)


def test_the_held_out_pairs_are_in_no_shipped_models_training_split(fra_eng):
    pairs, gold = held_out.held_out_gold(fra_eng)
    assert len(pairs) == len(gold) >= 100
    meta = StudioModel.load(helpers.ROOT / "checkpoints" / "fra-eng-small.pt").meta
    cfg = trained_data(meta, str(fra_eng))
    splits = load_splits(cfg)
    train = {(tuple(s), tuple(t)) for s, t in splits.train.pairs}
    test = {(tuple(s), tuple(t)) for s, t in splits.test.pairs}
    for s, t in pairs:
        assert (tuple(s), tuple(t)) in test and (tuple(s), tuple(t)) not in train
        assert tokenized_like_ours(s) and tokenized_like_ours(t)
    reverse = StudioModel.load(helpers.ROOT / "checkpoints" / "fr-en-small-aligned.pt").meta
    turned = load_splits(trained_data(reverse, str(fra_eng)))  # the same pairs held out
    assert {(tuple(t), tuple(s)) for s, t in turned.test.pairs} == test
    assert not {(tuple(t), tuple(s)) for s, t in turned.train.pairs} & test


def read_pairs_text(text: str):
    """Pairs of an ``english ||| french`` text."""
    return [tuple(side.split() for side in line.split("|||")) for line in text.splitlines()]


def test_the_page_s_table_keeps_each_kind_and_each_state_method_s_best():
    rows = [
        {"method": "alti", "mode": "awo", "aer": 0.4, "precision": 0.5, "recall": 0.6, "pairs": 3},
        *(
            {
                "similarity": {
                    "encoder_layer": a,
                    "decoder_layer": 1,
                    "mode": "awi",
                    "method": m,
                    "aer": aer,
                    "precision": 0.1,
                    "recall": 0.2,
                    "pairs": 3,
                }
            }
            for a, m, aer in ((0, "itermax", 0.5), (1, "argmax", 0.55), (1, "itermax", 0.6))
        ),
        {
            "symmetrised": {
                "combination": "union",
                "forward_reader": "layer 0 head 0, AWO",
                "reverse_reader": "all layers, AWO",
                "aer": 0.2,
                "precision": 0.7,
                "recall": 0.9,
                "pairs": 3,
            }
        },
    ]
    table = grid_figs.other_readers_table(rows)
    assert list(table["kind"]) == ["attribution", *["states (SimAlign)"] * 2, "both directions"]
    assert list(table["AER"]) == [0.4, 0.5, 0.55, 0.2]  # the itermax row of 0.6 left out
    assert table["reader"].iloc[0] == "ALTI+, AWO, argmax"
    assert table["reader"].iloc[1].startswith("encoder after layer 0 × decoder after layer 1")
    assert table["reader"].iloc[3] == "union (layer 0 head 0, AWO / all layers, AWO)"
