"""Encoded pairs into padded id tensors: length-bucketed batches, one process's share of them.

Shape key: B batch, S source length, T target length (both padded per batch).
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

import numpy as np
import torch

from core.corpus.splits import Split
from core.corpus.vocab import Vocab

T = TypeVar("T")


def encode_pairs(
    split: Split, src_vocab: Vocab, tgt_vocab: Vocab
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(source ids + <eos>, <bos> + target ids + <eos>) arrays for each pair."""
    sources = src_vocab.encode_many([src for src, _ in split.pairs])
    targets = tgt_vocab.encode_many([tgt for _, tgt in split.pairs])
    return [
        (
            np.array(s + [Vocab.eos_id], dtype=np.int64),
            np.array([Vocab.bos_id] + t + [Vocab.eos_id], dtype=np.int64),
        )
        for s, t in zip(sources, targets)
    ]


def pad_batch(seqs: list[np.ndarray], length: int | None = None) -> torch.Tensor:
    """Right-pad id arrays with <pad> into one (B, max len) tensor (or truncate to length)."""
    width = length or max(len(s) for s in seqs)
    out = np.full((len(seqs), width), Vocab.pad_id, dtype=np.int64)  # (B, width)
    for i, s in enumerate(seqs):
        out[i, : min(len(s), width)] = s[:width]
    return torch.from_numpy(out)


def batch_indices(
    lengths: list[int],
    batch_size: int,
    shuffle: bool,
    seed: int,
    bucket: bool = True,
    pool: int = 64,
    max_tokens: int = 0,
) -> list[list[int]]:
    """Groups of example indices; with ``bucket`` similar lengths share a batch.

    With ``max_tokens`` a batch holds as many pairs as fit in that many padded tokens
    (pairs x the longest of them, fairseq's ``--max-tokens``) instead of ``batch_size``
    pairs; ``batch_size`` then only sizes the pools sorted by length.
    """
    idx = list(range(len(lengths)))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(idx)
    if bucket:
        size = batch_size * pool
        chunks = [idx[i : i + size] for i in range(0, len(idx), size)]
        idx = [j for c in chunks for j in sorted(c, key=lambda k: lengths[k])]
    if max_tokens:
        batches = token_batches(idx, lengths, max_tokens)
    else:
        batches = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def token_batches(idx: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Consecutive runs of ``idx`` whose padded size (pairs x longest) fits ``max_tokens``;
    a pair longer than the budget alone."""
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for j in idx:
        wider = max(width, lengths[j])
        if current and (len(current) + 1) * wider > max_tokens:
            batches.append(current)
            current, wider = [], lengths[j]
        current.append(j)
        width = wider
    return batches + ([current] if current else [])


def batches(
    encoded: list[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    bucket: bool = True,
    fixed_len: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (src (B, S), tgt (B, T)) id tensors; tgt holds <bos> ... <eos>.

    With ``bucket`` batches are padded only to their longest sentence; ``fixed_len``
    pads (and truncates) everything to one length, as d2l's ``num_steps`` does.
    """
    lengths = [max(len(s), len(t)) for s, t in encoded]
    for group in batch_indices(lengths, batch_size, shuffle, seed, bucket and not fixed_len):
        src = pad_batch([encoded[i][0] for i in group], fixed_len)  # (B, S)
        tgt = pad_batch([encoded[i][1] for i in group], fixed_len and fixed_len + 1)  # (B, T)
        yield src, tgt


def rank_groups(
    encoded: list[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    seed: int,
    bucket: bool = True,
    rank: int = 0,
    world_size: int = 1,
    max_tokens: int = 0,
) -> Iterator[tuple[list[int], int, int]]:
    """One training process's share of each shuffled batch of ``batch_size * world_size`` pairs.

    Every process builds the same global batches (same seed), then keeps every
    ``world_size``-th pair from its ``rank`` on, so the processes of one step train on
    sentences of one length bucket. Yields (the indices of its pairs, target tokens here,
    target tokens of the global batch); a process left without a pair (a last batch smaller
    than ``world_size``) gets the batch's first pair, counted as 0 tokens. With
    ``max_tokens`` the global batch holds ``max_tokens * world_size`` padded tokens.
    """
    lengths = [max(len(s), len(t)) for s, t in encoded]
    groups = batch_indices(
        lengths, batch_size * world_size, True, seed, bucket, max_tokens=max_tokens * world_size
    )
    for group in groups:
        mine = group[rank::world_size]
        here = sum(len(encoded[i][1]) - 1 for i in mine)  # <bos> is input only
        total = sum(len(encoded[i][1]) - 1 for i in group)
        yield mine or group[:1], here, total


def rank_batches(
    encoded: list[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    seed: int,
    bucket: bool = True,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, int]]:
    """The batches of ``rank_groups`` as (src (b, S), tgt (b, T + 1), target tokens here,
    target tokens of the global batch). Alone (``world_size`` 1) it yields what ``batches``
    does."""
    for mine, here, total in rank_groups(encoded, batch_size, seed, bucket, rank, world_size):
        src = pad_batch([encoded[i][0] for i in mine])  # (b, S)
        tgt = pad_batch([encoded[i][1] for i in mine])  # (b, T + 1)
        yield src, tgt, here, total


def prefetched(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items`` in order, made by a background thread up to ``depth`` ahead of the caller.

    The next batches are padded (and, for a GPU, pinned) while the caller's step runs. An
    exception raised while making an item is raised here, at that item; closing this
    iterator (or leaving a ``for`` loop over it and dropping it) stops the thread.
    """
    made: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()  # put after the last item

    def put(entry) -> bool:
        """Queue one entry unless the caller has gone; False once it has."""
        while not stop.is_set():
            try:
                made.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            put((end, error))

    thread = threading.Thread(target=make, name="batch-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = made.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        stop.set()
