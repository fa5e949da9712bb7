"""What a model writes for each sentence of a sample, as the measurements over many sentences
explain it (faithfulness): a translator's greedy translation, or a masked model's fill of one
word the masking protocol hides; and a source's words among its pieces.

``source_spans`` finds the words: a piece shown with ``##`` (``TranslationModel.source_tokens``:
a WordPiece continuation as BERT writes it, a byte-level or SentencePiece piece without its
word-start mark, RoBERTa's ``Ġ``, Marian's ``▁``) joins the word before it; specials (the end
token, ``[CLS]``, ``[SEP]``, a language code, and the mask token) belong to no word; an unknown
token is a word. (RoBERTa writes a full stop with no word-start mark, so "tall." is one word
of two pieces there, while BERT's WordPiece makes "." a word of its own.)

The masking protocol, for a model that writes no output step by step but fills its mask tokens
in one pass (``supports("decoding")`` refuses; BERT, RoBERTa, DistilBERT, ELECTRA): the sample's
sentence number i (0-based, in the validation split's order) is read by the model's tokenizer
(fra-eng's English side, as the model's head importance reads it); its candidates are its words
(``source_spans``) of exactly one piece that hold a letter or a digit (punctuation and the
unknown token are never hidden), left to right; with n candidates, candidate number i mod n is
replaced by the model's mask token. The model's own fill (the argmax of its one pass at the
mask) is the output explained (T = 1), as a translator's own greedy translation is. A sentence
with no candidate, or with no other word left to occlude, is skipped (``None``) and counted by
the caller.

Shape key: B sentences in one pass, S tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.corpus.bpe import PREFIX
from core.corpus.source import DataError
from core.model.batched import Tick, greedy_outputs, padded
from core.model.interface import TranslationModel

FILL_ROWS = 32  # masked sentences filled in one padded pass
Case = tuple[list[int], list[int]]  # (the source the model reads, the output it writes)

TRANSLATED = "Each validation sentence is translated by the model (greedy)"
FILLED = (
    "In each validation sentence (number i, from 0) one word is hidden by the mask token: among "
    "its words of one piece holding a letter or digit, the one numbered i mod their count, left "
    "to right (a sentence with none, or with no other word, is skipped); the model's own fill "
    "at the mask is the output token explained"
)


def source_spans(m: TranslationModel, src_ids: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of each source word among the pieces the model reads: a ``##`` piece
    joins the word before it; specials (the end token, a language code, the mask token) belong
    to no word; an unknown word is a word."""
    specials = m.special_ids()
    spans: list[list[int]] = []
    joinable = False
    for i, (token_id, token) in enumerate(zip(src_ids, m.source_tokens(src_ids))):
        if token_id in specials:
            joinable = False
            continue
        if joinable and token.startswith(PREFIX) and len(token) > len(PREFIX):
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
        joinable = True
    return [(a, b) for a, b in spans]


def fills_in_one_pass(m: TranslationModel) -> bool:
    """Whether the model fills mask tokens in one pass instead of writing step by step."""
    return m.supports("decoding") is not None


def hidden_position(m: TranslationModel, src_ids: Sequence[int], index: int) -> int | None:
    """The piece the masking protocol hides in the sample's sentence number ``index`` (its
    candidate number ``index`` mod their count); None when the sentence has no candidate or no
    other word."""
    spans = source_spans(m, src_ids)
    tokens = m.source_tokens(src_ids)
    candidates = [
        a for a, b in spans if b - a == 1 and src_ids[a] != m.unk_id and _has_word(tokens[a])
    ]
    if not candidates or len(spans) < 2:
        return None
    return candidates[index % len(candidates)]


def _has_word(token: str) -> bool:
    """Whether a shown token holds a letter or a digit."""
    return any(c.isalnum() for c in token)


def masked_sentence(m: TranslationModel, src_ids: Sequence[int], index: int) -> list[int] | None:
    """The sentence with the protocol's word replaced by the mask token (None: skipped)."""
    at = hidden_position(m, src_ids, index)
    if at is None:
        return None
    return [m.mask_id if i == at else int(x) for i, x in enumerate(src_ids)]


@torch.no_grad()
def filled(
    m: TranslationModel, sources: Sequence[Sequence[int]], tick: Tick = None
) -> list[Case | None]:
    """Each sentence masked by the protocol with the model's own fill at its mask, FILL_ROWS
    sentences a padded pass, ``tick(rows)`` after each (None where the protocol skips a
    sentence)."""
    if m.mask_id is None:
        raise DataError("This model's tokenizer has no mask token to hide a word with.")
    masked = [masked_sentence(m, ids, i) for i, ids in enumerate(sources)]
    kept = [ids for ids in masked if ids is not None]
    fills: list[int] = []
    with m.evaluating():
        for start in range(0, len(kept), FILL_ROWS):
            src, _ = padded(kept[start : start + FILL_ROWS], m.pad_id, m.device)  # (B, S)
            one = torch.zeros(src.size(0), 1, dtype=torch.long, device=m.device)  # (B, 1) a mask
            fills += m.run(src, one)[:, 0].argmax(-1).tolist()  # (B, 1, V) -> (B,)
            if tick:
                tick(src.size(0))
    out: list[Case | None] = []
    it = iter(fills)
    for ids in masked:
        out.append(None if ids is None else (ids, [next(it)]))
    return out


def translated(m: TranslationModel, sources, target_lang=None, tick: Tick = None):
    """Each source with the model's greedy translation, up to its end token (included)."""
    out = []
    for src, ids in zip(sources, greedy_outputs(m, sources, target_lang, tick=tick)):
        ids = ids[: ids.index(m.eos_id) + 1] if m.eos_id in ids else ids
        out.append((list(map(int, src)), ids))
    return out


def own_outputs(
    m: TranslationModel,
    sources: Sequence[Sequence[int]],
    target_lang: str | None = None,
    tick: Tick = None,
) -> list[Case | None]:
    """Each sample sentence as the model is explained on it, with the output it writes for it:
    its greedy translation, or (a model that fills masks in one pass) the masking protocol's
    sentence and fill; None for a sentence the protocol skips."""
    if fills_in_one_pass(m):
        return filled(m, sources, tick)
    return translated(m, sources, target_lang, tick)


def outputs_words(m: TranslationModel) -> str:
    """How the model's own output on each validation sentence is made, in one sentence."""
    return FILLED if fills_in_one_pass(m) else TRANSLATED
