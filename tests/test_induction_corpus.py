"""The induction task's corpus (``core.corpus.induction``): random tokens read twice, built as
ids in the decoder-only convention (the model reads concat(src, tgt_in) = [bos, a, a[:-1]] and
predicts tgt_out = the repeat), seeded, its splits' streams apart; made where a run prepares its
corpus, no file read; and the settings that go with it (``core.training.settings``)."""

from __future__ import annotations

import numpy as np
import pytest

from core.corpus.config import DataConfig
from core.corpus.induction import VALIDATION, induction_corpus, induction_vocab
from core.corpus.source import DataError
from core.corpus.splits import summary_words, unk_warnings
from core.corpus.vocab import SPECIALS, Vocab
from core.training.settings import config_problems, validate_settings


def config(**values) -> DataConfig:
    """Induction data settings, small unless told."""
    return DataConfig(**{"task": "induction", "induction_sequences": 300} | values)


@pytest.mark.parametrize("n, shortest, K", [(2, 2, 2), (5, 2, 3), (16, 4, 64), (7, 7, 200)])
def test_each_pair_is_a_start_token_and_a_copy_read_twice(n, shortest, K):
    """concat(src, tgt_in) is [bos, a, a1 .. a(m-1)] (TransformerLens's sequence but its last
    token), tgt_out is a: the loss is on the repeat alone; the tokens are ids 4 .. K + 3; each
    copy's length m is drawn in shortest .. n, every length of them drawn."""
    settings = {"induction_length": n, "induction_min_length": shortest, "induction_tokens": K}
    corpus = induction_corpus(config(**settings))
    for name, count in (("train", 300), ("val", VALIDATION)):
        pairs = corpus.ids[name]
        assert len(pairs) == count
        for src, tgt in pairs:
            assert isinstance(src, np.ndarray) and src.dtype == np.int64
            m = len(src)
            assert shortest <= m <= n and tgt.shape == (m + 1,)
            a = tgt[1:]  # tgt_out
            assert np.array_equal(np.concatenate([src, tgt[:-1]]), [Vocab.bos_id, *a, *a[:-1]])
            assert a.min() >= len(SPECIALS) and a.max() < len(SPECIALS) + K
        assert {len(src) for src, _ in pairs} == set(range(shortest, n + 1))
    rows = [tgt[1:] for _, tgt in corpus.ids["train"]]
    if sum(map(len, rows)) >= 10 * K:  # uniform draws: every type seen, a type twice in a copy
        assert set(np.unique(np.concatenate(rows)).tolist()) == set(range(4, 4 + K))
    if n > 2:
        assert any(len(set(row.tolist())) < len(row) for row in rows)


def test_the_words_are_the_ids_in_one_word_vocabulary():
    """The specials, then t0 .. t(K-1): one object read by both sides; each split's pair is
    (the copy, its repeat) in words; no test split."""
    corpus = induction_corpus(config(induction_length=6, induction_tokens=9))
    assert corpus.src_vocab is corpus.tgt_vocab
    assert corpus.src_vocab.itos == SPECIALS + [f"t{i}" for i in range(9)]
    assert induction_vocab(9).itos == corpus.src_vocab.itos
    for name in ("train", "val"):
        split = getattr(corpus, name)
        assert len(split.pairs) == len(corpus.ids[name])
        for (src_words, tgt_words), (_, tgt) in zip(split.pairs, corpus.ids[name]):
            assert src_words == tgt_words == corpus.tgt_vocab.decode(tgt[1:])
    assert corpus.test.pairs == []
    groups = corpus.val.groups()
    assert groups[0] == (corpus.val.pairs[0][0], [corpus.val.pairs[0][1]])


def test_seeded_by_split_seed_and_each_split_its_own_stream():
    """The same settings make the same sequences; another split_seed others; validation is not
    a slice of training (its own stream), and none of its sequences is a training one."""
    a = induction_corpus(config())
    b = induction_corpus(config())
    c = induction_corpus(config(split_seed=1))
    rows = lambda corpus, name: {tuple(t[1:]) for _, t in corpus.ids[name]}  # noqa: E731
    assert rows(a, "train") == rows(b, "train") and rows(a, "val") == rows(b, "val")
    assert rows(a, "train").isdisjoint(rows(c, "train"))
    assert rows(a, "train").isdisjoint(rows(a, "val"))
    longer = induction_corpus(config(induction_sequences=600))
    assert rows(longer, "val") == rows(a, "val")  # more training sequences: the same validation


