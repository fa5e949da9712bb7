"""Removing heads, on any model: each head's output scaled before W_o at its ``z`` hook site
(``core.model.hooks``), in the calling thread only, so a model every session shares is never
changed for another. ``TranslationModel`` inherits it; a one-sequence model's heads (decoder-only
or masked) are of one kind, gated at its one attention (its ``gate_site``).

Shape key: B batch, T tokens, H heads, Dh head width.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import contextmanager

import torch

from core.model.hooks import Hook
from core.model.record import KINDS, attention_site


class HeadGates:
    """Heads scaled or removed, row by row, by hooks at their ``z`` sites."""

    @contextmanager
    def rows_gated(self, gates: Mapping[tuple[str, int], torch.Tensor]):
        """Within the block, in this thread, head h of (kind, layer) is scaled by
        ``gates[(kind, layer)]`` ((H,) for every row, or (B, H): row b its own) before W_o;
        0 removes a head, and a gate that requires grad gives each head's gradient."""

        def scale(gate: torch.Tensor) -> Hook:
            def hook(z: torch.Tensor, name: str) -> torch.Tensor:  # (B, T, H, Dh)
                g = gate.to(z.dtype)
                return z * (g[:, None, :, None] if g.dim() == 2 else g[None, None, :, None])

            return hook

        pairs = [(self.gate_site(k, i), scale(g)) for (k, i), g in gates.items()]
        with self.hooks(pairs):
            yield self

    @property
    def head_kinds(self) -> tuple[str, ...]:
        """The kinds whose heads are heads of their own (a decoder-only model's three kinds
        are blocks of one attention: its heads are of one kind)."""
        return KINDS

    def gate_site(self, kind: str, layer: int) -> str:
        """The site where a head of (kind, layer) is scaled: its ``z``."""
        return f"{attention_site(kind, layer)}.z"

    @contextmanager
    def heads_removed(self, heads: Iterable[tuple[str, int, int]]):
        """Within the block, in this thread, each (kind, layer, head) contributes nothing."""
        gates: dict[tuple[str, int], torch.Tensor] = {}
        for kind, layer, head in heads:
            if kind not in KINDS:
                raise ValueError(f"unknown attention kind {kind!r}")
            gate = gates.setdefault(
                (kind, layer), torch.ones(self.cfg.num_heads, device=self.device)
            )
            gate[head] = 0.0
        with self.rows_gated(gates):
            yield self
