"""Word alignments from the similarity of the encoder's and the decoder's states: SimAlign's
argmax and itermax (Jalili Sabet et al. 2020), scored beside the readers of attention.

SimAlign embeds both sentences with one multilingual encoder and links the words whose
embeddings are most similar to each other. An encoder-decoder holds each language in its own
stack, so here a source word's state is the encoder's stream after layer a (a = 0: the
embeddings the first layer reads) and a target word's state the decoder's stream after layer
b, at the step that predicts the word (AWO) or reads it (AWI); a word of several pieces is the
mean of its pieces, as SimAlign does. The cosine similarity of every source word with every
target word is an (S, T) matrix, read in two ways:

- **argmax**: link i and j when j is i's most similar target word and i is j's most similar
  source word (both directions agree: high precision);
- **itermax**: argmax, then up to ``ITERATIONS - 1`` more rounds on the same matrix for the
  words still unlinked: a cell whose two words are already linked is out, and a cell with one
  linked word weighs half as much as a cell of two unlinked words (SimAlign's alpha 0.9
  against 1.8), so that words of several translations can gain a second link.

Shape key: S source words, T target words, D model width, N pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from core.alignment.aer import score
from core.alignment.extract import BATCH, MODES, encoded, padded_batch, reads_french
from core.alignment.gold import GoldLinks, Link
from core.measure.progress import check_time
from core.model.interface import TranslationModel
from core.model.parts import WordPair

METHODS = ("argmax", "itermax")
ITERATIONS = 2  # SimAlign's default number of itermax rounds
HALF = 0.5  # a cell with one word already linked, against one of two unlinked words


@dataclass(frozen=True)
class StateReader:
    """Which states are compared, and how a link is chosen."""

    encoder_layer: int  # the encoder's stream after this many layers (0: the embeddings)
    decoder_layer: int  # the decoder's stream after this many layers
    mode: str  # "awo": the step that predicts a target word; "awi": the step that reads it
    method: str  # "argmax" or "itermax"


@dataclass
class PairStates:
    """One pair's word states, every layer."""

    source: np.ndarray  # (La + 1, S, D) the encoder's stream, one mean state per word
    predicting: np.ndarray  # (Lb + 1, T, D) the decoder's stream at the steps that predict
    reading: np.ndarray  # (Lb + 1, T, D) ... at the steps that read each word
    turned: bool = False  # an (English, French) pair read French first: links turn back


@dataclass
class SimilarityRow:
    """One reader's scores on a gold set (a command's JSON line)."""

    encoder_layer: int
    decoder_layer: int
    mode: str
    method: str
    aer: float
    precision: float
    recall: float
    pairs: int

    def to_json(self) -> dict:
        """The command's JSON line."""
        return {"similarity": asdict(self)}


def word_means(states: torch.Tensor, owners: Sequence[int]) -> np.ndarray:
    """(L, W, D) the mean of each word's pieces, from (L, P, D) piece states."""
    owner = torch.tensor(list(owners), device=states.device)
    words = int(owner.max()) + 1
    total = torch.zeros(states.size(0), words, states.size(2), device=states.device)
    total.index_add_(1, owner, states.float())
    counts = torch.bincount(owner, minlength=words).clamp(min=1).to(total)  # (W,)
    return (total / counts[None, :, None]).cpu().numpy()


def pair_states(lm: TranslationModel, pairs, batch: int = BATCH) -> list[PairStates]:
    """Every pair (English first, as a gold set holds them) teacher-forced in batches, its
    words' states in both stacks kept."""
    rows, out, turned = encoded(lm, pairs, english_first=True), [], reads_french(lm)
    with lm.evaluating(), torch.no_grad():
        for start in range(0, len(rows), batch):
            check_time()  # a shared server's limit for one heavy job
            chunk = rows[start : start + batch]
            src, tgt_in = padded_batch(lm, chunk)
            enc = torch.stack(lm.stream(src, tgt_in, "encoder"))  # (La + 1, B, S, D)
            dec = torch.stack(lm.stream(src, tgt_in, "decoder"))  # (Lb + 1, B, T, D)
            out += [one_pair(w, enc[:, i], dec[:, i], turned) for i, w in enumerate(chunk)]
    return out


def one_pair(w: WordPair, enc: torch.Tensor, dec: torch.Tensor, turned: bool) -> PairStates:
    """A pair's word states from its (L, S, D) and (L, T, D) streams (padding cut off)."""
    s = slice(w.src_start, w.src_start + len(w.src_words))
    n = len(w.tgt_words)
    predicting = dec[:, w.tgt_start : w.tgt_start + n]  # step k predicts piece k
    reading = dec[:, w.tgt_start + 1 : w.tgt_start + n + 1]  # step k + 1 reads it
    return PairStates(
        word_means(enc[:, s], w.src_words),
        word_means(predicting, w.tgt_words),
        word_means(reading, w.tgt_words),
        turned,
    )


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(S, T) cosine similarity of (S, D) and (T, D) states."""
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


def mutual_argmax(sim: np.ndarray) -> np.ndarray:
    """(S, T) booleans: cells that are the largest of both their row and their column."""
    rows = sim == sim.max(axis=1, keepdims=True)
    cols = sim == sim.max(axis=0, keepdims=True)
    return rows & cols & (sim > 0)


def itermax(sim: np.ndarray, rounds: int = ITERATIONS) -> np.ndarray:
    """(S, T) booleans: mutual argmax, then more rounds for the words still unlinked."""
    linked = mutual_argmax(sim)
    if min(sim.shape) <= 2:  # SimAlign: too short a sentence to gain from more rounds
        return linked
    for _ in range(rounds - 1):
        src_done, tgt_done = linked.any(axis=1), linked.any(axis=0)  # (S,), (T,)
        free = (~src_done)[:, None].astype(float) + (~tgt_done)[None, :]  # 2, 1 or 0 per cell
        if not free.any():
            break
        new = mutual_argmax(np.clip(sim, 0, None) * free * HALF) & (free > 0)
        if not (new & ~linked).any():
            break
        linked |= new
    return linked


def state_links(p: PairStates, reader: StateReader) -> set[Link]:
    """One pair's word links under a reader."""
    target = p.predicting if reader.mode == "awo" else p.reading
    sim = cosine(p.source[reader.encoder_layer], target[reader.decoder_layer])  # (S, T)
    chosen = mutual_argmax(sim) if reader.method == "argmax" else itermax(sim)
    found = {(int(i), int(j)) for i, j in zip(*np.nonzero(chosen))}
    return {(j, i) for i, j in found} if p.turned else found


def state_readers(encoder_layers: int, decoder_layers: int) -> list[StateReader]:
    """Every reader: each encoder stream x each decoder stream x mode x method."""
    return [
        StateReader(a, b, mode, method)
        for a in range(encoder_layers + 1)
        for b in range(decoder_layers + 1)
        for mode in MODES
        for method in METHODS
    ]


def similarity_scores(
    lm: TranslationModel, pairs, gold: Sequence[GoldLinks]
) -> list[SimilarityRow]:
    """Every state reader's AER, precision and recall on a gold set, best first."""
    states = pair_states(lm, pairs)
    rows = []
    for r in state_readers(*lm.depth):
        check_time()
        s = score([state_links(p, r) for p in states], list(gold))
        row = (r.encoder_layer, r.decoder_layer, r.mode, r.method, s.aer, s.precision, s.recall)
        rows.append(SimilarityRow(*row, s.pairs))
    return sorted(rows, key=lambda r: (r.aer, -r.precision))
