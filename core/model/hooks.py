"""Named hook sites: the one place where the analysis reads or changes what a model computes,
for every family (TransformerLens's ``HookPoint``, made per thread).

A model passes each activation the analysis may read through a ``HookPoint`` named by where
it sits (``encoder.embed``, ``decoder.1.cross.z``; the names in ``SITES``): the studio's
Transformer calls its hook points in its own forward, a Hugging Face model has permanent
forward hooks that call them (``core.model.sites``). A hook point returns its input
unchanged, at the cost of one integer test, unless the calling thread has hooks on for it
(``hooked``): then each hook ``fn(x, name)`` may return a replacement. Hooks are per thread,
so a model shared by every session of the app is never changed for another session, with no
private copy and no lock.

Sites (``p`` is an attention: ``encoder.{i}.self``, ``decoder.{i}.self``, ``decoder.{i}.cross``;
``s`` a layer: ``encoder.{i}``, ``decoder.{i}``), each readable; those in ``WRITABLE`` can
be replaced on every family:

- ``encoder.embed``, ``decoder.embed``  (B, T, D) the token embedding module's output
- ``{s}.in``, ``{s}.out``              (B, T, D) a layer's input and output
- ``{p}.queries``, ``{p}.keys``        (B, T, D) what queries and keys/values are made from
  (``keys`` only where it is not ``queries``: cross-attention)
- ``{p}.q``, ``{p}.k``, ``{p}.v``        (B, Tq|Tk, H, Dh) the queries, keys and values per head
  (a one-stack model's as projected, over its whole sequence, before any rotation; its k and
  v have the key/value heads of grouped-query attention, Hkv, not repeated per group)
- ``{p}.rot_q``, ``{p}.rot_k``          (B, N, H|Hkv, Dh) q and k after the rotary embedding
  (a one-stack model of a rotary family, TransformerLens's ``hook_rot_q``; read only)
- ``{p}.pattern``                      (B, H, Tq, Tk) the attention weights (read only)
- ``{p}.position_bias``                (B|1, H, Tq, Tk) a relative-position bias (T5, read only)
- ``{p}.z``                            (B, Tq, H, Dh) each head's output, before W_o
- ``{p}.out``                          (B, Tq, D) the attention's output, W_o's bias included
- ``{p}.resid_post``                   (B, Tq, D) the stream after the sub-layer (read only;
  a one-stack model's is ``{s}.resid_mid``)
- ``{s}.mlp_out``                      (B, T, D) what the feed-forward adds to the stream
- ``decoder.{i}.resid_mid``, ``.mlp_in`` (B, N, D) a one-stack model's stream between attention
  and feed-forward (none in a parallel family) and the feed-forward's input (read only)
- ``decoder.{i}.ln1.scale``, ``.ln2.scale`` (B, N, 1) what a pre-LN one-stack model's norms
  divide the stream by, √(var + ε) or √(mean x² + ε) (TransformerLens's ``hook_scale``; read
  only; ``ln2`` none in a parallel family); ``decoder.ln_final.scale`` the final norm's
- ``encoder.out``                      (B, S, D) the encoder's output (the decoder's memory)
- ``decoder.out``                      (B, T, D) the decoder's output before the vocabulary
  projection (read only)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager

import torch

Hook = Callable[[torch.Tensor, str], torch.Tensor | None]  # (activation, site) -> replacement
WRITABLE = ("embed", "in", "out", "q", "k", "v", "z", "mlp_out")  # the last part of a site
# name writes may target

_local = threading.local()  # this thread's {HookPoint: [hooks]}
_lock = threading.Lock()
_threads_on = [0]  # how many threads have hooks on (the fast path's one test)


class HookPoint:
    """One named site in a forward pass: ``x = point(x)`` (hooks of this thread only).
    ``part``: its name within its module (a model prefixes it into ``name``)."""

    __slots__ = ("name", "part")

    def __init__(self, part: str = "", name: str = ""):
        self.part, self.name = part, name or part

    def on(self) -> bool:
        """Whether this thread has a hook on this site (so a caller may skip reshaping)."""
        return bool(_threads_on[0]) and self in _hooks_here()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not _threads_on[0]:
            return x
        for fn in _hooks_here().get(self, ()):
            out = fn(x, self.name)
            if out is not None:
                x = out
        return x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def any_on() -> bool:
    """Whether any thread has hooks on (a permanent hook's first, cheap test)."""
    return bool(_threads_on[0])


def _hooks_here() -> dict:
    """This thread's hooks by hook point."""
    return getattr(_local, "hooks", None) or {}


@contextmanager
def hooked(points: Mapping[str, HookPoint], hooks: Iterable[tuple[str, Hook]]):
    """Within the block, in this thread only, each (site name, hook) runs at that site of
    ``points`` (a model's ``hook_points()``); KeyError naming a site the model lacks."""
    table: dict[HookPoint, list[Hook]] = {}
    for name, fn in hooks:
        if name not in points:
            raise KeyError(f"no hook site {name!r} in this model")
        table.setdefault(points[name], []).append(fn)
    before = _hooks_here()
    merged = {p: [*before.get(p, ()), *table.get(p, ())] for p in {*before, *table}}
    with _lock:
        _threads_on[0] += 1
    _local.hooks = merged
    try:
        yield
    finally:
        _local.hooks = before
        with _lock:
            _threads_on[0] -= 1


def capture(into: dict, detach: bool = True) -> Hook:
    """A hook keeping each site's activation in ``into`` by name (changing nothing)."""

    def keep(x: torch.Tensor, name: str) -> None:
        into[name] = x.detach() if detach else x

    return keep


def replace_with(value: torch.Tensor) -> Hook:
    """A hook replacing the site's activation by ``value`` (same shape)."""

    def put(x: torch.Tensor, name: str) -> torch.Tensor:
        if value.shape != x.shape:
            raise ValueError(
                f"{name}: a {tuple(value.shape)} tensor cannot replace {tuple(x.shape)}"
            )
        return value

    return put


def writable(name: str) -> bool:
    """Whether hooks may replace this site's activation on every family."""
    return name.rsplit(".", 1)[-1] in WRITABLE
