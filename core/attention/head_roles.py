"""What a decoder-only model's heads do, measured: previous-token heads, heads that park their
weight on the first token (an attention "sink"), and induction heads.

Over the whole sequence a prompted translation reads (the prompt with the sentence, then the
output fed back), each head's mean weight on the token just before the query (previous-token)
and on the first token (sink), every row after the first; over a random sequence of tokens
read twice (Olsson et al. 2022; TransformerLens's demonstration), each head's mean weight from
a token of the second copy to the token that followed its first occurrence (induction). A role
is named only where its mean weight reaches ``ROLE_SHARE`` (the map shows it); the numbers are
the model's own weights (``TranslationModel.sequence_patterns``).

Shape key: L layers, H heads, N tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.model.interface import TranslationModel
from core.model.parts import Translation

REPEATED_TOKENS = 24  # the random sequence read twice for the induction score
ROLE_SHARE = 0.4  # a role is named where a head's mean weight on it reaches this
ROLES = ("previous-token", "first-token sink", "induction")


@dataclass
class HeadRoles:
    """Every head's score for each role, and the roles its scores reach."""

    previous: np.ndarray  # (L, H) mean weight on the token before the query
    first: np.ndarray  # (L, H) mean weight on the sequence's first token
    induction: np.ndarray  # (L, H) mean weight on the token after the query's earlier copy
    tokens: int  # N, the tokens of the translation's sequence
    repeated: int  # the random tokens read twice

    def roles(self, layer: int, head: int) -> list[str]:
        """The roles this head's scores reach."""
        scores = (self.previous, self.first, self.induction)
        return [name for name, s in zip(ROLES, scores) if s[layer, head] >= ROLE_SHARE]

    def rows(self) -> list[dict]:
        """One JSON-able row per head."""
        L, H = self.previous.shape
        return [
            {
                "layer": layer,
                "head": head,
                "previous": round(float(self.previous[layer, head]), 6),
                "first": round(float(self.first[layer, head]), 6),
                "induction": round(float(self.induction[layer, head]), 6),
                "roles": self.roles(layer, head),
            }
            for layer in range(L)
            for head in range(H)
        ]


def repeated_ids(m: TranslationModel, n: int = REPEATED_TOKENS, seed: int = 0) -> list[int]:
    """The model's start ids, then ``n`` random ordinary tokens, then the same ``n`` again."""
    vocab, _ = m.vocab_sizes()
    special = m.special_ids() | {m.unk_id}
    g = torch.Generator().manual_seed(seed)
    pool = [i for i in torch.randperm(vocab, generator=g).tolist() if i not in special]
    tokens = pool[:n]
    return [*m.start_ids(), *tokens, *tokens]


def induction_scores(weights: np.ndarray, start: int, n: int) -> np.ndarray:
    """(L, H) mean weight from each token of the second copy (but its last) to the token after
    its first occurrence: rows start + n + i, columns start + i + 1."""
    i = np.arange(n - 1)
    return weights[..., start + n + i, start + i + 1].mean(axis=-1)


def head_roles(m: TranslationModel, t: Translation, seed: int = 0) -> HeadRoles:
    """Every head's previous-token, sink and induction scores, from the model's own weights."""
    ids = m.sequence_ids(t.src_ids, t.out_ids)
    with torch.no_grad():
        w = m.sequence_patterns(ids).float().cpu().numpy()  # (L, H, N, N)
    rows = np.arange(1, w.shape[-1])
    previous = w[..., rows, rows - 1].mean(axis=-1)  # (L, H)
    first = w[..., rows, 0].mean(axis=-1)  # (L, H)
    twice = repeated_ids(m, seed=seed)
    start = len(twice) - 2 * REPEATED_TOKENS
    with torch.no_grad():
        r = m.sequence_patterns(twice).float().cpu().numpy()  # (L, H, N', N')
    induction = induction_scores(r, start, REPEATED_TOKENS)
    return HeadRoles(previous, first, induction, len(ids), REPEATED_TOKENS)
