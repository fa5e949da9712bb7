"""Path patching (Wang et al. 2023, "Interpretability in the Wild"): a sender head's effect on
the metric through a set of receivers only.

The question and the normalisation are activation patching's (``core.attention.patching``):
denoising writes the clean run into the corrupted one, and an effect of 1 is the clean run's
metric. Wang et al.'s three steps, for each sender head h_s at once in a batch:

1. the clean and the corrupted runs, their heads' outputs (``z``) kept (and their MLPs',
   ``mlp_out``, with ``freeze_mlps``);
2. the corrupted run with h_s's output taken from the clean run and every other head's output
   (and every MLP's, with ``freeze_mlps``) frozen at the corrupted run's, so that the sender's
   change travels only along the residual stream: each receiver's output is read as its
   inputs (queries, keys, values) make it then, and frozen in turn so that no receiver passes
   the change on to another;
3. the corrupted run with only the receivers' outputs replaced by step 2's, everything
   downstream of them recomputed; the metric is read.

Receivers are heads (their inputs: the residual stream they read) or ``logits``: the last
layer's output as the output layer reads it, where step 2's metric is the answer. By default
only heads are frozen, as Wang et al. do (their step 2 freezes every other head and recomputes
the MLPs; ARENA's replication of their paper does the same): the change a sender writes also
reaches a receiver through the MLPs between them, and a path to the logits is the sender's
direct effect and its effect through the MLPs after it. ``freeze_mlps`` freezes every
layer's MLP output too (the ``mlp_out`` sites, which every family has: ``{side}.{i}.mlp_out``
of an encoder-decoder and the studio's model, ``decoder.{i}.mlp_out`` of a one-stack model)
at the receiving run's, so that the change travels along the residual stream alone: a path to
the logits is then the sender's direct effect only. Norms are recomputed either way. A
receiver upstream of the sender (or a sender in no path to it) reads an unchanged stream: an
effect of 0.

Shape key: B rows (one sender each), T positions a head's site holds, H heads, Dh head width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.attention import patch_sites, patching
from core.attention.patch_sites import Component
from core.attention.patching import DIRECTIONS, ROWS, Patching, ask
from core.attention.patching_question import Question, last_logits
from core.measure.progress import check_time
from core.model.hooks import capture
from core.model.interface import TranslationModel
from core.model.parts import MAX_LEN, TranslationError
from core.runs import budget

LOGITS = "logits"  # the receiver that is the output layer itself
HEAD_FORMAT = "L.H (layer.head, from 0), or kind:L.H where the model has several kinds"


@dataclass
class PathPatching:
    """Each sender head's effect through ``receivers`` (rows: ``Component.row``)."""

    patching: Patching  # the question, both metrics and one row per sender
    receivers: list[str]  # "logits" or each receiver head as kind:L.H
    freeze_mlps: bool = False  # the MLPs frozen with the heads (else recomputed)

    def summary(self) -> dict:
        """The command's last line: ``Patching.summary``, the method, the receivers and
        whether the MLPs were frozen."""
        return self.patching.summary() | {
            "method": "path",
            "receivers": self.receivers,
            "freeze_mlps": self.freeze_mlps,
        }


def head_name(c: Component) -> str:
    """kind:L.H, as ``parse_heads`` reads it."""
    return f"{c.kind}:{c.layer}.{c.head}"


def _one_head(m: TranslationModel, text: str) -> Component:
    """One head written L.H or kind:L.H; TranslationError in one line unless the model has it."""
    kind, _, where = text.strip().rpartition(":")
    kinds = m.head_kinds
    if not kind and len(kinds) == 1:
        kind = kinds[0]
    layer, dot, head = where.partition(".")
    if kind not in kinds or not dot or not (layer.isdigit() and head.isdigit()):
        names = ", ".join(kinds)
        raise TranslationError(f"“{text.strip()}” is not a head: write {HEAD_FORMAT} ({names}).")
    c = Component(kind, int(layer), int(head))
    if c.layer >= m.layers(kind) or c.head >= m.cfg.num_heads:
        raise TranslationError(
            f"This model has no head {head_name(c)}: {m.layers(kind)} layers of "
            f"{m.cfg.num_heads} heads there (counted from 0)."
        )
    return c


def parse_heads(m: TranslationModel, text: str) -> list[Component] | str:
    """Receivers as typed: ``logits``, or heads (``HEAD_FORMAT``) separated by commas."""
    if text.strip().lower() == LOGITS:
        return LOGITS
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise TranslationError(f"Name the receivers: {LOGITS}, or heads written {HEAD_FORMAT}.")
    return list(dict.fromkeys(_one_head(m, p) for p in parts))


def every_head(m: TranslationModel) -> list[Component]:
    """Every head of every kind, as ``patching.components`` lists them."""
    return [
        Component(kind, layer, head)
        for kind in m.head_kinds
        for layer in range(m.layers(kind))
        for head in range(m.cfg.num_heads)
    ]


def _head_sites(m: TranslationModel) -> list[str]:
    """Every head's ``z`` site."""
    return list(dict.fromkeys(patch_sites.site(c, m) for c in every_head(m)))


def mlp_sites(m: TranslationModel) -> list[str]:
    """Every layer's MLP output site (``mlp_out``) the model has, encoder's then decoder's."""
    points = m.hook_points()
    names = [
        patch_sites.site(Component(mlp, layer), m)
        for mlp, stream in zip(patch_sites.MLPS, patch_sites.STREAMS)
        for layer in range(m.layers(stream))
    ]
    return [s for s in names if s in points]


