"""Many sentences through any model at once (``core.model.interface``): padded batches, greedy
outputs of many sources and teacher-forced losses of many pairs, under whatever hooks are on
(head importance gives each row its own heads removed), the logits made a few positions at a
time so that a big vocabulary's (B, T, V) tensor is never held.

Shape key: B rows, S source tokens, T decoder steps, D model width, V vocabulary.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from core.model.config import ModelConfig
    from core.model.interface import TranslationModel

Tick = Callable[[int], None] | None  # called with the rows done after each pass (a caller's
# progress, or its deadline: ``core.measure.progress.check_time`` sits above this package)
IGNORE = -100  # a label position that does not count (padding)
CHUNK = 64  # label positions whose logits are made at once: (64, V) float32 is 15 MB at opus-mt


def give_back_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``), so the
    buffers one phase freed do not stay resident under the next; nothing without glibc."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def padded(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N) ids padded at the right with ``pad``, and the (B, N) mask of real tokens."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[b, : len(r)] = 1
    return ids, mask


def stacked(states: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """(B, width, D) of B (S_b, D) encoder outputs, zero at padding (which is masked)."""
    out = torch.zeros(len(states), width, states[0].size(-1), device=states[0].device)
    for b, e in enumerate(states):
        out[b, : e.size(0)] = e
    return out  # (B, S, D)


def label_losses(m: TranslationModel, hidden: torch.Tensor, labels: torch.Tensor, weight=None):
    """(B, T) cross-entropy of each label given the decoder's (B, T, D) outputs, 0 where the
    label is IGNORE, in float32 whatever the outputs' type. The logits are made CHUNK label
    positions at a time (``m.logits_of``, by ``weight`` where given) and padding gets none."""
    flat, wanted = hidden.flatten(0, 1), labels.flatten()  # (B*T, D), (B*T,)
    if weight is None and torch.is_autocast_enabled(hidden.device.type):
        weight = cast_output_weight(m, hidden.device.type)  # cast once for all the chunks
    real = (wanted != IGNORE).nonzero()[:, 0]  # (N,) the positions with a label
    kind = torch.promote_types(hidden.dtype, torch.float32)
    losses = torch.zeros(wanted.shape, dtype=kind, device=hidden.device)  # (B*T,)
    parts = []
    for i in range(0, real.numel(), CHUNK):
        at = real[i : i + CHUNK]  # (c,)
        x = m.logits_of(flat[at], weight)  # (c, V)
        x = x.to(torch.promote_types(x.dtype, kind))
        picked = x.gather(1, wanted[at][:, None])[:, 0]  # (c,)
        parts.append(x.logsumexp(-1) - picked)
    if parts:
        losses = losses.index_put((real,), torch.cat(parts))  # out of place: autograd-safe
    return losses.view(labels.shape)  # (B, T)


def cast_output_weight(m: TranslationModel, device_type: str) -> torch.Tensor:
    """(V, D) the output layer's weight in the autocast type of ``device_type``."""
    return m.output_weight().to(torch.get_autocast_dtype(device_type))


def forced_batch(m: TranslationModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]):
    """Padded (B, S) sources, (B, T) decoder inputs and (B, T) labels (IGNORE at padding) of
    (source ids, output ids) pairs."""
    src, _ = padded([s for s, _ in pairs], m.pad_id, m.device)
    dec, _ = padded([m.decoder_inputs(t) for _, t in pairs], m.pad_id, m.device)
    labels, real = padded([t for _, t in pairs], m.pad_id, m.device)
    return src, dec, labels.masked_fill(real == 0, IGNORE)


def token_losses(m: TranslationModel, pairs, memory: Sequence[torch.Tensor] | None = None):
    """(B, T) cross-entropy of each output token of the pairs (0 at padding), under the hooks
    that are on; ``memory``: each row's (S, D) encoder output, given instead of encoding."""
    src, dec, labels = forced_batch(m, pairs)
    states = None if memory is None else stacked(memory, src.size(1))  # (B, S, D)
    return label_losses(m, m.hidden(src, dec, states), labels)  # (B, T)


def encoded_states(
    m: TranslationModel, sources: Sequence[Sequence[int]], rows: int, tick: Tick = None
) -> list:
    """Each source's (S, D) encoder output, ``rows`` sources at a time (``tick(rows)`` after
    each pass)."""
    out = []
    for start in range(0, len(sources), rows):
        chunk = sources[start : start + rows]
        src, _ = padded(chunk, m.pad_id, m.device)
        states = m.encode(src)  # (B, S, D)
        out += [states[b, : len(ids)] for b, ids in enumerate(chunk)]
        if tick:
            tick(len(chunk))
    return out


MAX_DECODE_ROWS = 256  # the most sources one greedy pass decodes together
DECODE_ROW_CELLS = 96 * 512 * 12  # a greedy pass's rows x width x layers: 96 rows at opus-mt's
# size (bench/hf_server_memory.py: 128 rows were 5 % faster, their peak 50-190 MB higher, past
# 1.5 GB); a model a tenth of that size decodes MAX_DECODE_ROWS at once
FORCED_ROWS = 32  # pairs teacher-forced together (their logits made CHUNK positions at a time)


def greedy_pass(m: TranslationModel, sources, target_lang=None, memory=None) -> list[list[int]]:
    """Greedy output ids of some sources in one padded pass (``memory``: each row's (S, D)
    encoder output, given instead of encoding), read up to each row's end token."""
    src, _ = padded(sources, m.pad_id, m.device)  # (B, S)
    states = None if memory is None else stacked(memory, src.size(1))  # (B, S, D)
    return m.greedy(src, m.max_output(src.size(1)), target_lang, states).tolist()


def decode_rows(cfg: ModelConfig) -> int:
    """Sources one greedy pass decodes together: fewer for a wider and deeper model."""
    cells = cfg.d_model * (cfg.num_encoder_layers + cfg.num_decoder_layers)
    return max(1, min(MAX_DECODE_ROWS, DECODE_ROW_CELLS // cells))


def greedy_outputs(
    m: TranslationModel, sources, target_lang=None, rows: int | None = None, tick: Tick = None
):
    """Greedy output ids of every source, in order: ``rows`` sources of like length a pass
    (``decode_rows`` of the model where not given; ``tick(rows)`` after each pass)."""
    rows = rows or decode_rows(m.cfg)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), rows):
        chunk = order[start : start + rows]
        for i, ids in zip(chunk, greedy_pass(m, [sources[i] for i in chunk], target_lang)):
            out[i] = ids
        if tick:
            tick(len(chunk))
    return out


@torch.no_grad()
def mean_loss(m: TranslationModel, pairs, rows: int = FORCED_ROWS) -> float:
    """Mean teacher-forced loss per output token over (source ids, output ids) pairs."""
    total, count = 0.0, 0
    for start in range(0, len(pairs), rows):
        chunk = pairs[start : start + rows]
        total += float(token_losses(m, chunk).sum())
        count += sum(len(t) for _, t in chunk)
    return total / max(count, 1)
