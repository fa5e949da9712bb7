"""BPE vocabularies (core.corpus.bpe), their checkpoints, and maps merged into words."""

from __future__ import annotations

import numpy as np
import pytest

from core.attention.sentence_maps import SentenceMaps
from core.attention.word_maps import has_pieces, merge_weights, merged
from core.corpus.batches import encode_pairs
from core.corpus.bpe import BPEVocab, checkpoint_entries, checkpoint_vocabs, join_pieces, word_spans
from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus, unk_warnings
from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import read_checkpoint
from core.model.studio_loading import load_checkpoint
from core.model.studio_model import StudioModel
from core.train import main as train_main
from core.training.settings import form_fields, validate_settings
from tests.helpers import TINY

SENTENCES = [tokenize(s) for s in ("we are eating .", "they are eating .", "we eat apples .")]


@pytest.fixture(scope="module")
def bpe():
    """A small BPE vocabulary learnt from a few sentences (many times over)."""
    return BPEVocab.train(SENTENCES * 5, size=40, min_freq=2)


def test_bpe_keeps_specials_first_and_cuts_rare_words_into_known_pieces(bpe):
    assert bpe.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(bpe) <= 40
    pieces, ids = bpe.segment(["weat", "eating"])  # "weat" was never seen as a word
    assert Vocab.unk_id not in ids
    assert bpe.words(pieces) == ["weat", "eating"]
    assert any(p.startswith("##") for p in pieces)
    assert bpe.encode(["eating"]) == bpe.segment(["eating"])[1]


def test_an_unseen_character_is_unk_but_shown_as_itself(bpe):
    pieces, ids = bpe.segment(["wez"])
    assert Vocab.unk_id in ids
    assert "".join(p.removeprefix("##") for p in pieces) == "wez"
    assert bpe.unknown(["we", "wez", "zebra"]) == ["wez", "zebra"]
    assert Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "we"]).unknown(["we", "wez"]) == ["wez"]


def test_encode_many_matches_one_by_one_and_keeps_empty_sentences(bpe):
    sentences = [["we", "eat"], [], ["they", "are", "eating", "."]]
    assert bpe.encode_many(sentences) == [bpe.encode(s) for s in sentences]


def test_word_spans_join_continuations_but_never_across_specials():
    tokens = ["<bos>", "mange", "##ons", "la", "##s", "<eos>", "##x", "##"]
    assert word_spans(tokens) == [(0, 1), (1, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
    assert join_pieces(tokens) == ["<bos>", "mangeons", "las", "<eos>", "##x", "##"]


def test_checkpoint_entries_round_trip_both_kinds(bpe):
    word = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "je"])
    src, tgt = checkpoint_vocabs(checkpoint_entries(word, bpe))
    assert type(src) is Vocab and src.itos == word.itos
    assert isinstance(tgt, BPEVocab) and tgt.itos == bpe.itos
    assert tgt.segment(["eating"]) == bpe.segment(["eating"])
    broken = {**checkpoint_entries(word, bpe), "tgt_vocab": bpe.itos[:-1]}
    with pytest.raises(ValueError, match="does not match"):
        checkpoint_vocabs(broken)


def test_load_corpus_builds_bpe_on_the_training_split_only():
    cfg = DataConfig(source=str(TINY), tokenizer="bpe", bpe_vocab=80, val_fraction=0.2)
    corpus = load_corpus(cfg)
    assert isinstance(corpus.tgt_vocab, BPEVocab) and corpus.summary["tgt_vocab"] <= 80
    word = load_corpus(DataConfig(source=str(TINY), val_fraction=0.2))
    assert corpus.val.pairs == word.val.pairs  # the same held-out sentences either way
    encoded = encode_pairs(corpus.val, corpus.src_vocab, corpus.tgt_vocab)
    assert all(t[0] == Vocab.bos_id and t[-1] == Vocab.eos_id for _, t in encoded)
    assert unk_warnings(corpus, cfg) == []


def test_tokenizer_settings_are_checked_and_offered_on_the_form():
    assert any(
        "tokenizer must be" in p for p in validate_settings("d2l", {"data": {"tokenizer": "x"}})
    )
    assert any("bpe_vocab" in p for p in validate_settings("d2l", {"data": {"bpe_vocab": 2}}))
    fields = {f.name: f for f in form_fields()}
    assert fields["tokenizer"].choices == ("word", "bpe")
    assert fields["bpe_vocab"].value_type == "int"


def test_a_bpe_run_saves_its_tokenizer_and_translates_in_words(bpe_run):
    ckpt = read_checkpoint(bpe_run / "last.pt")
    assert set(ckpt["tokenizers"]) == {"src", "tgt"}
    assert ckpt["data_config"]["tokenizer"] == "bpe"
    lm = StudioModel.load(bpe_run / "last.pt")
    assert isinstance(lm.src_vocab, BPEVocab) and isinstance(lm.tgt_vocab, BPEVocab)
    t = translate_sentence(lm, "he's calm and zürich .")
    assert t.text == " ".join(lm.tgt_vocab.words(t.tokens))
    assert "##" not in t.text
    assert t.src_tokens[-1] == "<eos>" and len(t.src_tokens) == len(t.src_unknown)
    assert any(u for u in t.src_unknown)  # "ü" was never in the training text
    assert any("zürich" in w for w in t.warnings)


