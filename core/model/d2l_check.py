"""The d2l.ai chapter's check: its four sentences translated and scored as the book does."""

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


@dataclass
class D2LCheck:
    """The d2l chapter's four test sentences, translated and scored."""

    rows: list[dict]  # source, translation, reference, bleu (d2l, k=2), note
    bleu: float  # corpus BLEU (sacreBLEU, 0-100) of the four


def d2l_check(lm: TranslationModel, settings: DecodeSettings = GREEDY) -> D2LCheck:
    """Translate the chapter's sentences and score them against the book's references."""
    rows, hyps = [], []
    for source, reference in D2L_TEST_PAIRS:
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
    refs = [[tokenize(r)] for _, r in D2L_TEST_PAIRS]
    return D2LCheck(rows, corpus_bleu(hyps, refs))
