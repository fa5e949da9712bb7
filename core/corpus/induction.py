"""The induction task's corpus: random tokens read twice, the loss on the repeat, made from
its settings (no file is read).

Each sequence is TransformerLens's and Olsson et al.'s (2022): a start token, then ``m`` random
tokens ``a``, then the same ``m`` again; only the repeat can be predicted, by copying what
followed the same token in the first copy (an induction head). Each sequence's ``m`` is drawn
uniformly between ``induction_min_length`` and ``induction_length`` (``n``): with one length for
all, a head can copy from a fixed distance back (RoPE makes that one rule), which scores as an
induction head at that length only and forms no previous-token head (measured: 0.97 at the
trained length, 0.0 at 20 tokens); with lengths drawn, a previous-token head and an induction
head form together, and the induction head reads any length. The tokens are ids 4 .. K + 3
(``K`` types, no special token), drawn uniformly and independently, so a token may occur twice
within a copy, as in TransformerLens's ``generate_repeated_tokens``. (The head scores of
``core.model.detector_scores`` are read on sequences of distinct tokens instead, where each
pattern's row has one cell: ``core.training.circuits``.)

A pair is built directly as ids, in the trainer's convention for a decoder-only model (which
reads ``concat(src, tgt_in)`` and predicts ``tgt_out`` from the positions of ``tgt_in``):
``src = [bos, a1 .. a(n-1)]`` and ``tgt = [an, a1 .. an]``, so ``tgt_in = [an, a1 .. a(n-1)]``,
``tgt_out = [a1 .. an]``, the model reads ``[bos, a, a1 .. a(n-1)]`` and the loss is on the
repeat alone. The splits hold the same sequences as words, each pair (the first copy, its
repeat): "t0" .. "t{K-1}" of one word ``Vocab`` (the four specials first), the same object for
both sides. Training and validation sequences come from two random streams of ``split_seed``;
there is no test split (the validation sequences measure the task).

Shape key: n tokens per copy at most (m: one sequence's), K token types.
"""

from __future__ import annotations

import numpy as np

from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.corpus.splits import Corpus, Split
from core.corpus.vocab import SPECIALS, Vocab

VALIDATION = 256  # validation sequences, whatever the settings
STREAMS = {"train": 0, "val": 1}  # each split's random stream of split_seed
FIRST_TOKEN = len(SPECIALS)  # the id of "t0": the specials come first
NAME = "induction"  # what the summary calls the corpus (no file)


def induction_vocab(types: int) -> Vocab:
    """The four specials, then ``types`` random token types "t0" .. "t{types - 1}"."""
    return Vocab(SPECIALS + [f"t{i}" for i in range(types)])


def random_copies(
    count: int, n: int, types: int, seed: int, stream: int, shortest: int | None = None
) -> list[np.ndarray]:
    """``count`` copies of uniform token ids of FIRST_TOKEN .. FIRST_TOKEN + types - 1, each of
    a length drawn uniformly in ``shortest`` .. ``n`` (all ``n`` when ``shortest`` is None),
    from stream ``stream`` of ``seed`` (each stream its own: another split draws others)."""
    rng = np.random.default_rng([seed, stream])
    tokens = rng.integers(FIRST_TOKEN, FIRST_TOKEN + types, size=(count, n), dtype=np.int64)
    lengths = rng.integers(shortest or n, n + 1, size=count)  # (count,)
    return [row[:m] for row, m in zip(tokens, lengths)]


def induction_pairs(copies: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(src, tgt) ids of each sequence [bos, a, a] from its copy ``a`` (m tokens): src =
    [bos, a1 .. a(m-1)], tgt = [am, a1 .. am] (tgt_in ends at a(m-1); tgt_out is the repeat)."""
    start = np.array([Vocab.bos_id], dtype=np.int64)
    return [(np.concatenate([start, a[:-1]]), np.concatenate([a[-1:], a])) for a in copies]


def induction_corpus(cfg: DataConfig) -> Corpus:
    """The induction task's corpus of ``cfg``: ``induction_sequences`` training pairs and
    VALIDATION validation pairs, as ids (``Corpus.ids``) and as words (the splits)."""
    cfg.validate()
    if cfg.task != "induction":
        raise DataError(f"these data settings are of the {cfg.task!r} task, not 'induction'")
    n, types, shortest = cfg.induction_length, cfg.induction_tokens, cfg.induction_min_length
    vocab = induction_vocab(types)
    counts = {"train": cfg.induction_sequences, "val": VALIDATION}
    copies = {
        name: random_copies(count, n, types, cfg.split_seed, STREAMS[name], shortest)
        for name, count in counts.items()
    }
    ids = {name: induction_pairs(rows) for name, rows in copies.items()}
    splits = {name: Split(words_of(rows, vocab)) for name, rows in copies.items()}
    return Corpus(vocab, vocab, splits["train"], splits["val"], Split([]), summary(cfg), ids)


def words_of(copies: list[np.ndarray], vocab: Vocab) -> list[tuple[list[str], list[str]]]:
    """Each copy as a pair of words: the first copy and its repeat (one list, read by
    both sides)."""
    return [(words, words) for words in (vocab.decode(row) for row in copies)]


def summary(cfg: DataConfig) -> dict:
    """What was made, in the keys of a read corpus's summary (``core.corpus.splits``) and the
    task's own."""
    return {
        "path": NAME,
        "pairs_read": cfg.induction_sequences + VALIDATION,
        "skipped_lines": 0,
        "too_long": 0,
        "train": cfg.induction_sequences,
        "val": VALIDATION,
        "test": 0,
        "direction": cfg.direction,
        "src_vocab": len(SPECIALS) + cfg.induction_tokens,
        "tgt_vocab": len(SPECIALS) + cfg.induction_tokens,
        "tokenizer": "word",
        "task": "induction",
        "induction_length": cfg.induction_length,
        "induction_min_length": cfg.induction_min_length,
        "induction_tokens": cfg.induction_tokens,
        "split_seed": cfg.split_seed,
    }