def test_the_summary_says_what_was_made():
    """The keys of a read corpus's summary, the task's own, and one line for the log."""
    corpus = induction_corpus(config(induction_length=5, induction_tokens=12))
    s = corpus.summary
    assert s["induction_min_length"] == 4
    assert (s["train"], s["val"], s["test"], s["task"]) == (300, VALIDATION, 0, "induction")
    assert (s["src_vocab"], s["tgt_vocab"]) == (16, 16)
    assert (s["induction_length"], s["induction_tokens"], s["tokenizer"]) == (5, 12, "word")
    assert summary_words(s) == (
        "induction: 300 training and 256 validation sequences of 4-5 random tokens (of 12) "
        "read twice"
    )
    assert unk_warnings(corpus, config()) == []


def test_a_translation_config_and_too_many_tokens_are_refused():
    with pytest.raises(DataError, match="not 'induction'"):
        induction_corpus(DataConfig())
    too_many = config(induction_sequences=2_000_000, induction_length=16)
    assert any("at most 20,000,000 random tokens" in p for p in too_many.problems())
    assert not DataConfig(induction_sequences=2_000_000).problems()  # translation: not read


def test_a_run_makes_it_without_reading_a_file(monkeypatch, tmp_path):
    """``prepared_corpus`` (what a run calls) makes the induction corpus: no download, no
    corpus file, nothing written to the cache folder."""
    from core.runs import corpus_cache

    def no_file(*args, **kwargs):
        raise AssertionError("the induction task reads no corpus file")

    monkeypatch.setattr(corpus_cache, "resolve_corpus", no_file)
    said = []
    corpus = corpus_cache.prepared_corpus(config(), phase=said.append, folder=tmp_path)
    assert corpus.summary["task"] == "induction" and len(corpus.ids["train"]) == 300
    assert said == [corpus_cache.MAKING] and not any(tmp_path.iterdir())


def settings(data=None, model=None, train=None) -> dict:
    """A decoder-only model on the induction task, the lead's measured sizes."""
    return {
        "data": {"task": "induction"} | (data or {}),
        "model": {"arch": "decoder-only", "d_model": 64, "num_heads": 4, "d_ff": 128}
        | (model or {}),
        "train": {"batch_size": 32} | (train or {}),
    }


def test_the_task_and_the_architecture_go_together():
    assert config_problems(settings()) == []
    assert config_problems(settings(model={"arch": "encoder-decoder"})) == [
        "the induction task trains a decoder-only model (arch)"
    ]
    assert config_problems(settings(data={"task": "translation"})) == []  # by prompting
    assert config_problems({"data": {}, "model": {}, "train": {}}) == []  # the d2l default


def test_the_sequences_read_twice_fit_the_position_table():
    """2n + 1 positions: the start token and both copies, as the circuit scores read them;
    max_len does not count for the induction task."""
    fits = settings(data={"induction_length": 24, "max_len": 200}, model={"max_positions": 49})
    assert config_problems(fits) == []
    (problem,) = config_problems(
        settings(data={"induction_length": 24}, model={"max_positions": 48})
    )
    assert problem == "2 x induction_length (24) + 1 must fit in the model's max_positions (48)"


def test_an_induction_run_needs_no_corpus_source(tmp_path):
    """The source is not read, so a missing file is no reason to refuse the settings."""
    missing = str(tmp_path / "gone.tsv")
    assert validate_settings("d2l", settings(data={"source": missing})) == []
    assert validate_settings("d2l", {"data": {"source": missing}})  # translation reads it


def test_a_shortest_copy_longer_than_the_longest_is_refused():
    problems = config(induction_min_length=9, induction_length=8).problems()
    refusal = "induction_min_length (9) must be at most induction_length (8)"
    assert any(refusal in p for p in problems)
    assert not config(induction_min_length=8, induction_length=8).problems()
