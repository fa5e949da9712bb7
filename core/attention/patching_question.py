"""The question activation patching asks of two source sentences (``core.attention.patching``,
and attribution and path patching with it): two runs of one length, the decoder's prefix and
the two answers whose logit difference is the metric, each checked in one line before any pass.

Two sources of the same length in pieces that differ in a word ("the boy is tall ." / "the
girl is tall ."): the clean and the corrupted run. Both are translated greedily; at the first
step t* where the translations differ, the decoder fed their common prefix, the metric is the
logit difference between the clean run's answer a and the corrupted run's b:
m = logit_a - logit_b at step t*. Where the translations agree, or to ask about another step,
the user gives the decoder's prefix (target words, possibly none) and the two answer words;
given a prefix alone, the answers are each run's most likely word after it.

Every effect is divided by the gap m_clean - m_corrupt; under MIN_GAP (a logit) the division
mostly scales noise (on a random GPT-2, −0.09 and −0.10: effects of +1.7 and −0.9 out of a
0.01 gap), and the result says so, by how much (``gap_caveat``), as TransformerLens's
tutorials print both runs' logit differences before normalising by them.

Shape key: S source pieces, T decoder inputs (t* + 1), V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.corpus.text import tokenize
from core.model.checked_translation import MAX_SENTENCE_TOKENS
from core.model.interface import TranslationModel
from core.model.parts import TranslationError
from core.runs import budget

MAX_PIECES = 2 * MAX_SENTENCE_TOKENS  # the most pieces a source or the prefix may take
MIN_GAP = 1.0  # logits: a smaller gap between the two runs' metrics is too small to divide by


def gap_caveat(clean: float, corrupt: float) -> str:
    """Why effects divided by ``clean - corrupt`` (logit differences) measure mostly noise,
    in one line with the numbers; "" when the gap is MIN_GAP or more."""
    gap = clean - corrupt
    if abs(gap) >= MIN_GAP:
        return ""
    both = f"the clean and corrupted runs' logit differences ({clean:+.2f} and {corrupt:+.2f})"
    if gap == 0:
        return (
            f"Caveat: {both} are equal, so no effect can be normalised by their gap: ask about "
            "answers the two runs tell apart."
        )
    return (
        f"Caveat: {both} are only {abs(gap):.2g} apart, {MIN_GAP / abs(gap):,.0f}× less than "
        f"the {MIN_GAP:g} logit a normalised effect needs: each effect is a change divided by "
        f"{abs(gap):.2g}, so it mostly scales noise. Read the raw change (effect × "
        f"{gap:.2g}), or ask about answers the two runs tell apart."
    )


def last_logits(m: TranslationModel, src, tgt_in) -> torch.Tensor:
    """(B, V) the logits of the last decoder step only (the metric reads no other)."""
    return m.logits_of(m.hidden(src, tgt_in)[:, -1])  # (B, V)


def cut_output(m: TranslationModel, row: list[int]) -> list[int]:
    """Output ids up to and including the end token."""
    return row[: row.index(m.eos_id) + 1] if m.eos_id in row else row


def checked_sources(m: TranslationModel, clean: str, corrupt: str):
    """The two sources as (ids, tokens) each; TranslationError unless of one length."""
    for text in (clean, corrupt):
        if len(tokenize(text or "")) > MAX_SENTENCE_TOKENS:
            raise TranslationError(
                f"Activation patching takes sentences of at most {MAX_SENTENCE_TOKENS} tokens."
            )
    a, b = m.source(clean), m.source(corrupt)
    if max(len(a.ids), len(b.ids)) > MAX_PIECES:
        raise TranslationError(
            f"Activation patching takes sources of at most {MAX_PIECES} pieces: these have "
            f"{len(a.ids)} and {len(b.ids)}."
        )
    if len(a.ids) != len(b.ids):
        raise TranslationError(
            f"The two sentences must have the same length in pieces: the clean one has "
            f"{len(a.ids)} ({' '.join(a.tokens)}), the corrupted one {len(b.ids)} "
            f"({' '.join(b.tokens)})."
        )
    if a.ids == b.ids:
        raise TranslationError("The two sentences are the same: change a word in one.")
    return (a.ids, a.tokens), (b.ids, b.tokens)


def answer_id(m: TranslationModel, word: str) -> int:
    """The id of an answer word; TranslationError unless it is one piece the model knows."""
    ids = m.target_ids(word or "")[:-1]  # without the end token
    if not ids:
        how = "empty"
    elif len(ids) > 1:
        how = f"{len(ids)} pieces ({' '.join(m.target_tokens(ids))})"
    elif m.unknown_target_words(word):
        how = "not in the model's target vocabulary"
    else:
        return ids[0]
    raise TranslationError(f"An answer must be one word the model knows: “{word}” is {how}.")


def found_question(m: TranslationModel, sources, max_len: int, target_lang=None):
    """(decoder inputs (1, T): the start token + the translations' common prefix, (answer,
    wrong) ids): the first step where the two greedy translations differ."""
    out_a, out_b = (cut_output(m, m.greedy(s, max_len, target_lang)[0].tolist()) for s in sources)
    step = next((t for t, (x, y) in enumerate(zip(out_a, out_b)) if x != y), None)
    if step is None:
        raise TranslationError(
            "Both sentences are translated the same way, so there is no answer to "
            "compare: change a word the translation depends on, or give a target prefix "
            "and two answer words."
        )
    tgt_in = torch.tensor([[m.start_id, *out_a[:step]]], device=m.device)  # (1, T)
    return tgt_in, (out_a[step], out_b[step])


def given_question(
    m: TranslationModel, sources, prefix: str | None, answers, target_lang=None, prompt=None
):
    """(decoder inputs (1, T): the start token + the prefix given, (answer, wrong) ids): the
    answers given, else each source's likeliest word after the prefix (its pass checked
    first, ``prompt`` as ``_check_pass``)."""
    words = tokenize(prefix or "")
    if len(words) > MAX_SENTENCE_TOKENS:
        raise TranslationError(f"The prefix takes at most {MAX_SENTENCE_TOKENS} words.")
    if missing := m.unknown_target_words(prefix or ""):
        raise TranslationError(
            f"The prefix has words the model does not know: {', '.join(missing)}."
        )
    first = m.language_id(target_lang)
    ids = m.target_ids(prefix or "", first)[:-1] if words else ([first] if first else [])
    if len(ids) >= MAX_PIECES:
        raise TranslationError(
            f"The prefix takes at most {MAX_PIECES - 1} pieces in this model: it has {len(ids)}."
        )
    tgt_in = torch.tensor([[m.start_id, *ids]], device=m.device)  # (1, T)
    check_pass(m, sources[0].size(1), tgt_in.size(1), prompt)  # the prefix: before any pass
    if answers is not None:
        pair = tuple(answer_id(m, w) for w in answers)
    else:
        pair = tuple(int(last_logits(m, s, tgt_in)[0].argmax()) for s in sources)
    if pair[0] == pair[1]:
        said = m.target_tokens([pair[0]])[0]
        raise TranslationError(f"Both runs answer “{said}” there: give two different answer words.")
    return tgt_in, pair


def check_pass(m: TranslationModel, S: int, T: int, prompt: int | None) -> None:
    """TranslationError in one line when one row of a patching pass (S source and T decoder
    positions, and a prompted model's ``prompt`` template positions) would pass the
    server's bytes for one pass (``budget.patch_problem``)."""
    if problem := budget.patch_problem(vars(m.cfg), S, T, prompt):
        raise TranslationError(problem)


@dataclass
class Question:
    """Two runs of one length and the step whose logit difference they are measured by."""

    clean: torch.Tensor  # (1, S) the clean source's ids
    corrupt: torch.Tensor  # (1, S) the corrupted source's ids
    tokens: tuple[list[str], list[str]]  # the clean and the corrupted source pieces
    tgt_in: torch.Tensor  # (1, T) the start token and the prefix
    answers: tuple[int, int]  # the clean run's answer id and the corrupted run's
    given: bool  # the prefix or the answers were given, not found by translating
    prompt: int | None  # a prompted model's template positions (prompt_positions)
    direction: str  # "denoise" (clean into corrupted) or "noise"

    @property
    def runs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(donor, receiver) sources: clean into corrupted to denoise, the other way to noise."""
        pair = (self.clean, self.corrupt)
        return pair if self.direction == "denoise" else pair[::-1]

    def metric(self, logits: torch.Tensor) -> torch.Tensor:
        """(B,) logit(answer) - logit(wrong) of (B, V) last-step logits."""
        return logits[:, self.answers[0]] - logits[:, self.answers[1]]

    def effects(self, metrics: torch.Tensor, m_clean: float, m_corrupt: float) -> list[float]:
        """Each receiving run's metric as ``patch`` normalises it (0 = nothing moved)."""
        moved = metrics - m_corrupt if self.direction == "denoise" else m_clean - metrics
        return (moved / (m_clean - m_corrupt)).tolist()
