"""Tests for core.model.checked_translation (checked input, top-k, validation sentences) and
core.model.d2l_check."""

from __future__ import annotations

import dataclasses
import math

import pytest

from core.corpus.source import sha1_of
from core.corpus.text import D2L_TEST_PAIRS, tokenize
from core.model import checked_translation as tr
from core.model.d2l_check import d2l_bleu, d2l_check
from core.model.parts import DecodeSettings, TranslationError
from tests.helpers import ROOT, TINY

# ----------------------------------------------------------------------------- translating


def test_translate_sentence_and_topk_frame(home_translation):
    t, _ = home_translation
    assert t.text == "je suis chez moi ."
    frame = tr.topk_frame(t)
    assert list(frame["output token"]) == t.output_tokens
    assert list(frame.columns[2:]) == [f"#{i}" for i in range(1, 6)]
    assert frame["#1"].str.startswith("je ").iloc[0]


def pieces(*tokens: str, unknown=(), special=()):
    """A translation's source as broken_pieces_note reads it: tokens, ids and unknown flags."""
    from types import SimpleNamespace

    ids = [100 + i if t not in special else 0 for i, t in enumerate(tokens)]
    flags = [t in unknown for t in tokens]
    return SimpleNamespace(src_tokens=list(tokens), src_ids=ids, src_unknown=flags)


def test_a_sentence_read_as_single_characters_or_unknown_pieces_is_said():
    """Issue 69, item 11: a tokenizer cutting a model's words into single characters made
    broken pieces without a word said."""
    letters = pieces("␣", "##t", "##h", "##e", "␣", "##b", "##o", "##y", "␣", "##.", "⏎")
    note = tr.broken_pieces_note(letters, set())
    assert note.startswith("6 of this sentence's 7 pieces are single characters cut from")
    assert "is the tokenizer the model's own?" in note
    both = pieces("␣", "##i", "<unk>", "##m", "ho", "##m", "##e", ".", unknown={"<unk>"})
    said = tr.broken_pieces_note(both, {0})
    assert said.startswith("4 of this sentence's 7 pieces are single characters cut from its")
    assert "words (3) or unknown to the model's tokenizer (1)" in said
    fine = [
        pieces("i'm", "home", ".", "<eos>", special={"<eos>"}),
        pieces("I", "##'", "##m", "home", "##."),  # I'm: two letters of a short word
        pieces("I", "am", "a", "boy", "."),  # single-letter words are words
        pieces("she", "is", "tall", "and", "x", "##y", "##z", "is", "small", "."),  # one word
        pieces("zzz", ".", unknown={"zzz"}),  # one unknown word: its own note says it
        pieces("ich", "bin", "müde", ".", unknown={"ich", "bin", "müde"}),  # and all of them
    ]
    assert [tr.broken_pieces_note(t, {0}) for t in fine] == [None] * len(fine)


def save_word_level_qwen2(folder):
    """A tiny Qwen2 folder whose tokenizer.json holds a word-level vocabulary (the letters
    too): transformers reads it as Qwen2's byte-level tokenizer, so words come out as letters
    (/work/shared/FIELD-NOTES.md, turn six)."""
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from tests.hf_tiny import SPECIALS, WORDS
    from tests.lm_tiny import saved, tiny_lm_config

    vocab = list(dict.fromkeys([*SPECIALS, *WORDS, *string.ascii_letters, *"Ġ.Ċ:'"]))
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    return saved(folder, AutoModelForCausalLM, tiny_lm_config("qwen2", tokenizer), tokenizer, 0)


def test_a_model_whose_tokenizer_spells_its_words_out_warns(tmp_path):
    from core.model.opened import open_model

    lm = open_model(str(save_word_level_qwen2(tmp_path / "qwen2")))
    t = tr.translate_sentence(lm, "the boy is tall .")
    assert t.src_tokens[:4] == ["␣", "##t", "##h", "##e"]
    assert any("single characters cut from its words" in w for w in t.warnings)


