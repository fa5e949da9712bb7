"""Word alignments read from cross-attention: for each target word, the source word(s) it attends.

A pair (English words, French words) is teacher-forced through the model and its
cross-attention kept: rows are decoder steps, columns source pieces. Target piece k can be
read at two steps:

- **AWO** (attention when outputting): step k, the step that *predicts* piece k;
- **AWI** (attention when inputting, the "shift" of Chen et al. 2020): step k + 1, the step
  that *reads* piece k as its input.

A reader takes one layer and one head, a layer's mean over heads (``head=None``), or the
mean over every layer and head (``layer=None``). Each target piece links to the source piece
with the largest weight (argmax), or to every source piece whose weight, renormalised over
real source pieces, reaches a threshold. The source ``<eos>`` is never aligned. Pieces map
to words: two words are linked when any of their pieces are (BPE).

Shape key: L layers, H heads, T decoder steps (target pieces + 1), S source pieces (+ <eos>),
N pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.attention.kinds import BOUNDARY_TOKENS
from core.attention.sentence_maps import SentenceMaps
from core.corpus.bpe import word_spans
from core.model.interface import TranslationModel
from core.model.parts import LANGUAGE_CODE, WordPair
from core.model.transformer import evaluating

MODES = ("awo", "awi")
BATCH = 64  # pairs teacher-forced together
Link = tuple[int, int]  # (source word, target word), 0-indexed


@dataclass(frozen=True)
class Reader:
    """Which attention an alignment is read from."""

    layer: int | None  # a decoder layer, or None: the mean of every layer and head
    head: int | None  # a head, or None: the layer's mean over heads
    mode: str = "awo"  # "awo" or "awi"

    @property
    def head_label(self) -> str:
        """The head as the command prints it: a number or "mean"."""
        return "mean" if self.head is None else str(self.head)

    @property
    def layer_label(self) -> str | int:
        """The layer as the command prints it: a number or "all"."""
        return "all" if self.layer is None else self.layer


@dataclass
class PairMaps:
    """One pair's cross-attention over pieces, with each piece's word."""

    cross: np.ndarray  # (L, H, T, S) T = target pieces + 1, S = source pieces + <eos>
    src_words: np.ndarray  # (S - 1,) the word of each source piece
    tgt_words: np.ndarray  # (T - 1,) the word of each target piece
    turned: bool = False  # an (English, French) pair read French first: links turn back


def piece_words(pieces: Sequence[str]) -> np.ndarray:
    """The word index of each piece (a ``##`` piece belongs to the word before it)."""
    index = np.zeros(len(pieces), dtype=np.int64)
    for w, (a, b) in enumerate(word_spans(pieces)):
        index[a:b] = w
    return index


def reads_french(m: TranslationModel) -> bool:
    """Whether a model reads French and writes English: it reads a gold set's pairs
    (English first) turned round, and its links are turned back."""
    return m.languages == ("fr", "en")


def encoded(
    m: TranslationModel,
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    english_first: bool = False,
):
    """Each pair as the model reads it (``TranslationModel.word_pair``); ``english_first``:
    the pairs are (English, French) as a gold set holds them, turned for a French→English
    model."""
    turned = english_first and reads_french(m)
    return [m.word_pair(tgt, src) if turned else m.word_pair(src, tgt) for src, tgt in pairs]


def padded_batch(
    m: TranslationModel, chunk: Sequence[WordPair]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) sources and (B, T) decoder inputs of some pairs, padded."""
    S = max(len(w.src_ids) for w in chunk)
    T = max(len(w.out_ids) for w in chunk)
    src = torch.full((len(chunk), S), m.pad_id, dtype=torch.long)
    tgt = torch.full((len(chunk), T), m.pad_id, dtype=torch.long)
    for i, w in enumerate(chunk):
        src[i, : len(w.src_ids)] = torch.tensor(w.src_ids)
        tgt[i, : len(w.out_ids)] = torch.tensor(m.decoder_inputs(w.out_ids))
    return src.to(m.device), tgt.to(m.device)


@torch.no_grad()
def pair_maps(
    m: TranslationModel,
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    batch: int = BATCH,
    tick=None,
    english_first: bool = False,
) -> list[PairMaps]:
    """Teacher-force every pair (in batches) and keep its cross-attention over its pieces
    (the specials a tokenizer puts around a sentence left out, as <bos> is); ``english_first``
    as ``encoded``: a French→English model's maps are marked turned."""
    rows, out = encoded(m, pairs, english_first), []
    turned = english_first and reads_french(m)
    with evaluating(m.model):
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            cross = m.patterns(*padded_batch(m, chunk), ["cross"])["cross"]  # (L, B, H, T, S)
            cross = cross.float().cpu().numpy()
            for i, w in enumerate(chunk):
                kept = cross[:, i, :, w.target_rows(), w.source_columns()]  # (L, H, T_i, S_i)
                words = (np.array(x, dtype=np.int64) for x in (w.src_words, w.tgt_words))
                out.append(PairMaps(np.ascontiguousarray(kept), *words, turned))
            if tick:
                tick(len(chunk))
    return out


def read(maps: PairMaps, reader: Reader) -> np.ndarray:
    """The (target pieces, source pieces) weights a reader sees, <eos> column dropped."""
    if reader.layer is None:
        w = maps.cross.mean(axis=(0, 1))  # (T, S)
    elif reader.head is None:
        w = maps.cross[reader.layer].mean(axis=0)
    else:
        w = maps.cross[reader.layer, reader.head]
    rows = slice(0, -1) if reader.mode == "awo" else slice(1, None)
    return w[rows, :-1]  # (T - 1, S - 1)


def links(maps: PairMaps, reader: Reader, threshold: float | None = None) -> set[Link]:
    """Word links (source word, target word) of one pair under a reader."""
    w = read(maps, reader)  # (T - 1, S - 1)
    if w.size == 0:
        return set()
    if threshold is None:  # a row without weight (a translation cut before <eos>) links none
        pairs = ((s, t) for t, s in enumerate(w.argmax(axis=1)) if w[t].sum() > 0)
    else:
        share = w / np.clip(w.sum(axis=1, keepdims=True), 1e-12, None)
        pairs = zip(*np.nonzero(threshold <= share.T))
    found = {(int(maps.src_words[s]), int(maps.tgt_words[t])) for s, t in pairs}
    return {(j, i) for i, j in found} if maps.turned else found


def readers(layers: int, heads: int) -> list[Reader]:
    """Every reader: each layer x (each head, the mean), the mean of all, in both modes."""
    out = []
    for mode in MODES:
        for layer in range(layers):
            out += [Reader(layer, h, mode) for h in range(heads)] + [Reader(layer, None, mode)]
        out.append(Reader(None, None, mode))
    return out


def pick_readers(
    layers: int, heads: int, mode: str | None, layer: str | None, head: str | None
) -> list[Reader]:
    """The readers of one mode, layer ("all" = the mean of all) and head ("mean") as a user
    writes them, None for every one; ValueError naming what is wrong."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)} (got {mode!r})")
    if layer not in (None, "all") and not (layer.isdigit() and int(layer) < layers):
        raise ValueError(f"--layer must be 0..{layers - 1} or 'all' (got {layer!r})")
    if head not in (None, "mean") and not (head.isdigit() and int(head) < heads):
        raise ValueError(f"--head must be 0..{heads - 1} or 'mean' (got {head!r})")
    keep = [
        r
        for r in readers(layers, heads)
        if (mode is None or r.mode == mode)
        and (layer is None or str(r.layer_label) == layer)
        and (head is None or r.head_label == head)
    ]
    if not keep:
        raise ValueError(
            "no reader matches --layer/--head (the mean of all layers has head 'mean')"
        )
    return keep


def from_sentence(
    cross: np.ndarray, src_tokens: Sequence[str], output_tokens: Sequence[str]
) -> PairMaps:
    """A translated sentence's maps as a pair: cross (L, H, T, S) over its own tokens.

    ``output_tokens`` are the decoder's outputs (<eos> last, if reached); the target pieces
    are those before <eos>, so rows number pieces + 1 as for a teacher-forced pair.
    """
    pieces = (
        list(output_tokens[:-1])
        if output_tokens and output_tokens[-1] in ("<eos>", "</s>")
        else list(output_tokens)
    )
    rows = len(pieces) + 1
    if cross.shape[2] < rows:  # stopped before <eos>: pad one empty row
        cross = np.concatenate([cross, np.zeros_like(cross[:, :, :1])], axis=2)
    return PairMaps(cross[:, :, :rows], piece_words(src_tokens[:-1]), piece_words(pieces))


def _leading_specials(tokens: Sequence[str]) -> int:
    """How many tokens at the start are specials (``<s>``, a language code), not words."""
    n = 0
    while n < len(tokens) - 1 and (
        tokens[n] in BOUNDARY_TOKENS or LANGUAGE_CODE.fullmatch(tokens[n])
    ):
        n += 1
    return n


def alignable(maps: SentenceMaps) -> SentenceMaps:
    """A sentence's maps without the specials a tokenizer puts first (BART's ``<s>``, a
    multilingual model's language codes): what alignment reads (the studio's own maps come
    back unchanged)."""
    s, o = _leading_specials(maps.src_tokens), _leading_specials(maps.output_tokens)
    if not s and not o:
        return maps
    return SentenceMaps(
        maps.encoder[..., s:, s:],
        maps.decoder_self[..., o:, o:],
        maps.cross[..., o:, s:],
        list(maps.src_tokens[s:]),
        list(maps.output_tokens[o:]),
        list(maps.decoder_inputs[o:]),
    )
