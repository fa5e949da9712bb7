"""The question activation patching asks of two source sentences (``core.attention.patching``,
and attribution and path patching with it): two runs of one length, the decoder's prefix (a
masked language model's first mask) and the two answers whose logit difference is the metric,
each checked in one line before any pass.

Two sources of the same length in pieces that differ in a word ("the boy is tall ." / "the
girl is tall ."): the clean and the corrupted run. Both are translated greedily; at the first
step t* where the translations differ, the decoder fed their common prefix, the metric is the
logit difference between the clean run's answer a and the corrupted run's b:
m = logit_a - logit_b at step t*. Where the translations agree, or to ask about another step,
the user gives the decoder's prefix (target words, possibly none) and the two answer words;
given a prefix alone, the answers are each run's most likely word after it.

A model that fills its masks in one pass (a masked language model: its capability row
``patch_prefix`` says so) has no decoding steps: both sentences hold their first mask at one
position, the metric is the logit difference there between the clean run's likeliest fill and
the corrupted run's (or the two answer words given, each read in the clean sentence in the
mask's place), after no prefix; its one decoder input is the mask.

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
EXAMPLE = ("the boy is tall .", "the girl is tall .")  # two sources a word apart
MASKED_EXAMPLE = (  # two sentences a word apart whose first mask the word decides
    "the {mask} went to paris because he was tired .",
    "the {mask} went to paris because she was tired .",
)


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


def at_mask(m: TranslationModel) -> bool:
    """Whether the model fills its masks in one pass, so that a question is read at the first
    mask, after no prefix (its capability row ``patch_prefix``)."""
    return m.supports("patch_prefix") is not None


def mask_text(m: TranslationModel) -> str:
    """The mask token as the model shows it (and a user types it)."""
    return m.source_tokens([m.mask_id])[0]


def example_pair(m: TranslationModel) -> tuple[str, str]:
    """Two sentences to patch, as the page suggests them: two sources (``EXAMPLE``), or for a
    model read at its mask two sentences holding its own mask token (``MASKED_EXAMPLE``)."""
    if not at_mask(m):
        return EXAMPLE
    clean, corrupt = (s.format(mask=mask_text(m)) for s in MASKED_EXAMPLE)
    return clean, corrupt


def first_mask(m: TranslationModel, clean: list[int], corrupt: list[int]) -> int:
    """The position of the two sentences' first mask; TranslationError in one line unless
    both hold their masks at the same positions."""
    where = [[i for i, x in enumerate(ids) if x == m.mask_id] for ids in (clean, corrupt)]
    mask = mask_text(m)
    if not where[0] or not where[1]:
        which = "the clean sentence has" if not where[0] else "the corrupted sentence has"
        which = "neither sentence has one" if not (where[0] or where[1]) else f"{which} none"
        raise TranslationError(
            f"Patching a masked language model reads its first {mask}: {which}; type {mask} "
            "where the model should fill a word, in both."
        )
    if where[0] != where[1]:
        at = [", ".join(map(str, w)) for w in where]
        raise TranslationError(
            f"The two sentences' {mask} tokens must sit at the same positions: the clean "
            f"one's at {at[0]}, the corrupted one's at {at[1]} (in pieces, from 0)."
        )
    return where[0][0]


def fill_id(m: TranslationModel, sentence: str, ids: list[int], at: int, word: str) -> int:
    """The id of an answer word as ``sentence`` (``ids``) reads it in its first mask's place
    (position ``at``); TranslationError unless the sentence with the word is the sentence
    with one piece changed, there."""
    word = (word or "").strip()
    filled = m.source(sentence.replace(mask_text(m), word, 1)).ids if word else []
    same = 0  # the pieces both share before the word
    while same < min(len(ids), len(filled)) and ids[same] == filled[same]:
        same += 1
    changed = filled[same : len(filled) - (len(ids) - at - 1)]  # the word's pieces there
    if not word or len(word.split()) > 1:
        how = "empty" if not word else "more than one word"
    elif len(filled) != len(ids) or filled[at + 1 :] != ids[at + 1 :] or same != at:
        pieces = " ".join(m.source_tokens(changed)) or "nothing"
        how = f"not one piece of its own in the mask's place (the sentence reads {pieces} there)"
    elif filled[at] == m.unk_id:
        how = "not in the model's vocabulary"
    else:
        return filled[at]
    raise TranslationError(f"An answer must be one word the model knows: “{word}” is {how}.")


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
    return tgt_in, two_answers(m, pair)


def mask_question(m: TranslationModel, sources, clean: str, prefix: str | None, answers):
    """(decoder inputs (1, 1): the first mask, (answer, wrong) ids) of a model read at its
    mask (``at_mask``): the answers given (each in the clean sentence's first mask's place),
    else each run's likeliest fill there; a prefix refused, in one line, before any pass."""
    if (prefix or "").strip():
        raise TranslationError(m.supports("patch_prefix"))
    ids = sources[0][0].tolist()
    at = first_mask(m, ids, sources[1][0].tolist())
    tgt_in = torch.tensor([[m.mask_id]], device=m.device)  # (1, 1) the first mask's input
    check_pass(m, len(ids), 1, None)
    if answers is not None:
        pair = tuple(fill_id(m, clean, ids, at, w) for w in answers)
    else:
        pair = tuple(int(last_logits(m, s, tgt_in)[0].argmax()) for s in sources)
    return tgt_in, two_answers(m, pair)


def two_answers(m: TranslationModel, pair: tuple[int, ...]) -> tuple[int, int]:
    """The (answer, wrong) ids; TranslationError in one line where they are one token."""
    if pair[0] == pair[1]:
        said = m.target_tokens([pair[0]])[0]
        raise TranslationError(f"Both runs answer “{said}” there: give two different answer words.")
    return pair[0], pair[1]


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
    tgt_in: torch.Tensor  # (1, T) the start token and the prefix (a masked LM's: its first mask)
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
