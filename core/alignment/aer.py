"""Alignment error rate (Och & Ney 2003) and the symmetrisation of two directional alignments.

Links are (i, j) pairs, i a source (English) word and j a target (French) word, 0-indexed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import product

from core.alignment.gold import GoldLinks, Link

NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))  # Koehn


@dataclass(frozen=True)
class AlignmentScore:
    """Corpus-level (micro) precision, recall and AER of predicted links against gold links."""

    aer: float  # 1 - (|A∩S| + |A∩P|) / (|A| + |S|); lower is better
    precision: float  # |A∩P| / |A|
    recall: float  # |A∩S| / |S|
    pairs: int  # sentence pairs scored
    predicted_links: int  # |A|
    sure_links: int  # |S|
    possible_links: int  # |P|, sure links included

    def to_json(self) -> dict:
        """The fields as a JSON-able dict."""
        return asdict(self)


def ratio(part: int, whole: int) -> float:
    """part / whole, 0.0 when whole is 0 (no links earn no credit)."""
    return part / whole if whole else 0.0


def score(predicted: Sequence[Iterable[Link]], gold: Sequence[GoldLinks]) -> AlignmentScore:
    """Precision, recall and AER summed over the corpus (micro average), Och & Ney 2003.

    Counts are summed over every pair before dividing. A ratio with nothing to divide by is
    0.0: precision when nothing is predicted, recall when there are no sure links; AER is
    1.0 when both are empty, so a reader that links nothing never looks perfect.
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments for {len(gold)} gold pairs")
    a = s = p = a_s = a_p = 0
    for links, g in zip(predicted, gold):
        links = set(links)
        a, s, p = a + len(links), s + len(g.sure), p + len(g.possible)
        a_s, a_p = a_s + len(links & g.sure), a_p + len(links & g.possible)
    aer = 1.0 - (a_s + a_p) / (a + s) if a + s else 1.0
    return AlignmentScore(aer, ratio(a_p, a), ratio(a_s, s), len(gold), a, s, p)


def intersect(forward: Iterable[Link], backward: Iterable[Link]) -> set[Link]:
    """Links both directions found (high precision)."""
    return set(forward) & set(backward)


def union(forward: Iterable[Link], backward: Iterable[Link]) -> set[Link]:
    """Links either direction found (high recall)."""
    return set(forward) | set(backward)


def grow_diag(alignment: set[Link], candidates: set[Link], src_len: int, tgt_len: int) -> None:
    """Koehn's GROW-DIAG: add neighbouring candidates that align a still-unaligned word."""
    grew = True
    while grew:
        grew = False
        for i, j in product(range(src_len), range(tgt_len)):
            if (i, j) not in alignment:
                continue
            for new in ((i + di, j + dj) for di, dj in NEIGHBOURS):
                fresh = new in candidates and new not in alignment
                if fresh and unaligned_either(alignment, new):
                    alignment.add(new)
                    grew = True


def unaligned_either(alignment: set[Link], link: Link) -> bool:
    """Whether the link's source word or its target word has no link yet."""
    i, j = link
    return all(a != i for a, _ in alignment) or all(b != j for _, b in alignment)


def final_and(alignment: set[Link], direction: set[Link], src_len: int, tgt_len: int) -> None:
    """Koehn's FINAL-AND: add a direction's links whose two words are both still unaligned."""
    for i, j in product(range(src_len), range(tgt_len)):
        if (i, j) in direction and all(a != i and b != j for a, b in alignment):
            alignment.add((i, j))


def grow_diag_final_and(
    forward: Iterable[Link], backward: Iterable[Link], src_len: int, tgt_len: int
) -> set[Link]:
    """Koehn's grow-diag-final-and symmetrisation (the Moses default) of two directions.

    Both directions are given as (source i, target j) links: flip a target-to-source
    aligner's output first. Start from the intersection, grow into the union through
    neighbours (diagonals included), then add each direction's links between two unaligned
    words, scanning source then target positions in order.
    """
    forward, backward = set(forward), set(backward)
    alignment = forward & backward
    grow_diag(alignment, forward | backward, src_len, tgt_len)
    final_and(alignment, forward, src_len, tgt_len)
    final_and(alignment, backward, src_len, tgt_len)
    return alignment


COMBINATIONS = ("forward", "reverse", "intersection", "union", "grow-diag-final-and")


def combinations(
    forward: Sequence[set[Link]], backward: Sequence[set[Link]], sizes: Sequence[tuple[int, int]]
) -> dict[str, list[set[Link]]]:
    """{name: every pair's links} of two directions (both as (source i, target j) links, one
    set per pair; ``sizes``: each pair's (source words, target words)), in COMBINATIONS order:
    each alone, their intersection, union and grow-diag-final-and."""
    return {
        "forward": list(forward),
        "reverse": list(backward),
        "intersection": [intersect(a, b) for a, b in zip(forward, backward)],
        "union": [union(a, b) for a, b in zip(forward, backward)],
        "grow-diag-final-and": [
            grow_diag_final_and(a, b, n, m) for a, b, (n, m) in zip(forward, backward, sizes)
        ],
    }
