"""Translation as the pages offer it: checked input, top-k tables and validation sentences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


MARKS = "▁Ġ␣⏎"  # how tokenizers (and the studio's pieces) mark a space or a line's end


def _words_of(pieces: Sequence[str]) -> list[list[int]]:
    """Indices of ``pieces`` grouped into words: a piece starting with "##" continues one."""
    words: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith("##") and words:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def broken_pieces_note(t: Translation, special: set[int]) -> str | None:
    """One line when most of a source's pieces (the ``special`` ids left out) are single
    characters cut from a longer word or unknown, some of them cut: a tokenizer that is not
    the model's own (a word vocabulary read as bytes), or another language; None else (a
    sentence of unknown words alone is named by the model's own unknown-words note)."""
    text = [p.removeprefix("##").strip(MARKS).strip() for p in t.src_tokens]
    counted = cut = unknown = 0
    for word in _words_of(t.src_tokens):
        inside = [i for i in word if text[i] and t.src_ids[i] not in special]
        letters = sum(ch.isalnum() for i in inside for ch in text[i])
        for i in inside:
            counted += 1
            unknown += t.src_unknown[i]
            letter = len(text[i]) == 1 and text[i].isalnum()
            cut += bool(letter and letters > 1 and not t.src_unknown[i])  # of a longer word
    if not cut or cut + unknown < 2 or 2 * (cut + unknown) <= counted:
        return None  # unknown pieces alone: the model's unknown-words note names them
    what = {
        "single characters cut from its words": (cut, "is the tokenizer the model's own?"),
        "unknown to the model's tokenizer": (unknown, "is the sentence in its source language?"),
    }
    said = [(words, n, ask) for words, (n, ask) in what.items() if n]
    if len(said) > 1:  # how many of each
        said = [(f"{words} ({n})", n, ask) for words, n, ask in said]
    return (
        f"{cut + unknown} of this sentence's {counted} pieces are "
        + " or ".join(words for words, _, _ in said)
        + ": expect a translation in broken pieces ("
        + " ".join(ask for _, _, ask in said)
        + ")."
    )


SEQUENCE_ONLY = (  # a model trained here on the induction task (``supports("sentence")``)
    "This model reads a token sequence, no sentence: give the sequence as the target and '' "
    "as the sentence (--target SEQ '')."
)


def translate_sentence(
    lm: TranslationModel, sentence: str, settings: DecodeSettings = GREEDY, target: str = ""
) -> Translation:
    """Translate with all maps; refuse over-long input, warn about unknown or long input, or
    a sentence the tokenizer reads mostly as single characters or unknown pieces.
    With a ``target``: that translation teacher-forced instead of the model's own."""
    if not target.strip() and lm.supports("sentence"):  # nothing to continue: no decoding
        raise TranslationError(SEQUENCE_ONLY)
    tokens = _refuse_long(sentence, "sentence")
    if target.strip():
        _refuse_long(target, "target")
        t = lm.force(sentence or "", target, settings)
    else:
        t = lm.translate(sentence or "", settings)
    t.warnings += lm.source_notes(tokens)
    if note := broken_pieces_note(t, lm.special_ids()):
        t.warnings.append(note)
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


def topk_rows(t: Translation) -> list[dict]:
    """One row per output step: the chosen token and the k best candidates with probabilities
    (as the Translate page shows them: ``"word (0.912)"``)."""
    rows = []
    for step, (tok, cands) in enumerate(zip(t.output_tokens, t.topk)):
        row = {"step": step, "output token": tok}
        for rank, (word, p) in enumerate(cands, start=1):
            row[f"#{rank}"] = f"{word} ({probability_text(p)})"
        rows.append(row)
    return rows


def topk_frame(t: Translation) -> pd.DataFrame:
    """``topk_rows`` as a table."""
    return pd.DataFrame(topk_rows(t))


def target_rows(t: Translation) -> list[dict]:
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
    return rows


def target_frame(t: Translation) -> pd.DataFrame:
    """``target_rows`` as a table."""
    return pd.DataFrame(target_rows(t))


def first_choices(t: Translation) -> int:
    """How many of a forced target's tokens the model itself ranks first at their step."""
    return sum(r == 1 for r in t.ranks)


