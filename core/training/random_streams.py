"""Training's random streams: save them with a checkpoint, continue them, keep them still.

A resumed run continues the saved streams, so it draws the same dropout masks as an unbroken
one; evaluation and probe translations run inside ``kept_random_streams``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def rng_state() -> dict:
    """Every random stream training draws from: torch's CPU, CUDA and MPS generators, Python's.

    (Batches are drawn from their own generator, seeded by the seed and the epoch.)
    """
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state) -> None:
    """Continue the random streams saved by rng_state (or an old checkpoint's CPU state)."""
    if isinstance(state, torch.Tensor):  # older checkpoints saved the CPU state only
        state = {"torch": state}
    torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    if "mps" in state and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


@contextmanager
def kept_random_streams() -> Iterator[None]:
    """Run a block (evaluation, probes) without moving training's random streams."""
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)
