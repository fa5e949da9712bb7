"""Every head's previous-token, duplicate-token and induction scores (TransformerLens's head
detector) and the in-context-learning score (Olsson et al. 2022), on random tokens read twice.

The sequence is TransformerLens's: a start token, then ``n`` random tokens of the model's
vocabulary (no special token, none twice), then the same ``n`` again. Any model that writes its
output token by token reads it the same way, as the decoder's inputs of one teacher-forced
pass (``TranslationModel.patterns`` and ``token_losses``), after the model's example sentence
as its source (a decoder-only model: its prompt template around that sentence, then the
sequence); the heads scored are the decoder's self-attention heads (a decoder-only model's
only ones). A masked language model has no next token to predict (``supports``).

A head's score for a pattern is TransformerLens's "mul" measure (``exclude_bos`` and
``exclude_current_token`` off, its defaults), the attention weight on the pattern's cells,
divided by the rows the pattern reaches instead of by every row, so that a perfect head scores
1: previous-token, query i to key i-1 (rows 1..2n); duplicate-token, a token of the second
copy to its first occurrence (query n+i to key i, rows n+1..2n); induction, to the token after
it (query n+i to key i+1). TransformerLens's own number is this one times (rows / (2n+1)).
Scores are averaged over the sequences. The in-context-learning score is Olsson's loss at the
500th token minus the loss at the 50th, at positions scaled to this context (about 98 % and
10 % of its 2n+1 tokens): negative where later tokens are predicted better.
The formulas are ``core.model.detector_scores``', which a training run scores its model with
(``core.training.circuits``).

Shape key: L layers, B sequences, H heads, N = 2n + 1 tokens, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.model import detector_scores as formulas
from core.model.batched import token_losses
from core.model.detector_scores import SCORES, icl_positions, scores_of
from core.model.detector_scores import detection_patterns as detection_patterns  # re-exported
from core.model.interface import TranslationModel, prompt_positions

LENGTH = 20  # n: random tokens in each copy
SEQUENCES = 8  # B: sequences the scores are averaged over
SEED = 0  # of the random tokens
LENGTHS = (2, 256)  # the n a page or command may ask for
SEQUENCE_COUNTS = (1, 64)  # the B a page or command may ask for
SEEDS = (0, 2**31 - 1)
PASS_BYTES = 256 * 2**20  # the most one pass's weights and logits may hold (float32)


class HeadScoresError(ValueError):
    """The head scores cannot be computed for this model or with these sizes."""


@dataclass
class HeadScores:
    """Every decoder head's three scores, and the losses along the repeated sequence."""

    previous_token: torch.Tensor  # (L, H)
    duplicate_token: torch.Tensor  # (L, H)
    induction: torch.Tensor  # (L, H)
    losses: torch.Tensor  # (N - 1,) mean loss of token 1 .. N - 1 over the sequences
    length: int  # n
    sequences: int  # B
    seed: int

    @property
    def early_late(self) -> tuple[int, int]:
        """The tokens (counted from 0, the start token) Olsson's 50th and 500th become here."""
        return icl_positions(2 * self.length + 1)

    @property
    def icl(self) -> float:
        """Loss at the late token minus loss at the early one (Olsson et al. 2022)."""
        return formulas.icl_score(self.losses, self.length)

    @property
    def first_copy_loss(self) -> float:
        """Mean loss over the first copy's tokens (random: about ln V for a trained model)."""
        return formulas.first_copy_loss(self.losses, self.length)

    @property
    def repeat_loss(self) -> float:
        """Mean loss over the second copy's tokens (near 0 where induction heads copy)."""
        return formulas.repeat_loss(self.losses, self.length)

    def rows(self) -> list[dict]:
        """One JSON-able row per head."""
        L, H = self.induction.shape
        return [
            {"layer": i, "head": h}
            | {name: round(float(getattr(self, name)[i, h]), 6) for name in SCORES}
            for i in range(L)
            for h in range(H)
        ]

    def summary(self) -> dict:
        """The sequence, the in-context-learning score and the losses it compares."""
        early, late = self.early_late
        return {
            "length": self.length,
            "sequences": self.sequences,
            "seed": self.seed,
            "icl": round(self.icl, 6),
            "early_token": early,
            "late_token": late,
            "first_copy_loss": round(self.first_copy_loss, 6),
            "repeat_loss": round(self.repeat_loss, 6),
        }


