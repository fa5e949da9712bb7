"""Word alignments read from cross-attention: for each target word, the source word(s) it attends.

A pair (English words, French words) is teacher-forced through the model and its
cross-attention kept: rows are decoder steps, columns source pieces. Target piece k can be
read at two steps:

- **AWO** (attention when outputting): step k, the step that *predicts* piece k;
- **AWI** (attention when inputting, the "shift" of Chen et al. 2020): step k + 1, the step
  that *reads* piece k as its input;
- **whole** (a model whose head was trained to align with the whole target visible,
  ``align_full_context``: Garg et al.'s full context): step k as AWO, in a second pass in
  which every decoder position sees the whole target, as that head was trained.

A reader takes one layer and one head, a layer's mean over heads (``head=None``), or the
mean over every layer and head (``layer=None``). Each target piece links to the source piece
with the largest weight (argmax), or to every source piece whose weight, renormalised over
real source pieces, reaches a threshold; read **both ways**, to every source piece where that
share times the weight's share of its column (the source piece's weight over the target
pieces) reaches ``BOTH_WAYS`` (awesome-align's extraction, Dou & Neubig 2021: a link both
words choose; a word may link to several, or to none). The source ``<eos>`` is never
aligned. Pieces map to words: two words are linked when any of their pieces are (BPE).

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
from core.measure.progress import check_time
from core.model.interface import TranslationModel
from core.model.parts import LANGUAGE_CODE, WordPair

MODES = ("awo", "awi")  # every model's
WHOLE = "whole"  # AWO in the full-context pass: a model trained so (``reads_whole``) only
BATCH = 64  # pairs teacher-forced together
Link = tuple[int, int]  # (source word, target word), 0-indexed
BOTH_WAYS = 0.15  # the two-way share a link needs, chosen on the dev set (``both_ways``)


@dataclass(frozen=True)
class Reader:
    """Which attention an alignment is read from."""

    layer: int | None  # a decoder layer, or None: the mean of every layer and head
    head: int | None  # a head, or None: the layer's mean over heads
    mode: str = "awo"  # "awo", "awi" or "whole"

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
    whole: np.ndarray | None = None  # (L, H, T, S) the full-context pass's (``reads_whole``)


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


def mode_label(mode: str) -> str:
    """A mode as tables and lines write it: "AWO", "AWI", "AWO, whole target"."""
    return "AWO, whole target" if mode == WHOLE else mode.upper()


def reads_whole(m: TranslationModel) -> bool:
    """Whether a model's head was trained to align with the whole target visible
    (``core.train --align-full-context``): it is read in the ``whole`` mode too."""
    return bool((m.meta.get("train_config") or {}).get("align_full_context"))


def modes(m: TranslationModel) -> tuple[str, ...]:
    """The modes a model is read in: AWO and AWI, and ``whole`` where it was trained so."""
    return (*MODES, WHOLE) if reads_whole(m) else MODES


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
    turned, whole = english_first and reads_french(m), reads_whole(m)
    with m.evaluating():
        for start in range(0, len(rows), batch):
            check_time()  # a shared server's limit for one heavy job
            chunk = rows[start : start + batch]
            batch_ids = padded_batch(m, chunk)
            cross = cross_maps(m, batch_ids)  # (L, B, H, T, S)
            if whole:
                with m.whole_target():
                    full = cross_maps(m, batch_ids)  # (L, B, H, T, S)
            for i, w in enumerate(chunk):
                cut = (slice(None), i, slice(None), w.target_rows(), w.source_columns())
                words = (np.array(x, dtype=np.int64) for x in (w.src_words, w.tgt_words))
                kept = np.ascontiguousarray(cross[cut])  # (L, H, T_i, S_i)
                full_kept = np.ascontiguousarray(full[cut]) if whole else None  # (L, H, T_i, S_i)
                out.append(PairMaps(kept, *words, turned, full_kept))
            if tick:
                tick(len(chunk))
    return out


def cross_maps(m: TranslationModel, batch_ids: tuple[torch.Tensor, torch.Tensor]) -> np.ndarray:
    """(L, B, H, T, S) cross-attention of one padded batch, float32 on the CPU."""
    return m.patterns(*batch_ids, ["cross"])["cross"].float().cpu().numpy()


def read(maps: PairMaps, reader: Reader) -> np.ndarray:
    """The (target pieces, source pieces) weights a reader sees, <eos> column dropped
    (ValueError for the ``whole`` mode of maps without a full-context pass)."""
    cross = maps.whole if reader.mode == WHOLE else maps.cross  # (L, H, T, S)
    if cross is None:
        raise ValueError("this model's head was not trained with the whole target visible")
    if reader.layer is None:
        w = cross.mean(axis=(0, 1))  # (T, S)
    elif reader.head is None:
        w = cross[reader.layer].mean(axis=0)
    else:
        w = cross[reader.layer, reader.head]
    rows = slice(1, None) if reader.mode == "awi" else slice(0, -1)
    return w[rows, :-1]  # (T - 1, S - 1)


def shares(w: np.ndarray, both_ways: bool = False) -> np.ndarray:
    """(T, S) each weight's share of its row (its target piece's weight over source pieces);
    ``both_ways``: times its share of its column (the source piece's weight over target
    pieces), awesome-align's two-way reading of one matrix (Dou & Neubig 2021)."""
    share = w / np.clip(w.sum(axis=1, keepdims=True), 1e-12, None)  # (T, S)
    if both_ways:
        share = share * (w / np.clip(w.sum(axis=0, keepdims=True), 1e-12, None))  # (T, S)
    return share


