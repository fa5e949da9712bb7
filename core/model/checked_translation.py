"""Translation as the pages offer it: checked input, top-k tables and validation sentences."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.corpus.source import DataError
from core.corpus.splits import load_splits
from core.corpus.text import tokenize
from core.model.checkpoints import validation_source
from core.model.interface import TranslationModel
from core.model.parts import GREEDY, DecodeSettings, Translation, TranslationError

MAX_SENTENCE_TOKENS = 60  # longer input is refused with a message
DEFAULT_SENTENCE = "i'm home ."
FRENCH_EXAMPLE = "je suis chez moi ."  # the default sentence of a model that reads French
EXAMPLES = (DEFAULT_SENTENCE, FRENCH_EXAMPLE)  # a box showing one of these is untouched


def trained_max_len(meta: Mapping) -> int | None:
    """The longest sentence (tokens) the model saw in training, if recorded."""
    value = (meta.get("data_config") or {}).get("max_len")
    return int(value) if value else None


def _refuse_long(text: str, what: str) -> list[str]:
    """The tokens of ``text``; TranslationError if there are more than a page takes."""
    tokens = tokenize(text or "")
    if len(tokens) > MAX_SENTENCE_TOKENS:
        raise TranslationError(
            f"The {what} has {len(tokens)} tokens ({len(text):,} characters); this "
            f"page translates at most {MAX_SENTENCE_TOKENS} tokens. Split it into shorter "
            "sentences."
        )
    return tokens


def translate_sentence(
    lm: TranslationModel, sentence: str, settings: DecodeSettings = GREEDY, target: str = ""
) -> Translation:
    """Translate with all maps; refuse over-long input, warn about unknown or long input.
    With a ``target``: that translation teacher-forced instead of the model's own."""
    tokens = _refuse_long(sentence, "sentence")
    if target.strip():
        _refuse_long(target, "target")
        t = lm.force(sentence or "", target, settings)
    else:
        t = lm.translate(sentence or "", settings)
    t.warnings += lm.source_notes(tokens)
    limit = trained_max_len(lm.meta)
    if limit and len(tokens) > limit:
        t.warnings.append(
            f"The model was trained on sentences of at most {limit} tokens; "
            f"this one has {len(tokens)}, so expect a poorer translation."
        )
    return t


def probability_text(p: float) -> str:
    """A probability that stays readable when small: 0.912, 0.050, then 4.2e-05 below 0.001."""
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def topk_frame(t: Translation) -> pd.DataFrame:
    """One row per output step: the chosen token and the k best candidates with probabilities."""
    rows = []
    for step, (tok, cands) in enumerate(zip(t.output_tokens, t.topk)):
        row = {"step": step, "output token": tok}
        for rank, (word, p) in enumerate(cands, start=1):
            row[f"#{rank}"] = f"{word} ({probability_text(p)})"
        rows.append(row)
    return pd.DataFrame(rows)


def target_frame(t: Translation) -> pd.DataFrame:
    """One row per step of a forced target: its token, probability and rank under the model,
    and what the model itself ranked first there, with that one's probability."""
    rows = []
    for step, (tok, p, rank, cands) in enumerate(
        zip(t.output_tokens, t.token_probs, t.ranks, t.topk)
    ):
        best, best_p = cands[0] if cands else ("", 0.0)
        rows.append(
            {
                "step": step,
                "your token": tok,
                "probability": probability_text(p),
                "rank": rank,
                "the model's first choice": f"{best} ({probability_text(best_p)})",
            }
        )
    return pd.DataFrame(rows)


@dataclass
class ValidationExample:
    """A validation sentence with all of its reference translations."""

    source: str
    references: list[str]


def validation_examples(meta: Mapping, n: int = 200) -> tuple[list[ValidationExample], str]:
    """Up to ``n`` validation sentences spread over the split, or ([], the reason)."""
    if not meta.get("data_config"):
        return [], "this checkpoint does not record its data settings"
    try:
        cfg, carried = validation_source(meta, command=False)
    except DataError as e:
        return [], str(e).rstrip(".")
    try:
        groups = (carried if carried is not None else load_splits(cfg).val).groups()
    except (DataError, OSError, ValueError) as e:
        return [], f"the validation data could not be rebuilt: {str(e).rstrip('.')}"
    if not groups:
        return [], "this model was trained without a validation split"
    picks = sorted(set(np.linspace(0, len(groups) - 1, min(n, len(groups))).round().astype(int)))
    return [
        ValidationExample(" ".join(groups[i][0]), [" ".join(r) for r in groups[i][1]])
        for i in picks
    ], ""
