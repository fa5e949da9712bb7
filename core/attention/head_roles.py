"""What a model's heads do, measured, attention by attention: previous-token (and, where a query
may look forward, next-token) heads, heads that park their weight on the first or the last
token (an attention "sink"), duplicate-token heads and induction heads.

Every family, through the door (``core.model.kind_weights``): each self-attention reads one
sequence of its own (an encoder's over the source, both ways; a decoder's causal one over the
output fed back; a one-stack model's over its whole sequence), and its roles are defined there
as on a decoder-only model. Over the pass of a translation, each head's mean weight on the
token just before the query (previous-token), just after it (next-token: an attention that may
look forward), on the first token and on the last (sinks; the last only where every query may
see it, so not in a causal attention), every row but the one whose own token that is; over
random tokens read twice (Olsson et al. 2022; TransformerLens's demonstration), each head's mean
weight from a token of the second copy to the same token in the first (duplicate) and to the
token that followed it there (induction), with ``head_detectors``' patterns. Cross-attention
reads the source from the output, so it has no previous token and no copy of its own: what it
gets is its sinks, the source's first token and its last (the end token, or a multilingual
model's language code after it), the "no-op" a head parks its weight on when nothing in the
source is for it (Clark et al. 2019; Kobayashi et al. 2020); where it aligns is the Maps' head
statistics and the Alignment section. A role is named only where its mean weight reaches
``ROLE_SHARE`` (the map shows it); the numbers are the model's own weights.

Shape key: L layers, H heads, Tq queries, Tk keys, N tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.attention.head_detectors import ordinary_tokens, random_tokens
from core.model.detector_scores import detection_patterns, pattern_score
from core.model.interface import TranslationModel
from core.model.kind_weights import KindWeights, translation_weights, twice_weights
from core.model.parts import Translation

REPEATED_TOKENS = 24  # the random sequence read twice (fewer where a vocabulary holds fewer)
ROLE_SHARE = 0.4  # a role is named where a head's mean weight on it reaches this
ROLES = {  # a score's name in the rows: the role's name, in the figures' order
    "previous": "previous-token",
    "next": "next-token",
    "first": "first-token sink",
    "last": "last-token sink",
    "duplicate": "duplicate-token",
    "induction": "induction",
}


@dataclass
class AttentionRoles:
    """One attention's heads: every head's score for each role this attention can have."""

    kind: str  # an attention kind, or the one attention of a one-stack model ("sequence")
    scores: dict[str, np.ndarray]  # score name (``ROLES``' keys) -> (L, H), in ROLES' order
    tokens: int  # Tq, its queries over the translation
    repeated: int  # the random tokens read twice (0: none, cross-attention)

    def roles(self, layer: int, head: int) -> list[str]:
        """The roles this head's scores reach."""
        return [ROLES[name] for name, s in self.scores.items() if s[layer, head] >= ROLE_SHARE]

    def grids(self) -> dict[str, np.ndarray]:
        """{role's name: (L, H) scores} of the roles this attention can have."""
        return {ROLES[name]: s for name, s in self.scores.items()}

    def rows(self) -> list[dict]:
        """One JSON-able row per head (a score with no row to average over is None)."""
        L, H = next(iter(self.scores.values())).shape
        return [
            {"kind": self.kind, "layer": layer, "head": head}
            | {name: _rounded(s[layer, head]) for name, s in self.scores.items()}
            | {"roles": self.roles(layer, head)}
            for layer in range(L)
            for head in range(H)
        ]


@dataclass
class HeadRoles:
    """Every attention's head roles, in the model's order."""

    attentions: list[AttentionRoles]

    def of(self, kind: str) -> AttentionRoles:
        """One attention's roles (KeyError for a kind this model does not have)."""
        found = {a.kind: a for a in self.attentions}
        if kind not in found:
            raise KeyError(f"no {kind!r} attention here; this model has {', '.join(found)}")
        return found[kind]

    def rows(self) -> list[dict]:
        """One JSON-able row per head of every attention."""
        return [row for a in self.attentions for row in a.rows()]


