"""BLEU as the studio records it: multi-reference corpus BLEU (sacrebleu) and the mark of none."""

from __future__ import annotations

from sacrebleu.metrics import BLEU

NO_BLEU = -1.0  # a recorded BLEU before any was measured (status.json, checkpoints)


def usable_bleu(value) -> float | None:
    """A recorded BLEU, or None where none was measured (stored as NO_BLEU or missing)."""
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def corpus_bleu(
    hypotheses: list[list[str]], references: list[list[list[str]]], order: int = 4
) -> float:
    """sacrebleu corpus BLEU of token lists against any number of references each (n-grams
    up to ``order``: sacrebleu's 4 unless asked)."""
    width = max((len(r) for r in references), default=0)
    streams = [[" ".join(r[j]) if j < len(r) else None for r in references] for j in range(width)]
    hyps = [" ".join(h) for h in hypotheses]
    bleu = BLEU(force=True, max_ngram_order=order)
    return float(bleu.corpus_score(hyps, streams).score) if hyps else 0.0
