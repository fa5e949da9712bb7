"""One sentence's attention as numpy arrays: ``SentenceMaps``, the three kinds with their tokens.

Shape key: L layers, H heads, S source tokens (with <eos>), T output steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from core.attention.kinds import KINDS, kind_labels
from core.model.parts import Translation


@dataclass
class SentenceMaps:
    """Attention of one sentence as numpy arrays, with the tokens of each axis."""

    encoder: np.ndarray  # (L, H, S, S)
    decoder_self: np.ndarray  # (L, H, T, T)
    cross: np.ndarray  # (L, H, T, S)
    src_tokens: list[str]  # S source tokens, with <eos>
    output_tokens: list[str]  # T tokens each decoder step produced
    decoder_inputs: list[str]  # T tokens each decoder step read: <bos> + output[:-1]

    @classmethod
    def from_translation(cls, t: Translation) -> SentenceMaps:
        """The maps of a Translation (as the decoder actually generated it)."""
        a = t.attention
        arrays = (np.asarray(m, dtype=np.float32) for m in (a.encoder, a.decoder_self, a.cross))
        return cls(*arrays, list(t.src_tokens), list(t.output_tokens), list(t.decoder_inputs))

    @classmethod
    def from_probe(cls, probe: Mapping) -> SentenceMaps:
        """The maps of one probe sentence stored in a training snapshot."""
        arrays = (
            probe[k].float().numpy()
            if isinstance(probe[k], torch.Tensor)
            else np.asarray(probe[k], dtype=np.float32)
            for k in KINDS
        )
        return cls(
            *arrays,
            list(probe["src_tokens"]),
            list(probe["output_tokens"]),
            list(probe["decoder_inputs"]),
        )

    def weights(self, kind: str) -> np.ndarray:
        """(L, H, Tq, Tk) maps of one kind."""
        kind_labels(kind)  # raises for an unknown kind
        return getattr(self, kind)

    def tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of one kind."""
        return {
            "encoder": (self.src_tokens, self.src_tokens),
            "decoder_self": (self.output_tokens, self.decoder_inputs),
            "cross": (self.output_tokens, self.src_tokens),
        }[kind]

    @property
    def drawn_kinds(self) -> list[str]:
        """The kinds with a map to draw: rows and columns (a model trained here on the
        induction task reads no source: it has no encoder or cross map)."""
        return [k for k in KINDS if all(self.tokens(k))]

    def shown_kind(self, kind: str) -> str:
        """``kind`` where these maps draw it, else the first kind they draw (a one-stack
        model's training snapshot holds one: its pass over a sequence)."""
        drawn = self.drawn_kinds
        return kind if kind in drawn or not drawn else drawn[0]

    def layers(self, kind: str) -> int:
        """Number of layers of one kind."""
        return self.weights(kind).shape[0]

    @property
    def heads(self) -> int:
        """Heads per layer."""
        return self.encoder.shape[1]