@pytest.mark.parametrize(
    ("p", "text"),
    [(0.9123, "0.912"), (0.05, "0.050"), (0.0012, "0.001"), (0.000042, "4.2e-05"), (0.0, "0")],
)
def test_small_probabilities_stay_readable(p, text):
    assert tr.probability_text(p) == text


def test_topk_frame_never_rounds_alternatives_to_zero(home_translation):
    t, _ = home_translation
    small = dataclasses.replace(t, topk=[[("je", 0.9987), ("j'", 0.0008), ("tu", 0.00003)]])
    frame = tr.topk_frame(small)
    assert list(frame.iloc[0, 2:]) == ["je (0.999)", "j' (8.0e-04)", "tu (3.0e-05)"]


@pytest.mark.parametrize(
    ("sentence", "match"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("qwerty zxcv", "vocabulary"),
        ("go . " * 31, "at most 60"),
    ],
)
def test_translate_sentence_refuses_bad_input(tiny_model, sentence, match):
    with pytest.raises(TranslationError, match=match):
        tr.translate_sentence(tiny_model, sentence)


def test_translate_sentence_warns_about_unknown_and_long_input(tiny_model):
    t = tr.translate_sentence(tiny_model, "i'm home zorglub .")
    assert any("zorglub" in w for w in t.warnings)
    short = type(tiny_model)(
        tiny_model.model,
        tiny_model.src_vocab,
        tiny_model.tgt_vocab,
        {**tiny_model.meta, "data_config": {"max_len": 2}},
    )
    assert any(
        "at most 2 tokens" in w for w in tr.translate_sentence(short, "i am cold .").warnings
    )


def test_beam_search_settings_reach_the_decoder(tiny_model):
    t = tr.translate_sentence(tiny_model, "he's calm .", DecodeSettings(beam_size=3, topk=2))
    assert t.text == "il est calme ."
    assert all(len(step) == 2 for step in t.topk)


# ----------------------------------------------------------------------------- the d2l check


@pytest.mark.parametrize(
    ("pred", "label", "expected"),
    [
        ("a b c", "a b c", 1.0),
        ("a b c", "a b", math.sqrt(2 / 3) * (1 / 2) ** 0.25),  # no brevity penalty
        ("a", "a b", math.exp(-1.0)),  # brevity penalty exp(1 - 2/1), p1 = 1
        ("x y", "a b", 0.0),
        ("", "a b", 0.0),
    ],
)
def test_d2l_bleu_known_values(pred, label, expected):
    assert d2l_bleu(pred.split(), label.split()) == pytest.approx(expected)


def test_d2l_check_reproduces_the_book(tiny_model):
    check = d2l_check(tiny_model)
    assert [r["source"] for r in check.rows] == [s for s, _ in D2L_TEST_PAIRS]
    assert [r["translation"] for r in check.rows] == [r for _, r in D2L_TEST_PAIRS]
    assert all(r["bleu"] == pytest.approx(1.0) for r in check.rows)
    assert check.bleu == pytest.approx(100.0)


def test_d2l_check_scores_untranslatable_rows_zero(tiny_model):
    empty = type(tiny_model)(
        tiny_model.model,
        tiny_model.src_vocab.__class__(tiny_model.src_vocab.itos[:4]),
        tiny_model.tgt_vocab,
        tiny_model.meta,
    )  # knows no words at all
    check = d2l_check(empty)
    assert all(r["translation"] == "" and r["bleu"] == 0 and r["note"] for r in check.rows)
    assert check.bleu == 0.0


# ----------------------------------------------------------------------------- validation


