"""Word alignments of training pairs as supervision for one cross-attention head (Garg et al. 2019).

A run trained with alignment supervision keeps its alignments in its own folder, one pair
per line, ``english words ||| french words ||| i-j i-j ...`` (Pharaoh links, source word i,
target word j, 0-indexed). They are matched to the training pairs by their words, so the
file may hold more pairs, or fewer, than the split (a pair without a line is not
supervised). For a pair the model reads as pieces (BPE), two pieces are linked when their
words are.

The target of the supervised head at decoder step k (the step that predicts target piece k,
AWO) is the uniform distribution over the source pieces linked to piece k; a piece with no
link is not supervised at that step (its row is all zeros).

Shape key: B batch, S source length (pieces + <eos>, padded), T target pieces + <eos> (padded).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from core.corpus.source import DataError
from core.corpus.vocab import Vocab

SEPARATOR = " ||| "
Words = tuple[str, ...]
MAX_LINE_CHARS = 4000  # a longer line is not a sentence pair of ours


def supervision_line(src: Sequence[str], tgt: Sequence[str], links: Iterable) -> str:
    """One line of the file: words, words and sorted ``i-j`` links."""
    pharaoh = " ".join(f"{i}-{j}" for i, j in sorted(links))
    return SEPARATOR.join([" ".join(src), " ".join(tgt), pharaoh])


def parse_supervision_line(line: str, number: int = 0) -> tuple[Words, Words, list]:
    """(source words, target words, [(i, j), ...]); DataError naming the line if malformed."""
    parts = line.rstrip("\n").split(SEPARATOR)
    if len(parts) != 3 or len(line) > MAX_LINE_CHARS:
        raise DataError(f"alignment line {number}: expected 'english ||| french ||| links'")
    src, tgt = tuple(parts[0].split()), tuple(parts[1].split())
    links = []
    for token in parts[2].split():
        i, sep, j = token.partition("-")
        if not (sep and i.isdigit() and j.isdigit()):
            raise DataError(f"alignment line {number}: {token[:20]!r} is not a link i-j")
        if int(i) >= len(src) or int(j) >= len(tgt):
            raise DataError(f"alignment line {number}: link {token} is outside the sentence")
        links.append((int(i), int(j)))
    return src, tgt, links


def read_supervision(path: str | Path) -> dict[tuple[Words, Words], list]:
    """The links of every pair of a supervision file, by its words."""
    table: dict[tuple[Words, Words], list] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip() and not line.startswith("#"):  # "# " starts the description
                src, tgt, links = parse_supervision_line(line, number)
                table[(src, tgt)] = links
    return table


def write_supervision(path: str | Path, lines: Iterable[str]) -> int:
    """Write lines atomically (a temp file, then rename); the number written."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
            n += 1
    tmp.replace(path)
    return n


def piece_links(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    table: dict[tuple[Words, Words], list],
) -> list[np.ndarray | None]:
    """For each pair, its links between pieces as an (n, 2) array (source, target piece);
    None for a pair the table does not hold (or holds without links)."""
    src_words = word_index_many(src_vocab, [s for s, _ in pairs])
    tgt_words = word_index_many(tgt_vocab, [t for _, t in pairs])
    out: list[np.ndarray | None] = []
    for (src, tgt), sw, tw in zip(pairs, src_words, tgt_words):
        links = table.get((tuple(src), tuple(tgt)))
        if not links:
            out.append(None)
            continue
        linked = np.zeros((len(src), len(tgt)), dtype=bool)  # (words, words)
        linked[tuple(np.array(links).T)] = True
        pieces = linked[sw][:, tw]  # (source pieces, target pieces)
        out.append(np.argwhere(pieces).astype(np.int64))  # (n, 2)
    return out


def word_index_many(vocab: Vocab, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """For each sentence, the word index of each piece the vocabulary reads."""
    if vocab.kind == "word":
        return [np.arange(len(s)) for s in sentences]
    return [np.array(ids, dtype=np.int64) for ids in vocab.word_ids_many(sentences)]


def alignment_targets(links: Sequence[np.ndarray | None], S: int, T: int) -> torch.Tensor:
    """(B, T, S) float32: row k spreads 1 over the source pieces linked to target piece k."""
    target = torch.zeros(len(links), T, S)  # (B, T, S)
    for b, pair in enumerate(links):
        if pair is not None and len(pair):
            target[b, pair[:, 1], pair[:, 0]] = 1.0
    rows = target.sum(-1, keepdim=True)  # (B, T, 1)
    return target / rows.clamp_min(1.0)
