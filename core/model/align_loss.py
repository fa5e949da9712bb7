"""Garg et al. (2019): the loss that trains one cross-attention head toward word alignments.

Shape key: B batch, T target steps, S source pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AlignTarget:
    """Alignment supervision of one step: which cross-attention head, toward what."""

    layer: int  # decoder layer
    head: int  # head of that layer's cross-attention
    target: torch.Tensor  # (B, T, S) each row sums to 1 (supervised) or 0 (not)
    full_context: bool = False  # read the head in a pass that sees the whole target (Garg et al.)


def alignment_loss(weights: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over supervised rows of -sum_s G log A; weights A and target G (B, T, S)."""
    log_a = weights.float().clamp_min(1e-9).log()  # (B, T, S)
    per_row = -(target * log_a).sum(-1)  # (B, T)
    supervised = target.sum(-1) > 0  # (B, T)
    return per_row[supervised].sum() / supervised.sum().clamp_min(1)
