"""Attention between subword pieces, merged back into attention between words.

A model with a BPE vocabulary reads and writes pieces ("mange", "##ons"). To read its
maps word by word, the pieces of one word are merged: the weight a query gives a word is
the **sum** over that word's key pieces (so each row still sums to 1), and a word's row is
the **mean** of its query pieces' rows (each piece asked on its own; the word asks on
average). Specials (<bos>, <eos>) stay tokens of their own.

Shape key: L layers, H heads, Tq query tokens (rows), Tk key tokens (columns); a prime
(Tq', Tk') marks the merged word axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.attention.sentence_maps import SentenceMaps
from core.corpus.bpe import PREFIX, join_pieces, word_spans


def has_pieces(maps: SentenceMaps) -> bool:
    """Whether some token of these maps continues a word (merging would change them)."""
    tokens = (*maps.src_tokens, *maps.output_tokens, *maps.decoder_inputs)
    return any(t.startswith(PREFIX) and len(t) > len(PREFIX) for t in tokens)


def merge_weights(
    weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str]
) -> np.ndarray:
    """(..., Tq, Tk) -> (..., Tq', Tk'): mean over a word's query pieces, sum over its keys."""
    rows = [weights[..., a:b, :].mean(axis=-2) for a, b in word_spans(query_tokens)]
    by_row = np.stack(rows, axis=-2)  # (..., Tq', Tk)
    cols = [by_row[..., a:b].sum(axis=-1) for a, b in word_spans(key_tokens)]
    return np.stack(cols, axis=-1).astype(weights.dtype)  # (..., Tq', Tk')


def merged(maps: SentenceMaps) -> SentenceMaps:
    """The maps of every kind with pieces merged into words (unchanged without pieces)."""
    if not has_pieces(maps):
        return maps
    src, out, inputs = maps.src_tokens, maps.output_tokens, maps.decoder_inputs
    return SentenceMaps(
        merge_weights(maps.encoder, src, src),  # (L, H, S', S')
        merge_weights(maps.decoder_self, out, inputs),  # (L, H, T', T')
        merge_weights(maps.cross, out, src),  # (L, H, T', S')
        join_pieces(src),
        join_pieces(out),
        join_pieces(inputs),
    )


def shown_maps(maps: SentenceMaps, words: bool) -> SentenceMaps:
    """The maps as a page shows them: merged into words when ``words`` asks for it."""
    return merged(maps) if words else maps
