"""The language-modelling task (``task`` lm): the corpus's sentences packed into contexts of
``context_length`` tokens, trained by a decoder-only model, its heads scored at every
evaluation as the induction task's are."""

from __future__ import annotations

import numpy as np
import pytest

from core.corpus.config import DataConfig
from core.corpus.packed import contexts_of, packed_corpus, stream_of
from core.corpus.source import DataError
from core.corpus.splits import summary_words
from core.runs.corpus_cache import prepared_corpus
from core.runs.run_dir import RunDir
from core.train import main
from core.training.circuits import circuit_sizes
from core.training.settings import validate_settings
from tests.helpers import TINY


def test_the_stream_is_every_pair_source_then_target():
    pairs = [(np.array([5, 6, 2]), np.array([1, 7, 2])), (np.array([8, 2]), np.array([1, 9, 2]))]
    assert stream_of(pairs).tolist() == [5, 6, 2, 1, 7, 2, 8, 2, 1, 9, 2]
    assert stream_of([]).tolist() == []


def test_contexts_overlap_by_one_so_every_token_but_the_first_is_predicted_once():
    stream = np.arange(10, 21)  # 11 tokens
    contexts = contexts_of(stream, 4)
    assert len(contexts) == 2  # 4 + 1, then 4 more; the tail (20) is dropped
    (s0, t0), (s1, t1) = contexts
    assert (s0.tolist(), t0.tolist()) == ([10], [11, 12, 13, 14])
    assert (s1.tolist(), t1.tolist()) == ([14], [15, 16, 17, 18])
    predicted = [int(t) for _, tgt in contexts for t in tgt]
    assert predicted == list(range(11, 19)) and len(set(predicted)) == len(predicted)
    assert contexts_of(stream, 20) == []  # shorter than one context


def test_a_packed_corpus_keeps_its_sentences_and_says_what_it_holds():
    cfg = DataConfig(source=str(TINY), min_freq=1, task="lm", context_length=8, shared_vocab=True)
    corpus = prepared_corpus(cfg)
    assert corpus.src_vocab.itos == corpus.tgt_vocab.itos  # one vocabulary of both languages
    s = corpus.summary
    assert (s["task"], s["context_length"], s["shared_vocab"]) == ("lm", 8, True)
    assert s["train_contexts"] == len(corpus.ids["train"]) > 0
    for src, tgt in corpus.ids["train"]:
        assert src.shape == (1,) and tgt.shape == (8,)
    assert len(corpus.train.pairs) == s["train"]  # the sentences stay, for the pages
    assert "contexts of 8 tokens" in summary_words(s) and "one vocabulary of" in summary_words(s)
    pairs = prepared_corpus(DataConfig(source=str(TINY), min_freq=1, shared_vocab=True))
    tokens = sum(len(a) + len(b) for a, b in pairs.ids["train"])  # the stream, all of it
    assert s["train_contexts"] == (tokens - 1) // 8
    assert packed_corpus(pairs, 8).summary["train_contexts"] == s["train_contexts"]


def test_a_corpus_shorter_than_one_context_is_refused_not_trained_unpacked(tmp_path, capsys):
    """Its packed split was [] and the trainer read [] as "not packed": it trained and
    validated on the sentence pairs, and logged "0 training and 0 validation contexts"."""
    pairs = prepared_corpus(DataConfig(source=str(TINY), min_freq=1, shared_vocab=True))
    with pytest.raises(DataError, match="no context of 4,000 tokens"):
        packed_corpus(pairs, 4000)
    argv = ["--out", str(tmp_path / "lm"), "--data", str(TINY), "--arch", "decoder-only"]
    argv += ["--task", "lm", "--context-length", "500", "--min-freq", "1", "--max-steps", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no context of 500 tokens" in err and "Traceback" not in err
    assert not (tmp_path / "lm").exists()  # a new run that could not begin leaves no folder


def test_the_settings_of_an_lm_run():
    lm = {"data": {"task": "lm", "context_length": 64}, "model": {"arch": "decoder-only"}}
    assert validate_settings("small", lm, any_source=True) == []
    encoder_decoder = {"data": {"task": "lm"}, "model": {"arch": "encoder-decoder"}}
    problems = validate_settings("small", encoder_decoder, any_source=True)
    assert any("the lm task trains a decoder-only model" in p for p in problems)
    long = {"data": {"task": "lm", "context_length": 600}, "model": {"arch": "decoder-only"}}
    problems = validate_settings("small", long, any_source=True)
    assert any("context_length (600) + 1 must fit" in p for p in problems)


def test_a_language_model_scores_its_heads_on_its_whole_vocabulary():
    assert circuit_sizes({"task": "lm", "tgt_vocab": 104}, 512) == (20, 100)
    assert circuit_sizes({"task": "lm", "tgt_vocab": 104}, 21) == (10, 100)  # within positions
    induction = {"task": "induction", "induction_length": 16, "induction_tokens": 256}
    assert circuit_sizes(induction, 512) == (16, 256)


@pytest.mark.slow  # trains a small model
def test_an_lm_run_trains_on_packed_text_and_scores_its_heads(tmp_path):
    out = tmp_path / "lm"
    argv = [
        *("--out", str(out), "--data", str(TINY), "--arch", "decoder-only", "--task", "lm"),
        *("--context-length", "8", "--d-model", "32", "--num-heads", "2", "--min-freq", "1"),
        *("--num-decoder-layers", "2", "--d-ff", "64", "--batch-size", "4", "--epochs", "0"),
        *("--max-steps", "60", "--eval-every", "30", "--log-every", "10", "--no-progress"),
        *("--lr", "3e-3", "--label-smoothing", "0", "--threads", "1", "--tokenizer", "word"),
    ]
    assert main(argv) == 0  # contexts of 8: the tiny corpus's validation text holds 9 tokens
    # (at 16 it held none, and the run validated on the unpacked pairs without a word)
    rd = RunDir(out)
    evals = [r for r in rd.read_metrics() if r.get("record") == "eval"]
    assert [r["step"] for r in evals] == [30, 60]
    assert all(len(r["circuits"]["induction"]) == 2 for r in evals)  # L lists of H scores
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert "val_bleu" not in evals[-1]
    assert (out / "best.hf" / "config.json").is_file()
    assert rd.read_config()["data"]["shared_vocab"] is True
