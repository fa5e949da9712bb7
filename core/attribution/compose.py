"""Layer-by-layer mixing composed into one vector per output token over [source ; prefix].

Every contribution method here says, for each sub-layer (or layer), how much of each output
position comes from each of its inputs: a **mixing** matrix whose rows are non-negative and
sum to 1. Composing them over layers (the "rollout" of Abnar & Zuidema 2020, applied by
ALTI+ to its own matrices) gives what each *token* contributes:

- encoder: R = M_L ... M_1, (S, S): encoder output s over source tokens;
- decoder: each position starts as itself (its input token, a prefix column). A
  self-attention step mixes decoder positions, V <- M V; a cross-attention step mixes the
  position's own state with the encoder outputs, V <- diag(own) V + C [R | 0].

The result V is (T, S + T): row t over the S source tokens, then the T decoder inputs
(<bos> and the outputs before t; a causal mask keeps later columns at exactly 0). Rows sum
to 1 because every step's rows do.

Shape key: S source tokens, T output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DecoderStep:
    """One decoder mixing step: rows of [prefix | source] are non-negative and sum to 1."""

    prefix: torch.Tensor  # (T, T) weight of each decoder position of the step's input
    source: torch.Tensor | None = None  # (T, S) weight of each encoder output (cross only)


def normalised(scores: torch.Tensor) -> torch.Tensor:
    """Rows of non-negative scores (..., N) scaled to sum to 1 (an all-zero row stays 0)."""
    total = scores.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(total > 0, scores / total.clamp(min=1e-30), torch.zeros_like(scores))


def compose_encoder(steps: list[torch.Tensor]) -> torch.Tensor:
    """Encoder mixing matrices, first layer first, each (S, S) -> R (S, S)."""
    rollout = torch.eye(steps[0].size(0), dtype=steps[0].dtype, device=steps[0].device)
    for mix in steps:
        rollout = mix @ rollout  # (S, S)
    return rollout


def compose(encoder_steps: list[torch.Tensor], decoder_steps: list[DecoderStep]) -> torch.Tensor:
    """Encoder and decoder mixing -> contributions (T, S + T) over [source ; prefix]."""
    enc = compose_encoder(encoder_steps)  # (S, S)
    S, T = enc.size(0), decoder_steps[0].prefix.size(0)
    memory = torch.cat([enc, enc.new_zeros(S, T)], dim=1)  # (S, S + T)
    state = torch.cat([enc.new_zeros(T, S), torch.eye(T, dtype=enc.dtype)], dim=1)  # (T, S+T)
    for step in decoder_steps:
        state = step.prefix @ state  # (T, S + T)
        if step.source is not None:
            state = state + step.source @ memory  # (T, S + T)
    return state