def test_validation_examples_group_references(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path))  # the corpus is in the data folder
    corpus = tmp_path / "pairs.tsv"
    lines = [f"I see {i}.\tJe vois {i}." for i in range(40)] + ["Go.\tVa !", "Go.\tMarche."]
    corpus.write_text("\n".join(lines) + "\n")
    meta = {
        "data_config": {
            "source": "pairs.tsv",
            "source_sha1": sha1_of(corpus),
            "split": "head",
            "num_train": 30,
            "num_val": 12,
            "min_freq": 1,
        }
    }
    examples, reason = tr.validation_examples(meta, n=100)
    assert reason == ""
    assert [e.source for e in examples] == [f"i see {i} ." for i in range(30, 40)] + ["go ."]
    assert examples[-1].references == ["va !", "marche ."]
    few, _ = tr.validation_examples(meta, n=3)
    assert [e.source for e in few] == ["i see 30 .", "i see 35 .", "go ."]  # spread out


TINY_DATA = {"source": "tiny.tsv", "source_sha1": sha1_of(TINY)}  # as a checkpoint records it


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({}, "does not record"),
        ({"data_config": {"source": "/no/such/file.tsv", "source_sha1": "0" * 40}}, "missing"),
        ({"data_config": {"source": "/no/such/file.tsv"}}, "does not record its corpus's SHA-1"),
        (
            {"data_config": {**TINY_DATA, "split": "head", "num_val": 0}},
            "without a validation split",
        ),
        ({"data_config": {**TINY_DATA, "max_len": 0}}, "could not be rebuilt"),
    ],
)
def test_validation_examples_explain_why_there_are_none(meta, match):
    examples, reason = tr.validation_examples(meta)
    assert examples == [] and match in reason


def test_validation_examples_never_download(monkeypatch, tmp_path):
    monkeypatch.setenv("FRA_ENG_ZIP", str(tmp_path / "absent.zip"))
    monkeypatch.setenv("ATTENTION_STUDIO_CACHE", str(tmp_path / "cache"))
    examples, reason = tr.validation_examples({"data_config": {"source": "fra-eng"}})
    assert examples == [] and "FRA_ENG_ZIP" in reason


def test_an_empty_translation_says_why_on_stderr(monkeypatch, capsys):
    """Issue 49: a model whose output is empty (its end token first) is not a silent blank
    line and exit code 1: stderr says why, in one line."""
    import torch

    from core import translate as command
    from core.corpus.vocab import Vocab
    from core.model.studio_model import StudioModel
    from tests import helpers

    model, src_vocab, tgt_vocab = helpers.random_model()
    with torch.no_grad():
        model.decoder.dense.bias[Vocab.eos_id] = 100.0  # the end token, always first
    m = StudioModel(model, src_vocab, tgt_vocab)
    monkeypatch.setattr(command, "open_model", lambda *args, **kwargs: m)
    assert command.main(["--checkpoint", "any.pt", "i am cold ."]) == 1
    out, err = capsys.readouterr()
    assert out.strip() == ""
    assert (
        err.strip()
        == "warning: line 1: the translation is empty (the model wrote its end token first)"
    )


def test_quoted_sentences_on_the_command_line_are_translated_one_per_line(
    monkeypatch, capsys, tiny_model
):
    """Issue 53, item 8: `core.translate "a" "b"` joined both into one sentence."""
    from core import translate as command
    from core.model.parts import DecodeSettings

    monkeypatch.setattr(command, "open_model", lambda *args, **kwargs: tiny_model)
    assert command.sentences_of(["i am cold .", "go ."]) == ["i am cold .", "go ."]
    assert command.sentences_of(["i", "am", "cold", "."]) == ["i am cold ."]  # unquoted words
    assert command.main(["--checkpoint", "x.pt", "i am cold .", "i am home ."]) in (0, 1)
    out = capsys.readouterr().out.splitlines()
    expected, _ = tiny_model.translate_lines(["i am cold .", "i am home ."], DecodeSettings())
    assert out == expected and len(out) == 2


