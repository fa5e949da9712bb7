"""The attention path a trainee's loss pass runs: ``training_attention`` picks it (eager on a
CPU, SDPA elsewhere) and ``attention_path`` puts a transformers model on a path for a block.

The decoder-only (``core.model.trainee``) and the encoder (``core.model.encoder_trainee``)
trainees are built on SDPA (``TRAINING_ATTENTION``); on a CPU torch's fused kernel is slower
forward and backward at these lengths than the eager path (scores, the additive mask, a
float32 softmax, the product): 1.3x for the decoder's step, 1.4-1.6x for the encoder's
(bench/decoder_mfu.py, bench/encoder_attention.py, docs/training.md). The eager path is also
the one that returns attention weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

TRAINING_ATTENTION = "sdpa"  # the fused path; "eager" where weights are returned, and on a CPU


def training_attention(device: torch.device) -> str:
    """The attention a loss pass runs on ``device``: the eager path on a CPU, else
    ``TRAINING_ATTENTION``."""
    return "eager" if device.type == "cpu" else TRAINING_ATTENTION


@contextmanager
def attention_path(lm: nn.Module, implementation: str) -> Iterator[None]:
    """transformers' attention ``implementation`` in ``lm`` inside the block, then SDPA again
    (``TRAINING_ATTENTION``, the path both trainees' models are built on)."""
    lm.set_attn_implementation(implementation)
    try:
        yield
    finally:
        lm.set_attn_implementation(TRAINING_ATTENTION)
