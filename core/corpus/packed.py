"""The language-modelling task's contexts: a corpus's sentences packed into contexts of
``context_length`` tokens, as nanoGPT and GPT-2 train (no padding, a sentence may run on into
the next context).

Each split's encoded pairs (``source ids + <eos>``, ``<bos> + target ids + <eos>``: one
vocabulary of both languages, ``DataConfig.shared_vocab``) are read in the corpus's order and
joined into one stream, ``english <eos> <bos> french <eos> english <eos> ...``, then cut
into contexts of ``context_length + 1`` tokens that overlap by one (the last token of one is
the first of the next, so every token but the stream's first is predicted once). A context is
a pair in the trainer's decoder-only convention (it reads ``concat(src, tgt_in)`` and predicts
``tgt_out`` from the positions of ``tgt_in``): ``src`` its first token, ``tgt`` the rest, so
the model reads the whole context and the loss is on every token after the first. The tail of
a stream shorter than a context is dropped.

Shape key: C context_length.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from core.corpus.source import DataError
from core.corpus.splits import Corpus

PACKED = ("train", "val")  # the splits packed (the test split stays sentence pairs)


def stream_of(pairs: list) -> np.ndarray:
    """A split's encoded pairs joined into one stream of ids (source, then target, each pair)."""
    pieces = [np.asarray(side, dtype=np.int64) for pair in pairs for side in pair]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)


def contexts_of(stream: np.ndarray, length: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(src, tgt) pairs of the stream's contexts of ``length + 1`` tokens, overlapping by one:
    src the context's first token (1,), tgt the other ``length`` (C,)."""
    count = max(0, (len(stream) - 1) // length)
    windows = [stream[i * length : (i + 1) * length + 1] for i in range(count)]  # (C + 1,) each
    return [(w[:1], w[1:]) for w in windows]


def packed_corpus(corpus: Corpus, length: int) -> Corpus:
    """``corpus`` with its training and validation pairs packed into contexts of ``length``
    tokens (its ids replaced; its sentences, vocabularies and test split kept); DataError where
    a split's text is shorter than one context."""
    streams = {name: stream_of(corpus.ids.get(name) or []) for name in PACKED}
    ids = {name: contexts_of(stream, length) for name, stream in streams.items()}
    if short := [f"{name} {len(streams[name]):,}" for name in PACKED if not ids[name]]:
        raise DataError(  # an empty split would be read as the unpacked pairs, silently
            f"The corpus's text gives no context of {length:,} tokens to train or validate on "
            f"(tokens: {', '.join(short)}): choose a shorter context_length or a larger corpus."
        )
    counts = {f"{name}_contexts": len(ids[name]) for name in PACKED}
    summary = {**corpus.summary, "task": "lm", "context_length": length, **counts}
    return replace(corpus, ids=ids, summary=summary)