def specials(m: TranslationModel) -> set[int | None]:
    """The ids no random sequence holds: start, end, padding, unknown, mask, ``special_ids``."""
    return m.special_ids() | {m.start_id, m.eos_id, m.pad_id, m.unk_id, m.mask_id}


def ordinary_tokens(m: TranslationModel, side: int = 1) -> int:
    """How many ids of the model's output vocabulary (``side`` 0: its source vocabulary) are
    no special token: the longest random sequence it can read."""
    vocab = m.vocab_sizes()[side]
    return vocab - len(specials(m) & set(range(vocab)))


def random_tokens(
    m: TranslationModel, n: int, sequences: int, seed: int, side: int = 1
) -> list[list[int]]:
    """``sequences`` lists of n distinct random ids of the model's output vocabulary (``side``
    0: its source vocabulary), none of them special (start, end, padding, unknown, mask or
    ``special_ids``)."""
    vocab = m.vocab_sizes()[side]
    special = specials(m)
    if ordinary_tokens(m, side) < n:
        raise HeadScoresError(f"This model's vocabulary has fewer than {n} ordinary tokens.")
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(sequences):
        order = torch.randperm(vocab, generator=g).tolist()
        rows.append([i for i in order[: n + len(special)] if i not in special][:n])
    return rows


def pass_problem(m: TranslationModel, n: int, sequences: int, source: int) -> str | None:
    """Why one pass of these sizes would hold too much (its weights and logits), or None."""
    N = 2 * n + 1 + source + (prompt_positions(m) or 0)  # its source and template too
    L, H, V = m.layers("decoder_self"), m.cfg.num_heads, m.vocab_sizes()[1]
    if (room := m.cfg.max_positions) < N:
        return (
            f"{n} tokens read twice need {N} positions with what the model reads around them; "
            f"it has {room}: ask for fewer."
        )
    held = 4 * sequences * (L * H * N * N + N * V)  # float32
    if held > PASS_BYTES:
        return (
            f"{sequences} sequences of {n} tokens read twice would hold {held / 2**20:.0f} MB "
            f"in one pass (limit {PASS_BYTES // 2**20} MB): ask for fewer or shorter ones."
        )
    return None


def head_scores(
    m: TranslationModel, length: int = LENGTH, sequences: int = SEQUENCES, seed: int = SEED
) -> HeadScores:
    """Every decoder head's three scores and the losses along ``sequences`` random sequences of
    ``length`` tokens read twice (HeadScoresError where the model or the sizes do not allow)."""
    if problem := m.supports("head_scores"):
        raise HeadScoresError(problem)
    src = m.source(m.example_sentence).ids
    if problem := pass_problem(m, length, sequences, len(src)):
        raise HeadScoresError(problem)
    rows = random_tokens(m, length, sequences, seed)
    pairs = [(src, [*r, *r, m.eos_id]) for r in rows]  # decoder inputs: the start token, r, r
    source = torch.tensor([src] * sequences, device=m.device)  # (B, S)
    tgt_in = torch.tensor([m.decoder_inputs(out) for _, out in pairs], device=m.device)  # (B, N)
    with m.evaluating(), torch.no_grad():
        weights = m.patterns(source, tgt_in, ("decoder_self",))["decoder_self"]  # (L,B,H,N,N)
        losses = token_losses(m, pairs).float()  # (B, N): the loss of token 1 .. N, then eos
    scores = scores_of(weights.cpu(), length)
    return HeadScores(**scores, losses=losses[:, :-1].mean(0).cpu(), length=length,
                      sequences=sequences, seed=seed)  # fmt: skip