def _rounded(x: float) -> float | None:
    """A score for JSON: six decimals, None where it is not a number."""
    return None if np.isnan(x) else round(float(x), 6)


def repeated_tokens(m: TranslationModel, seed: int = 0) -> tuple[list[int], list[int]]:
    """(source tokens, output tokens): ``REPEATED_TOKENS`` random ordinary ids of each of the
    model's vocabularies (``head_detectors``' draw; as many as the smaller holds, where it holds
    fewer, at least 2), each read twice for the duplicate and induction scores."""
    n = min(REPEATED_TOKENS, *(ordinary_tokens(m, side) for side in (0, 1)))
    return tuple(random_tokens(m, max(n, 2), 1, seed, side)[0] for side in (0, 1))


def repeat_scores(weights: torch.Tensor, start: int, n: int) -> dict[str, np.ndarray]:
    """{"duplicate_token", "induction": (L, H)} of (L, H, N, N) weights over a sequence whose
    n random tokens read twice begin at ``start``: ``head_detectors``' patterns, placed there."""
    N = weights.shape[-1]
    out = {}
    for name in ("duplicate_token", "induction"):
        pattern = detection_patterns(n)[name]  # (2n + 1, 2n + 1): a start token, then the copies
        placed = torch.zeros(N, N)
        placed[start : start + 2 * n, start : start + 2 * n] = pattern[1:, 1:]  # its start left
        out[name] = pattern_score(weights, placed).numpy()  # out: no pattern reads it
    return out


def _mean(w: np.ndarray, rows: np.ndarray, keys: np.ndarray | int) -> np.ndarray:
    """(L, H) the mean weight of (L, H, Tq, Tk) ``w`` at (row, key) over ``rows`` (NaN where
    there is no row)."""
    if not len(rows):
        return np.full(w.shape[:2], np.nan)
    return w[..., rows, keys].mean(-1)


def translation_scores(a: KindWeights) -> dict[str, np.ndarray]:
    """{score name: (L, H)} of one attention over a translation: previous- and next-token
    (a self-attention; next where it may look forward) and the first and last tokens (the last
    where every query may see it), each over the rows whose own token it is not."""
    w = a.weights.numpy()  # (L, H, Tq, Tk)
    Tq, Tk = w.shape[-2:]
    q = np.arange(Tq)
    out = {}
    if a.own:
        out["previous"] = _mean(w, q[1:], q[1:] - 1)
    if a.looks_ahead:
        out["next"] = _mean(w, q[:-1], q[:-1] + 1)
    out["first"] = _mean(w, q[1:] if a.own else q, 0)  # a self-attention's row 0 is its own
    if bool(a.mask[:, -1].all()):
        out["last"] = _mean(w, q[:-1] if a.own else q, Tk - 1)
    return out


def attention_roles(
    a: KindWeights, twice: tuple[torch.Tensor, int] | None, n: int
) -> AttentionRoles:
    """One attention's roles from its weights over a translation and, for a self-attention,
    ``twice``: its (L, H, N, N) weights over n random tokens read twice and where they begin."""
    scores = translation_scores(a)
    if twice is not None:
        repeat = repeat_scores(*twice, n)
        scores |= {"duplicate": repeat["duplicate_token"], "induction": repeat["induction"]}
    ordered = {name: scores[name] for name in ROLES if name in scores}
    return AttentionRoles(a.kind, ordered, a.weights.shape[-2], n if twice else 0)


def head_roles(m: TranslationModel, t: Translation, seed: int = 0) -> HeadRoles:
    """Every attention's head roles, from the model's own weights over ``t`` fed back and over
    random tokens read twice (ValueError in one line for a model whose capability row refuses
    ``head_roles``)."""
    if problem := m.supports("head_roles"):
        raise ValueError(problem)
    source, output = repeated_tokens(m, seed)
    twice = twice_weights(m, source, output)  # {self-attention: (weights, where they begin)}
    over = translation_weights(m, t.src_ids, t.out_ids)
    return HeadRoles([attention_roles(a, twice.get(a.kind), len(output)) for a in over])