def decoding_words(settings: DecodeSettings, decoded: bool = True) -> str:
    """How an output was made, in the Translate page's words: "greedy", "beam 4, α 0.6", or
    (``decoded`` False) "one pass, no decoding"."""
    if not decoded:
        return "one pass, no decoding"
    if settings.beam_size == 1:
        return "greedy"
    return f"beam {settings.beam_size}, α {settings.alpha:g}"


def translation_record(t: Translation, settings: DecodeSettings, decoded: bool = True) -> dict:
    """The figures the Translate page shows of a model's translation, as JSON-able data: its
    text, log-probability, decoder steps (None for an output filled in one pass), decoding,
    warnings, and each step's top candidates (``topk_rows``, and as (token, probability))."""
    return {
        "text": t.text,
        "log_prob": float(t.log_prob),
        "steps": len(t.output_tokens) if decoded else None,
        "beam": settings.beam_size if decoded else None,
        "alpha": settings.alpha if decoded and settings.beam_size > 1 else None,
        "decoding": decoding_words(settings, decoded),
        "warnings": list(t.warnings),
        "output_tokens": list(t.output_tokens),
        "topk": [[[word, float(p)] for word, p in cands] for cands in t.topk],
        "candidates": topk_rows(t),
    }


def target_record(t: Translation, own: Translation | None = None) -> dict:
    """The figures the Translate page shows of a forced target, as JSON-able data: its
    log-probability (and the model's own translation's, given ``own``), how many of its
    tokens are the model's first choice, and each token's probability and rank."""
    return {
        "target": t.text,
        "log_prob": float(t.log_prob),
        "own_log_prob": None if own is None else float(own.log_prob),
        "first_choices": first_choices(t),
        "tokens": len(t.ranks),
        "warnings": list(t.warnings),
        "output_tokens": list(t.output_tokens),
        "token_probs": [float(p) for p in t.token_probs],
        "ranks": [int(r) for r in t.ranks],
        "rows": target_rows(t),
    }


def translation_records(
    lm: TranslationModel, sentences: Sequence[str], settings: DecodeSettings = GREEDY
) -> list[dict]:
    """One dict per sentence: the sentence and its ``translation_record`` (the Translate
    page's figures), or its ``error`` when it cannot be translated."""
    decoded, records = lm.supports("decoding") is None, []
    for sentence in sentences:
        try:
            t = translate_sentence(lm, sentence, settings)
        except TranslationError as e:
            records.append({"sentence": sentence, "error": str(e)})
            continue
        records.append({"sentence": sentence, **translation_record(t, settings, decoded)})
    return records


def lines_translated(
    lm: TranslationModel, lines: list[str], settings: DecodeSettings = GREEDY
) -> tuple[list[str], list[str]]:
    """``lm.translate_lines`` (each line's text, "" where none; the warnings), with a warning
    for each empty translation no other warning explains (the model wrote its end token
    first)."""
    outs, warnings = lm.translate_lines(lines, settings)
    said = {w.split(":", 1)[0] for w in warnings}
    for i, out in enumerate(outs):
        if not out and f"line {i + 1}" not in said:
            warnings.append(f"line {i + 1}: the translation is empty (the model wrote its end "
                            "token first)")  # fmt: skip
    return outs, warnings


def rated_target(
    lm: TranslationModel, sentence: str, target: str, settings: DecodeSettings = GREEDY
) -> dict:
    """``target_record`` of ``target`` forced as the translation of ``sentence``, beside the
    model's own translation (a model that reads a token sequence: ``target`` is the sequence,
    read as the Translate page reads it, the sentence ''); TranslationError when either cannot
    be made, or the model rates no typed translation."""
    if lm.supports("sentence"):  # it reads a token sequence: ``target``, in one forced pass
        if sentence.strip():
            raise TranslationError(SEQUENCE_ONLY)
        return target_record(translate_sentence(lm, "", settings, target))
    if problem := lm.supports("force"):
        raise TranslationError(problem)
    own = translate_sentence(lm, sentence, settings)
    return target_record(translate_sentence(lm, sentence, settings, target), own)


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
    except DataError as e:  # the reason alone: the page says what it cannot offer
        return [], str(e).removeprefix("The validation sentences cannot be rebuilt: ").rstrip(".")
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
