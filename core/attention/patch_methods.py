"""The three patching methods' names: activation patching (``core.attention.patching``),
attribution patching (``core.attention.attribution_patching``) and path patching
(``core.attention.path_patching``), each asking ``patching.ask``'s one question."""

from __future__ import annotations

METHODS = ("activation", "attribution", "path")  # how a patching question is answered: each
# component patched for real, the gradient's estimate of every patch at once, or each head's
# effect through chosen receivers only
METHOD_NAMES = {
    "activation": "activation",
    "attribution": "attribution (fast estimate)",
    "path": "path (through receivers)",
}
