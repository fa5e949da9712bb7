"""The token sequence a model trained here on the induction task is read on by default (the
first of the sequences its training scored its heads on, as the model's tokens), and how well
a teacher-forced pass of a sequence predicted it.

That is the sequence each evaluation's circuit scores read and each snapshot keeps
(``core.training.circuits.circuit_sequences``, ``core.training.probes.circuit_probe``): a
start token, then n distinct random tokens of the task's K types, then the same n again, n
and K from the model's own data settings. The Attention page shows it where a model reads no
sentence (``supports("sentence")``), and reads it in one teacher-forced pass; ``sequence_score``
rates that pass where only the repeat of a sequence read twice can be predicted (what followed
each token the first time), the score the page and ``python -m core.ablate --heads`` give with
and without heads removed (``heads_removed``: that, or a translation model's sentence,
``core.attention.ablation.sentence_removed``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from core.attention.ablation import heads_of, removed_translation, sentence_removed, spec_text
from core.model.checked_translation import translate_sentence
from core.model.interface import TranslationModel
from core.model.parts import GREEDY, DecodeSettings, Translation
from core.training.circuits import circuit_sequences, circuit_sizes


def task_sequence(m: TranslationModel) -> str:
    """The first circuit sequence of ``m``'s task after its start token, as its tokens joined
    by spaces ("t12 t200 … t12 t200 …"); "" for a model whose data settings name no
    induction task."""
    data = m.meta.get("data_config") or {}
    if data.get("task") != "induction":
        return ""
    n, types = circuit_sizes(data, m.cfg.max_positions)
    ids = circuit_sequences(n, types, sequences=1)[0].tolist()  # (2n + 1,): [bos, a, a]
    return " ".join(m.target_tokens(ids[1:]))


def task_tokens(m: TranslationModel) -> list[str]:
    """The tokens ``m``'s vocabulary gives a sequence, in id order: every target token but its
    special ones and its unknown token ("t0" … "t255" for a model of 256 types)."""
    ids = list(range(m.vocab_sizes()[1]))
    skip = m.special_ids() | {m.unk_id}
    return [token for i, token in zip(ids, m.target_tokens(ids)) if i not in skip]


def tokens_words(m: TranslationModel, most: int = 8) -> str:
    """``task_tokens`` of ``m`` for people: all of them up to ``most``, else the first and the
    last ("t0 … t255")."""
    tokens = task_tokens(m)
    if len(tokens) <= most:
        return ", ".join(tokens)
    return f"{tokens[0]} … {tokens[-1]}"


@dataclass(frozen=True)
class SequenceScore:
    """How well one teacher-forced pass predicted a token sequence's scored tokens."""

    loss: float  # mean -log p of the scored tokens (nats)
    firsts: int  # how many of them are the model's first choice
    scored: int  # how many tokens are scored: the repeat's, where the sequence is read twice
    tokens: int  # how many tokens the sequence has (its start and end tokens left out)
    repeat: bool  # whether the sequence is read twice (only its repeat scored)

    def as_dict(self) -> dict:
        """The score as JSON-able fields (``python -m core.ablate --heads``'s lines)."""
        return asdict(self) | {"loss": round(self.loss, 6)}


def sequence_score(t: Translation) -> SequenceScore:
    """The score of a teacher-forced pass ``t`` over a token sequence (its outputs the sequence
    and its end token): over the repeat where the sequence is its first half twice, else over
    every token of it."""
    read = t.decoder_inputs[1:]  # after the start token; the last output is the end token
    half = len(read) // 2
    repeat = bool(half) and read[:half] == read[half:]
    steps = range(half if repeat else 0, len(read))
    logp = [math.log(max(t.token_probs[i], 1e-45)) for i in steps]  # float32's smallest
    loss = -sum(logp) / len(logp) if logp else float("nan")
    firsts = sum(t.ranks[i] == 1 for i in steps)
    return SequenceScore(loss, firsts, len(steps), len(read), repeat)


def sequence_removed(m: TranslationModel, heads: str, sequence: str = "") -> list[dict]:
    """A token-sequence model's forced pass over ``sequence`` (its task's where "") scored as
    it is, then with ``heads`` (``KIND:LAYER:HEAD,...``) removed: two rows, each the removed
    heads' spec ("" first) and its ``SequenceScore`` fields, as the Remove heads section shows
    them. Raises ``ValueError`` for a model that reads sentences, and ``HeadSpecError`` /
    ``TranslationError`` for a spec or sequence it cannot read."""
    if not m.supports("sentence"):
        raise ValueError(
            "A token sequence is scored for a model that reads one (trained here on the "
            "induction task); this one reads sentences: translate a sentence with and without "
            "the heads (--sentence)."
        )
    removed = heads_of(heads, m.cfg, m.head_kinds)
    target = sequence or task_sequence(m)
    t = translate_sentence(m, "", GREEDY, target)
    cut = removed_translation(m, "", GREEDY, removed, target)
    rows = (("", t), (spec_text(removed), cut))
    return [{"heads": spec} | sequence_score(x).as_dict() for spec, x in rows]


def heads_removed(
    m: TranslationModel,
    heads: str,
    sentence: str = "",
    sequence: str = "",
    settings: DecodeSettings = GREEDY,
) -> list[dict]:
    """What Remove heads shows without and with ``heads``, as two rows: a token-sequence
    model's ``sequence_removed`` of ``sequence``, or a translation model's
    ``sentence_removed`` of ``sentence`` decoded with ``settings``. Raises ``ValueError`` for
    an input the model does not read (``HeadSpecError``, ``TranslationError``: see those)."""
    if not m.supports("sentence"):  # it reads sentences
        if sequence.strip():
            raise ValueError(
                "A token sequence is read by a token-sequence model; this one "
                "reads sentences: give a sentence (--sentence)."
            )
        if not sentence.strip():
            raise ValueError(
                "Heads removed from a model that reads sentences need a sentence "
                "(--sentence TEXT) to translate with and without them."
            )
        return sentence_removed(m, heads, sentence, settings)
    if sentence.strip():
        raise ValueError(
            "A sentence is translated by a model that reads sentences; this one "
            "reads a token sequence (--sequence)."
        )
    return sequence_removed(m, heads, sequence)
