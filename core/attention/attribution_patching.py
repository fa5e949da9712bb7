"""Attribution patching (Nanda 2023; Syed et al. 2023): every component's patching effect
estimated at once from one gradient, beside the real patching effect.

Patching a component's activation a from the donor run into the receiving run changes the
metric m by about its first-order term, (a_donor - a_receiver) · ∂m/∂a at the receiving run:
one pass of the donor run, one pass of the receiving run with a backward pass of its metric,
and every component's estimate follows (a head: the sum over its positions and its Dh
dimensions; a layer's output at one position: the sum over D). The estimate is normalised as
``core.attention.patching.patch`` normalises the real effect (the same question, the same gap,
the same direction), so the two are read on one scale; where the real effects are computed
too (``exact``), the result gives Spearman's rank correlation between the two and the largest
absolute difference. The estimate is exact where the metric is linear in the activation (a
layer's output at the last step, in a model whose output layer has no norm), and first-order
elsewhere: a head whose patch moves an attention pattern or a norm's scale far is where it
strays.

Shape key: T decoder inputs (or the sequence's positions at a head of a one-stack model), H
heads, Dh head width, D model width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.attention import patch_sites, patching
from core.attention.kinds import KINDS
from core.attention.patch_sites import Component
from core.attention.patching import (
    DEFAULT_SELECTION,
    DIRECTIONS,
    Patching,
    ask,
)
from core.attention.patching_question import Question, checked_sources, last_logits
from core.measure.progress import check_time
from core.measure.rank import spearman
from core.model.interface import TranslationModel
from core.model.parts import MAX_LEN, TranslationError
from core.runs import budget


@dataclass
class Estimated:
    """Each component's estimated effect (rows' ``estimate``) and, where computed, its real
    effect (rows' ``effect``; None where not computed)."""

    patching: Patching  # the question, both metrics and the rows
    spearman: float | None  # the estimates' rank correlation with the real effects
    largest_error: float | None  # max |estimate - effect| over the components

    def summary(self) -> dict:
        """The command's last line: ``Patching.summary`` and how close the estimate is."""
        return self.patching.summary() | {
            "method": "attribution",
            "spearman": self.spearman,
            "largest_error": self.largest_error,
        }

    def estimate_rows(self) -> list[dict]:
        """The rows with the estimate as their ``effect`` (for the grids of effects)."""
        return [{**r, "effect": r["estimate"]} for r in self.patching.rows]


def _with_gradient(into: dict):
    """A hook adding a zero leaf to the site's activation: the leaf's gradient is the
    metric's derivative by that activation. Keeps (activation, leaf) in ``into``."""

    def hook(x: torch.Tensor, name: str) -> torch.Tensor:
        leaf = torch.zeros_like(x, requires_grad=True)  # (1, T, H, Dh) or (1, T, D)
        into[name] = (x.detach(), leaf)
        return x + leaf

    return hook


def gradients(m: TranslationModel, q: Question, sites: Sequence[str]):
    """({site: the receiving run's activation}, {site: ∂metric/∂activation}, the metric)."""
    kept: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    receiver = q.runs[1]
    with torch.enable_grad(), m.hooks((s, _with_gradient(kept)) for s in sites):
        metric = q.metric(last_logits(m, receiver, q.tgt_in))[0]
        names = list(kept)
        grads = torch.autograd.grad(metric, [kept[s][1] for s in names], allow_unused=True)
    acts = {s: kept[s][0] for s in names}
    grad = {s: torch.zeros_like(acts[s]) if g is None else g for s, g in zip(names, grads)}
    return acts, grad, float(metric.detach())


BACKWARD_ROWS = 3  # a backward pass holds about three rows' bytes: the activations kept for
# it, their gradients and the sites' zero leaves


def backward_problem(m: TranslationModel, q: Question) -> str | None:
    """Why the gradient pass would pass the server's bytes for one pass, in one line (None:
    it fits), read before any pass of the estimate."""
    row = budget.patch_row_bytes(vars(m.cfg), q.clean.size(1), q.tgt_in.size(1), q.prompt)
    if BACKWARD_ROWS * row <= budget.PATCH_BYTES:
        return None
    return (
        f"Attribution patching here would hold {budget.size_words(BACKWARD_ROWS * row)} in its "
        f"backward pass; one pass may hold at most {budget.size_words(budget.PATCH_BYTES)}: use "
        "a shorter sentence or prefix, or activation patching."
    )


def _head(c: Component, site_heads: int, heads: int) -> int:
    """The head of a site with ``site_heads`` heads that ``c`` writes: its own, or for k and v
    of a grouped-query model the key/value head its group shares (as ``patch`` writes it)."""
    return c.head // (heads // site_heads)


def first_order(c: Component, acts: tuple[dict, dict], grad: dict, m: TranslationModel) -> float:
    """(a_donor - a_receiver) · ∂m/∂a over one component's part of its site (``acts``: the
    donor's and the receiver's activations by site); a pattern's through the output it makes,
    (P_donor - P_receiver) @ v_receiver · ∂m/∂z."""
    donor, receiver = acts
    heads = m.cfg.num_heads
    s = patch_sites.site(c, m)
    where = slice(None) if c.position is None else c.position
    if c.kind in KINDS and c.activation == "pattern":
        p = s.rsplit(".", 1)[0]
        v = receiver[f"{p}.v"]  # (1, Tk, Hkv, Dh)
        moved = donor[f"{p}.pattern"] - receiver[f"{p}.pattern"]  # (1, H, Tq, Tk)
        dz = moved[0, c.head].to(v.dtype) @ v[0, :, _head(c, v.size(2), heads)]  # (Tq, Dh)
        return float((dz * grad[s][0, :, c.head]).sum())
    term = (donor[s] - receiver[s]) * grad[s]  # (1, T, H', Dh) a head's site, (1, T, D) else
    if c.kind in KINDS:
        return float(term[0, where, _head(c, term.size(2), heads)].sum())
    return float(term[0, where].sum())


def estimates(m: TranslationModel, q: Question, todo: Sequence[Component]):
    """(each component's first-order change of the metric, m_clean, m_corrupt): one pass of
    the donor run, one of the receiving run with a backward pass (and one more of the
    receiving run where a pattern needs its weights and values)."""
    sites = list(dict.fromkeys(patch_sites.site(c, m) for c in todo))
    reads = list(dict.fromkeys(r for c in todo for r in patch_sites.read_sites(c, m)))
    patterns = [r.rsplit(".", 1)[0] for r in reads if r.endswith(".pattern")]
    donor, receiver = q.runs
    check_time()
    with torch.no_grad():
        logits, seen = patching._recorded(m, reads, donor, q.tgt_in)
        extra = [f"{p}.{part}" for p in patterns for part in ("pattern", "v")]
        own = patching._recorded(m, extra, receiver, q.tgt_in)[1] if extra else {}
    check_time()
    acts, grad, m_receiver = gradients(m, q, sites)
    moved = [first_order(c, (seen, acts | own), grad, m) for c in todo]
    m_donor = float(q.metric(logits)[0])
    pair = (m_donor, m_receiver) if q.direction == "denoise" else (m_receiver, m_donor)
    return moved, *pair


def closeness(estimated: Sequence[float], real: Sequence[float]) -> tuple[float | None, float]:
    """(Spearman's rho, None where either side is constant; the largest absolute difference)
    of estimates against real effects."""
    a, b = np.asarray(estimated, dtype=float), np.asarray(real, dtype=float)
    rho = spearman(a, b)
    return (None if np.isnan(rho) else rho), float(np.abs(a - b).max()) if len(a) else 0.0


def attribution_patch(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    chosen: Sequence[Component] | None = None,
    exact: bool = True,
    max_len: int = MAX_LEN,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str | None = None,
    selection: Sequence[str] = DEFAULT_SELECTION,
) -> Estimated:
    """The gradient's estimate of patching every component of ``selection`` (or ``chosen``),
    asked as ``patch`` asks; with the real effects (``patch`` itself) beside them where
    ``exact``."""
    (ids, _), _ = checked_sources(m, clean, corrupt)  # counted before any pass, as patch
    patching._check_count(m, selection, ids, [m.start_id], chosen)  # counts the fewest
    with m.evaluating():
        q = ask(m, clean, corrupt, direction, prefix, answers, target_lang, max_len)
        tgt = q.tgt_in[0].tolist()
        todo, sequence = patching._check_count(m, selection, ids, tgt, chosen)
        if problem := backward_problem(m, q):
            raise TranslationError(problem)
        moved, m_clean, m_corrupt = estimates(m, q, todo)
    sign = 1.0 if direction == "denoise" else -1.0  # noising reads m_clean - m_patched
    guessed = [sign * x / (m_clean - m_corrupt) for x in moved]
    real: list[float | None] = [None] * len(todo)
    rho = largest = None
    if exact:
        kwargs = {"direction": direction, "prefix": prefix, "answers": answers}
        exact_rows = patching.patch(m, clean, corrupt, todo, max_len, **kwargs,
                                    target_lang=target_lang).rows  # fmt: skip
        real = [r["effect"] for r in exact_rows]
        rho, largest = closeness(guessed, real)
    rows = [c.row(e) | {"estimate": g} for c, e, g in zip(todo, real, guessed)]
    return Estimated(patching.result(q, m, (m_clean, m_corrupt), rows, sequence), rho, largest)