@pytest.mark.parametrize("words", [[""], ["  "], ["", " "], ["--json", ""], ["--beam", "2", " "]])
def test_a_blank_sentence_on_the_command_line_is_a_one_line_error(monkeypatch, capsys, words):
    """docs/commands.md: an error is one line and exit code 2, with nothing on stdout (it was
    a blank line, a warning and exit code 1), before any model is opened."""
    from core import translate as command

    def refuse(*args, **kwargs):
        raise AssertionError("a blank sentence reached the model")

    monkeypatch.setattr(command, "open_model", refuse)
    assert command.main(["--checkpoint", "x.pt", *words]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: the sentence is empty") and err.count("\n") == 1


def test_a_blank_sentence_beside_target_is_left_to_the_model():
    """A token-sequence model reads --target and the sentence '' (docs/commands.md)."""
    from core import translate as command

    args = command.build_parser().parse_args(["--checkpoint", "x", "--target", "t3 t7", ""])
    assert command.lines_of(args) == [""]


def test_an_input_file_s_blank_lines_are_warnings_and_exit_1_when_nothing_is_translated(
    monkeypatch, capsys, tiny_model, tmp_path
):
    """--input keeps its behaviour: each bad line a warning and a blank output line; exit code
    1 only when no line is translated."""
    from core import translate as command

    monkeypatch.setattr(command, "open_model", lambda *args, **kwargs: tiny_model)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    assert command.main(["--checkpoint", "x.pt", "--input", str(blank)]) == 1
    out, err = capsys.readouterr()
    assert out == "\n\n" and err.count("warning: line") == 2  # a blank line for each
    some = tmp_path / "some.txt"
    some.write_text("\ni am cold .\n", encoding="utf-8")
    own, _ = tiny_model.translate_lines(["i am cold ."], DecodeSettings())
    assert command.main(["--checkpoint", "x.pt", "--input", str(some)]) == (0 if own[0] else 1)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["", *own] and "line 1" in err


SHIPPED_FR_EN = ROOT / "checkpoints" / "fr-en-small-aligned.pt"


@pytest.mark.skipif(not SHIPPED_FR_EN.exists(), reason="the shipped fr-en checkpoint is absent")
def test_d2l_check_of_a_french_to_english_model_runs_the_book_s_pairs_reversed():
    """It once fed a fr→en model the English sentences ("go .") and scored against the
    French: BLEU 0 each, corpus 3.8. It reads the French and scores against the English."""
    from core.model import d2l_check as module
    from core.model.opened import open_model

    lm = open_model(str(SHIPPED_FR_EN))
    check = d2l_check(lm)
    assert [(r["source"], r["reference"]) for r in check.rows] == [
        (fr, en) for en, fr in D2L_TEST_PAIRS
    ]
    assert module.d2l_direction(lm) == "French → English"
    assert [r["translation"] for r in check.rows][1:] == ["i lost .", "he's quiet .", "i'm home ."]
    assert [r["bleu"] for r in check.rows][1::2] == [1.0, 1.0]  # "i lost .", "i'm home ."
    assert check.order == 3 and check.bleu > 30  # no English sentence has 4 tokens


def test_d2l_check_s_corpus_bleu_counts_no_longer_n_grams_than_its_references():
    from core.model.d2l_check import short_corpus_bleu

    english = [["go", "."], ["i", "lost", "."]]
    assert short_corpus_bleu(english, english) == (pytest.approx(100.0), 3)
    french = [tokenize(r) for _, r in D2L_TEST_PAIRS]
    assert short_corpus_bleu(french, french) == (pytest.approx(100.0), 4)


def test_the_d2l_check_refuses_a_model_of_another_language_pair(tiny_checkpoint):
    """Review: an English→German model ran the book's English into German and was scored
    against French, its caption saying "English → French"; the check says why not."""
    from types import SimpleNamespace

    from core.model.d2l_check import d2l_problem
    from core.model.studio_model import StudioModel

    assert d2l_problem(StudioModel.load(tiny_checkpoint)) is None  # English → French
    german = SimpleNamespace(supports=lambda what: None, language_names=("English", "German"))
    assert d2l_problem(german) == (
        "The d2l chapter's check scores English → French (or French → English): this model "
        "translates English → German."
    )