def links(
    maps: PairMaps, reader: Reader, threshold: float | None = None, both_ways: bool = False
) -> set[Link]:
    """Word links (source word, target word) of one pair under a reader: each target piece's
    argmax; with a ``threshold``, every weight whose share reaches it; ``both_ways``, every
    weight whose two-way share (``shares``) reaches it (``BOTH_WAYS`` without a threshold)."""
    w = read(maps, reader)  # (T - 1, S - 1)
    if w.size == 0:
        return set()
    if both_ways:
        cut = BOTH_WAYS if threshold is None else threshold
        pairs = zip(*np.nonzero(cut <= shares(w, both_ways=True).T))
    elif threshold is None:  # a row without weight (a translation cut before <eos>) links none
        pairs = ((s, t) for t, s in enumerate(w.argmax(axis=1)) if w[t].sum() > 0)
    else:
        pairs = zip(*np.nonzero(threshold <= shares(w).T))
    found = {(int(maps.src_words[s]), int(maps.tgt_words[t])) for s, t in pairs}
    return {(j, i) for i, j in found} if maps.turned else found


def readers(layers: int, heads: int, read_in: Sequence[str] = MODES) -> list[Reader]:
    """Every reader: each layer x (each head, the mean), the mean of all, in each mode."""
    out = []
    for mode in read_in:
        for layer in range(layers):
            out += [Reader(layer, h, mode) for h in range(heads)] + [Reader(layer, None, mode)]
        out.append(Reader(None, None, mode))
    return out


def pick_readers(
    layers: int,
    heads: int,
    mode: str | None,
    layer: str | None,
    head: str | None,
    read_in: Sequence[str] = MODES,
) -> list[Reader]:
    """The readers of one mode (of ``read_in``, a model's ``modes``), layer ("all" = the mean
    of all) and head ("mean") as a user writes them, None for every one; ValueError naming
    what is wrong."""
    if mode is not None and mode not in read_in:
        but = " (whole: a model trained with --align-full-context)" if mode == WHOLE else ""
        raise ValueError(f"--mode must be one of {', '.join(read_in)} (got {mode!r}){but}")
    if layer not in (None, "all") and not (layer.isdigit() and int(layer) < layers):
        raise ValueError(f"--layer must be 0..{layers - 1} or 'all' (got {layer!r})")
    if head not in (None, "mean") and not (head.isdigit() and int(head) < heads):
        raise ValueError(f"--head must be 0..{heads - 1} or 'mean' (got {head!r})")
    keep = [
        r
        for r in readers(layers, heads, read_in)
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
    cross: np.ndarray,
    src_tokens: Sequence[str],
    output_tokens: Sequence[str],
    whole: np.ndarray | None = None,
) -> PairMaps:
    """A translated sentence's maps as a pair: cross (L, H, T, S) over its own tokens, and
    ``whole`` (the same shape) from the full-context pass where the model is read so.

    ``output_tokens`` are the decoder's outputs (<eos> last, if reached); the target pieces
    are those before <eos>, so rows number pieces + 1 as for a teacher-forced pair.
    """
    pieces = (
        list(output_tokens[:-1])
        if output_tokens and output_tokens[-1] in ("<eos>", "</s>")
        else list(output_tokens)
    )
    rows = len(pieces) + 1

    def cut(maps: np.ndarray) -> np.ndarray:  # (L, H, rows, S)
        if maps.shape[2] < rows:  # stopped before <eos>: pad one empty row
            maps = np.concatenate([maps, np.zeros_like(maps[:, :, :1])], axis=2)
        return maps[:, :, :rows]

    words = piece_words(src_tokens[:-1]), piece_words(pieces)
    return PairMaps(cut(cross), *words, whole=None if whole is None else cut(whole))


@torch.no_grad()
def whole_target_cross(
    m: TranslationModel, src_ids: Sequence[int], out_ids: Sequence[int]
) -> np.ndarray:
    """(L, H, T, S) cross-attention of one translation teacher-forced in the full-context
    pass (every decoder position sees the whole output): how a head trained with
    ``align_full_context`` reads a sentence the model translated (Garg et al.)."""
    src, tgt_in, _ = m.forced_batch(src_ids, out_ids)  # (1, S), (1, T)
    with m.evaluating(), m.whole_target():
        return cross_maps(m, (src, tgt_in))[:, 0]  # (L, H, T, S)


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