def _frozen_sites(m: TranslationModel, freeze_mlps: bool) -> list[str]:
    """The sites step 2 freezes: every head's, and every MLP's with ``freeze_mlps``."""
    return _head_sites(m) + (mlp_sites(m) if freeze_mlps else [])


def _freeze(m: TranslationModel, frozen, donor, senders: Sequence[Component], receivers, seen):
    """Step 2's hook: each row's heads (and MLPs, where frozen) at the receiving run's
    outputs, its sender's from the donor run; the receivers' outputs as computed kept in
    ``seen`` first."""

    def hook(x: torch.Tensor, name: str) -> torch.Tensor:
        if any(patch_sites.site(r, m) == name for r in receivers):
            seen[name] = x.detach().clone()  # (B, T, H, Dh)
        out = frozen[name].expand_as(x).clone()  # (B, T, H, Dh) a head's, (B, T, D) an MLP's
        for row, s in enumerate(senders):
            if patch_sites.site(s, m) == name:
                out[row, :, s.head] = donor[name][0, :, s.head]
        return out

    return hook


def _receive(step2: torch.Tensor, heads: Sequence[int]):
    """Step 3's hook: the receivers' outputs (heads of one site) from step 2, row by row."""

    def hook(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()  # (B, T, H, Dh)
        x[:, :, heads] = step2[:, :, heads]
        return x

    return hook


def path_metrics(
    m: TranslationModel, q: Question, senders: Sequence[Component], receivers, acts: tuple
) -> torch.Tensor:
    """(B,) the metric with each row's sender reaching it only through ``receivers``;
    ``acts``: (the donor run's, the receiving run's) outputs by site: the sites step 2
    freezes are those of the receiving run's."""
    donor, frozen = acts
    receiver = q.runs[1]
    B = len(senders)
    src, tgt_in = receiver.expand(B, -1), q.tgt_in.expand(B, -1)  # (B, S), (B, T)
    heads = [] if receivers == LOGITS else receivers
    seen: dict[str, torch.Tensor] = {}
    hook = _freeze(m, frozen, donor, senders, heads, seen)
    with m.hooks((s, hook) for s in frozen):
        logits = last_logits(m, src, tgt_in)  # (B, V)
    if receivers == LOGITS:
        return q.metric(logits)
    by_site: dict[str, list[int]] = {}
    for r in heads:
        by_site.setdefault(patch_sites.site(r, m), []).append(r.head)
    with m.hooks((s, _receive(seen[s], h)) for s, h in by_site.items()):
        return q.metric(last_logits(m, src, tgt_in))  # (B,)


@torch.no_grad()
def path_patch(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    receivers: str | Sequence[Component],
    senders: Sequence[Component] | None = None,
    max_len: int = MAX_LEN,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str | None = None,
    freeze_mlps: bool = False,
) -> PathPatching:
    """Each sender head's (every head's, or ``senders``') effect through ``receivers`` only
    (``LOGITS`` or heads), asked and normalised as ``patching.patch`` does; ``freeze_mlps``:
    the MLPs frozen with the heads (the residual stream the only path)."""
    if receivers != LOGITS and not receivers:
        raise TranslationError(f"Name the receivers: {LOGITS}, or heads written {HEAD_FORMAT}.")
    todo = list(senders) if senders is not None else every_head(m)
    with m.evaluating():
        q = ask(m, clean, corrupt, direction, prefix, answers, target_lang, max_len)
        sites, metrics, runs = _frozen_sites(m, freeze_mlps), [], []
        for source in q.runs:  # the donor's and the receiving run's head outputs and metrics
            check_time()  # a shared server's limit for one heavy job: before every pass
            seen: dict[str, torch.Tensor] = {}
            with m.hooks((s, capture(seen)) for s in sites):
                metrics.append(float(q.metric(last_logits(m, source, q.tgt_in))[0]))
            runs.append(seen)
        m_clean, m_corrupt = metrics if q.direction == "denoise" else metrics[::-1]
        S, T = q.clean.size(1), q.tgt_in.size(1)
        rows = budget.patch_rows(vars(m.cfg), S, T, ROWS, q.prompt)
        effects: list[float] = []
        for start in range(0, len(todo), rows):
            check_time()
            chunk = todo[start : start + rows]
            metrics = path_metrics(m, q, chunk, receivers, tuple(runs))  # (B,)
            effects += q.effects(metrics, m_clean, m_corrupt)
    named = [LOGITS] if receivers == LOGITS else [head_name(r) for r in receivers]
    rows_out = [c.row(e) for c, e in zip(todo, effects)]
    return PathPatching(patching.result(q, m, (m_clean, m_corrupt), rows_out), named, freeze_mlps)


def path_patch_named(
    m: TranslationModel, clean: str, corrupt: str, receivers: str, sender: str = "", **asked
) -> PathPatching:
    """``path_patch`` of the receivers and the sender as typed (``parse_heads``; no sender:
    every head), as the page and ``python -m core.patch`` take them."""
    senders = parse_heads(m, sender) if sender.strip() else None
    if senders == LOGITS:
        raise TranslationError("The sender is a head, not the logits.")
    return path_patch(m, clean, corrupt, parse_heads(m, receivers), senders, **asked)
