"""The d2l.ai chapter's check: its four sentences translated and scored as the book does, in
the model's direction (the book's pairs reversed for a model that translates French into
English)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from core.corpus.text import D2L_TEST_PAIRS, tokenize
from core.model.bleu import corpus_bleu
from core.model.checked_translation import translate_sentence
from core.model.interface import TranslationModel
from core.model.parts import GREEDY, DecodeSettings, TranslationError


def d2l_bleu(pred: Sequence[str], label: Sequence[str], k: int = 2) -> float:
    """The d2l.ai chapter's sentence BLEU (brevity penalty, n-gram precisions up to k)."""
    len_pred, len_label = len(pred), len(label)
    if len_pred == 0 or len_label == 0:
        return 0.0
    score = math.exp(min(0.0, 1 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_grams = Counter(tuple(label[i : i + n]) for i in range(len_label - n + 1))
        matches = 0
        for i in range(len_pred - n + 1):
            gram = tuple(pred[i : i + n])
            if label_grams[gram] > 0:
                matches += 1
                label_grams[gram] -= 1
        score *= math.pow(matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


BOOK_LANGUAGES = ("English", "French")  # the chapter's direction: its sentences, its references


def reversed_direction(lm: TranslationModel) -> bool:
    """Whether ``lm`` translates French into English (its ``language_names``), the book's
    direction reversed; False for English into French and for any other direction."""
    return lm.language_names == BOOK_LANGUAGES[::-1]


def d2l_problem(lm: TranslationModel) -> str | None:
    """Why the chapter's check does not apply to ``lm``, in one line (None: it does): the
    capability table's refusal, or a direction other than English → French and back (the
    book's sentences would be scored against references in another language)."""
    if problem := lm.supports("d2l"):
        return problem
    names = tuple(lm.language_names)
    if names not in (BOOK_LANGUAGES, BOOK_LANGUAGES[::-1]):
        return (
            "The d2l chapter's check scores English → French (or French → English): this "
            f"model translates {names[0]} → {names[1]}."
        )
    return None


def d2l_pairs(lm: TranslationModel) -> list[tuple[str, str]]:
    """The chapter's (source, reference) pairs in ``lm``'s direction: the book's English
    sentences and French references, swapped for a French → English model."""
    if reversed_direction(lm):
        return [(ref, source) for source, ref in D2L_TEST_PAIRS]
    return list(D2L_TEST_PAIRS)


def d2l_direction(lm: TranslationModel) -> str:
    """The check's direction in words: "English → French" or "French → English"."""
    source, target = BOOK_LANGUAGES[::-1] if reversed_direction(lm) else BOOK_LANGUAGES
    return f"{source} → {target}"


@dataclass
class D2LCheck:
    """The d2l chapter's four test sentences, translated and scored."""

    rows: list[dict]  # source, translation, reference, bleu (d2l, k=2), note
    bleu: float  # corpus BLEU (sacreBLEU, 0-100) of the four
    order: int = 4  # its longest n-grams: 4, fewer where no reference is that long


def short_corpus_bleu(hyps: list[list[str]], refs: list[list[str]]) -> tuple[float, int]:
    """sacreBLEU corpus BLEU of token lists against one reference each, and its longest
    n-grams: 4, or the longest reference's length where that is shorter (the book's English
    sentences have at most 3 tokens: 4-grams would score even a perfect model 0)."""
    order = max(1, min(4, max((len(r) for r in refs), default=1)))
    return corpus_bleu(hyps, [[r] for r in refs], order), order


def d2l_check(lm: TranslationModel, settings: DecodeSettings = GREEDY) -> D2LCheck:
    """The chapter's sentences translated in ``lm``'s direction (``d2l_pairs``: the book's
    French references into English for a French → English model) and scored against the
    other side of each pair."""
    rows, hyps, pairs = [], [], d2l_pairs(lm)
    for source, reference in pairs:
        note = ""
        try:
            words = translate_sentence(lm, source, settings).words
        except TranslationError as e:
            words, note = [], str(e)
        ref = tokenize(reference)
        hyps.append(words)
        rows.append(
            {
                "source": source,
                "translation": " ".join(words),
                "reference": reference,
                "bleu": d2l_bleu(words, ref),
                "note": note,
            }
        )
    return D2LCheck(rows, *short_corpus_bleu(hyps, [tokenize(r) for _, r in pairs]))
