"""What a decoder-only model's heads do, measured: previous-token heads, heads that park their
weight on the first token (an attention "sink"), duplicate-token heads and induction heads.

Over the whole sequence a prompted translation reads (the prompt with the sentence, then the
output fed back), each head's mean weight on the token just before the query (previous-token)
and on the first token (sink), every row after the first; over a random sequence of tokens
read twice (Olsson et al. 2022; TransformerLens's demonstration), each head's mean weight from
a token of the second copy to the same token in the first (duplicate) and to the token that
followed it there (induction), with ``head_detectors``' patterns. A role is named only where
its mean weight reaches ``ROLE_SHARE`` (the map shows it); the numbers are the model's own
weights (``core.model.interface.token_weights``).

Shape key: L layers, H heads, N tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.attention.head_detectors import random_tokens
from core.model.detector_scores import detection_patterns, pattern_score
from core.model.interface import TranslationModel, token_weights
from core.model.parts import Translation

REPEATED_TOKENS = 24  # the random sequence read twice for the induction score
ROLE_SHARE = 0.4  # a role is named where a head's mean weight on it reaches this
ROLES = ("previous-token", "first-token sink", "duplicate-token", "induction")


@dataclass
class HeadRoles:
    """Every head's score for each role, and the roles its scores reach."""

    previous: np.ndarray  # (L, H) mean weight on the token before the query
    first: np.ndarray  # (L, H) mean weight on the sequence's first token
    duplicate: np.ndarray  # (L, H) mean weight on the query's own token in the first copy
    induction: np.ndarray  # (L, H) mean weight on the token after the query's earlier copy
    tokens: int  # N, the tokens of the translation's sequence
    repeated: int  # the random tokens read twice

    def roles(self, layer: int, head: int) -> list[str]:
        """The roles this head's scores reach."""
        return [name for name, s in zip(ROLES, self.grids()) if s[layer, head] >= ROLE_SHARE]

    def grids(self) -> tuple[np.ndarray, ...]:
        """The (L, H) scores of every role, in ``ROLES``' order."""
        return (self.previous, self.first, self.duplicate, self.induction)

    def rows(self) -> list[dict]:
        """One JSON-able row per head."""
        L, H = self.previous.shape
        return [
            {
                "layer": layer,
                "head": head,
                "previous": round(float(self.previous[layer, head]), 6),
                "first": round(float(self.first[layer, head]), 6),
                "duplicate": round(float(self.duplicate[layer, head]), 6),
                "induction": round(float(self.induction[layer, head]), 6),
                "roles": self.roles(layer, head),
            }
            for layer in range(L)
            for head in range(H)
        ]


def repeated_ids(m: TranslationModel, n: int = REPEATED_TOKENS, seed: int = 0) -> list[int]:
    """The model's start ids, then ``n`` random ordinary tokens (``head_detectors``' draw),
    then the same ``n`` again."""
    tokens = random_tokens(m, n, 1, seed)[0]
    return [*m.start_ids(), *tokens, *tokens]


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


def head_roles(m: TranslationModel, t: Translation, seed: int = 0) -> HeadRoles:
    """Every head's previous-token, sink and induction scores, from the model's own weights
    (ValueError in one line for a model whose capability row refuses ``head_roles``)."""
    if problem := m.supports("head_roles"):
        raise ValueError(problem)
    whole = m.forced(t.src_ids, t.out_ids).one_stack  # its pass over its whole sequence
    w = torch.stack([a.weights[0] for a in whole.attention]).float().cpu().numpy()  # (L, H, N, N)
    rows = np.arange(1, w.shape[-1])
    previous = w[..., rows, rows - 1].mean(axis=-1)  # (L, H)
    first = w[..., rows, 0].mean(axis=-1)  # (L, H)
    twice = repeated_ids(m, seed=seed)
    start = len(twice) - 2 * REPEATED_TOKENS
    r = token_weights(m, twice).float().cpu()  # (L, H, N', N')
    repeat = repeat_scores(r, start, REPEATED_TOKENS)
    return HeadRoles(
        previous,
        first,
        repeat["duplicate_token"],
        repeat["induction"],
        w.shape[-1],
        REPEATED_TOKENS,
    )
