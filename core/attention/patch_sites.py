"""What activation patching writes, and where: a component (a head's output, q, k, v or
pattern; a layer's MLP output or output; the encoder's output) and the hook site it is
written at and read from, in the model's own site names (``core.model.hooks``).

Shape key: none (names only).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.attention.kinds import KINDS
from core.model.interface import TranslationModel

STREAMS = ("encoder_stream", "decoder_stream")  # a layer's output, position by position
ENCODER_OUTPUT = "encoder_output"  # the encoder's final output (what the decoder reads)
HEAD_ACTIVATIONS = ("z", "q", "k", "v", "pattern")  # what of a head a component patches
MLPS = ("encoder_mlp", "decoder_mlp")  # a layer's MLP output, position by position


@dataclass(frozen=True)
class Component:
    """One activation to patch: a head's (kind in KINDS; ``activation`` of
    HEAD_ACTIVATIONS), a layer's MLP output (kind in MLPS) or a layer's output (kind in
    STREAMS, or ENCODER_OUTPUT with layer 0), at one position or (None) at every position."""

    kind: str
    layer: int
    head: int | None = None
    position: int | None = None
    activation: str = "z"  # a head's: its output (z), q, k, v or pattern

    def row(self, effect: float) -> dict:
        """The command's line: kind, layer, head (its activation unless z) and position (a
        head's where one is patched), effect."""
        where = {"position": self.position}
        if self.kind in KINDS:
            where = {"head": self.head} if self.position is None else {"head": self.head, **where}
            if self.activation != "z":
                where["activation"] = self.activation
        return {"kind": self.kind, "layer": self.layer, **where, "effect": effect}


def head_site(kind: str, layer: int, m: TranslationModel) -> str:
    """The hook-site prefix of a head's attention: the model's own (its ``gate_site``'s: a
    masked LM's encoder heads sit at its one attention's sites)."""
    return m.gate_site(kind, layer).rsplit(".", 1)[0]


def site(c: Component, m: TranslationModel) -> str:
    """The hook site a component is written at: a head's ``z`` (its pattern's too: z is
    rebuilt from it), ``q``, ``k`` or ``v`` (at ``m``'s own head sites); a
    layer's MLP output, a layer's or the encoder's output."""
    if c.kind in KINDS:
        part = "z" if c.activation == "pattern" else c.activation
        return f"{head_site(c.kind, c.layer, m)}.{part}"
    if c.kind == ENCODER_OUTPUT:
        return "encoder.out"
    side = "encoder" if c.kind in ("encoder_stream", "encoder_mlp") else "decoder"
    return f"{side}.{c.layer}.{'mlp_out' if c.kind in MLPS else 'out'}"


def read_sites(c: Component, m: TranslationModel) -> list[str]:
    """The sites of the donor run a component is patched from: its own, or a pattern's."""
    if c.kind in KINDS and c.activation == "pattern":
        return [f"{head_site(c.kind, c.layer, m)}.pattern"]
    return [site(c, m)]