def test_evaluation_scores_words_and_counts_unk_in_the_output(bpe_run, tiny_model):
    from core.model.scores import evaluate_split

    split = load_corpus(DataConfig(source=str(TINY), split="head")).train
    word_lm, bpe_lm = tiny_model, load_checkpoint(bpe_run / "last.pt")
    for lm in (word_lm, bpe_lm):
        result = evaluate_split(lm.model, lm.src_vocab, lm.tgt_vocab, split)
        assert result["bleu"] > 50 and result["unk_share"] == 0.0  # it learnt these pairs
    specials = word_lm.tgt_vocab.itos[:4]
    blind = Vocab(specials + ["<unk>"] * (len(word_lm.tgt_vocab) - 4))  # every word is <unk>
    result = evaluate_split(word_lm.model, word_lm.src_vocab, blind, split, max_sentences=3)
    assert result["unk_share"] == 1.0


def test_a_bpe_run_resumes_with_its_own_tokenizer(bpe_run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(bpe_run, copy)
    before = read_checkpoint(copy / "last.pt")["tokenizers"]
    assert train_main(["--out", str(copy), "--resume", "--no-progress", "--epochs", "160"]) == 0
    after = read_checkpoint(copy / "last.pt")
    assert after["tokenizers"] == before and after["state"]["step"] == 160


def toy_maps(src, out):
    """Random row-stochastic maps for 1 layer x 2 heads over these tokens."""
    rng = np.random.default_rng(0)
    inputs = ["<bos>"] + out[:-1]

    def rows(q, k, causal=False):
        w = rng.random((1, 2, q, k)).astype(np.float32)
        if causal:
            w = np.tril(w)
        return w / w.sum(-1, keepdims=True)

    return SentenceMaps(
        rows(len(src), len(src)),
        rows(len(out), len(out), True),
        rows(len(out), len(src)),
        src,
        out,
        inputs,
    )


def test_merging_sums_key_pieces_and_averages_query_pieces():
    src = ["we", "eat", "##ing", "<eos>"]
    out = ["nous", "mange", "##ons", "<eos>"]
    maps = toy_maps(src, out)
    assert has_pieces(maps)
    words = merged(maps)
    assert words.src_tokens == ["we", "eating", "<eos>"]
    assert words.output_tokens == ["nous", "mangeons", "<eos>"]
    assert words.decoder_inputs == ["<bos>", "nous", "mangeons"]
    cross = maps.cross[0, 1]
    # row "mangeons" = mean of rows "mange", "##ons"; column "eating" = "eat" + "##ing"
    expected = (cross[1:3, 1] + cross[1:3, 2]).mean()
    assert words.cross[0, 1, 1, 1] == pytest.approx(expected, rel=1e-6)
    for kind in ("encoder", "decoder_self", "cross"):
        assert np.allclose(words.weights(kind).sum(-1), 1.0, atol=1e-5)


def test_maps_without_pieces_are_left_alone():
    maps = toy_maps(["we", "eat", "<eos>"], ["nous", "<eos>"])
    assert not has_pieces(maps) and merged(maps) is maps
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(merge_weights(w, ["a", "b"], ["x", "y", "z"]), w)


# ----------------------------------------------------------------------------- the pages


@pytest.fixture
def bpe_studio(tmp_path, bpe_run, monkeypatch):
    """The app's folders with the BPE tiny model as the shipped model and its run."""
    from tests.helpers import setup_studio_dirs

    dirs = setup_studio_dirs(tmp_path, bpe_run / "last.pt", bpe_run)
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(dirs["checkpoints"]))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(dirs["runs"]))
    return dirs


def axis_ticks(at) -> tuple[list[str], list[str]]:
    """(y, x) tick labels of the page's first (large) heatmap."""
    return axis_ticks_of(chart_specs(at)[0])


def test_attention_page_shows_pieces_and_merges_them_into_words(bpe_studio):
    from tests.helpers import assert_clean, run_page_script

    at = run_page_script("attention.py", {"sentence": "i am hungry ."})
    assert_clean(at)
    rows, cols = axis_ticks(at)  # cross attention: output pieces x source pieces
    continuing = [c for c in cols if c.startswith("##")]
    assert continuing and "hungry" not in cols  # "hungry" is rare: cut into pieces
    at.toggle(key="at_words").set_value(True).run()
    assert_clean(at)
    merged_rows, merged_cols = axis_ticks(at)
    assert "hungry" in merged_cols and not any(c.startswith("##") for c in merged_cols)
    assert len(merged_cols) == len(cols) - len(continuing)
    assert len(merged_rows) == len(rows) - sum(r.startswith("##") for r in rows)
    assert at.query_params["words"] == "1"
    for section in ("ablation", "compare", "training"):
        at.radio(key="at_section").set_value(section).run()
        assert_clean(at)


def test_a_word_model_has_no_merge_toggle(studio_dirs):
    from tests.helpers import assert_clean, run_page_script

    at = run_page_script("attention.py", {"words": "1"})
    assert_clean(at)
    assert not [t for t in at.toggle if t.key == "at_words"]


def test_compare_a_bpe_model_with_a_word_model_word_by_word(bpe_studio, tiny_checkpoint):
    import shutil

    from tests.helpers import assert_clean, run_page_script

    shutil.copy(tiny_checkpoint, bpe_studio["checkpoints"] / "words.pt")
    query = {"sentence": "i am hungry .", "section": "Compare", "other": "checkpoints/words.pt"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    captions = " ".join(c.value for c in at.caption)
    assert "compared word by word" in captions
    assert not at.warning  # the maps line up cell by cell
    ticks = [axis_ticks_of(spec) for spec in chart_specs(at)]
    assert ticks and all(not any(t.startswith("##") for t in y + x) for y, x in ticks)


def chart_specs(at) -> list[dict]:
    """The page's Plotly figures as JSON."""
    import json

    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def axis_ticks_of(spec: dict) -> tuple[list[str], list[str]]:
    """(y, x) tick labels of one heatmap (empty lists where it has none)."""
    layout = spec["layout"]
    return layout.get("yaxis", {}).get("ticktext", []), layout.get("xaxis", {}).get("ticktext", [])
