"""The held-out gold set: hand-made word alignments of 130 Tatoeba pairs that no shipped model
trained on, read with the text of the user's own copy of fra-eng.zip.

The repository keeps no excerpt of the corpus (its licence asks for attribution, and the
project ships none of it): ``gold/tatoeba-test.gold`` holds, per pair, its number among the
pairs of fra-eng.zip (counted from 0 in the order the studio's reader yields them), the first
16 hex digits of the SHA-1 of its tokenized text (``english ||| french``, d2l's tokens) and its
Pharaoh links. ``held_out_gold`` reads the corpus once, checks every hash and returns the pairs
and links as ``studio_gold`` does; GoldError says what is missing or different.

The pairs are a random sample (seed 2026) of the test split of the shipped models (split seed
0, pairs of 5-12 English tokens), aligned by hand under the studio set's guidelines
(``gold/README.md``) before any model's output on them was looked at.

``gold/tatoeba-dev.gold`` is kept the same way: 100 pairs of the shipped models' validation
split (seed 2027, none of the held-out set's), aligned so too. It is the dev set: a reading's
setting (``extract.BOTH_WAYS``) is chosen on it, and the two others only report.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

from core.alignment.gold import GOLD_DIR, GoldError, GoldLinks, Pair, check_gold
from core.alignment.gold import parse_link_line as parse_links
from core.corpus.source import corpus_pairs, fra_eng_copy
from core.corpus.text import tokenize

HELD_OUT = GOLD_DIR / "tatoeba-test.gold"
DEV = GOLD_DIR / "tatoeba-dev.gold"  # 100 validation pairs: where a reading's setting is chosen
HASH_DIGITS = 16


def pair_hash(src: list[str], tgt: list[str]) -> str:
    """What the gold file keeps of a pair's text: 16 hex digits of its tokens' SHA-1."""
    text = f"{' '.join(src)} ||| {' '.join(tgt)}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:HASH_DIGITS]


def gold_rows(path: Path = HELD_OUT) -> list[tuple[int, str, GoldLinks]]:
    """(pair number, hash, links) of each line of a held-out gold file."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            index, digest, links = line.split("\t")
            rows.append((int(index), digest, parse_links(links)))
        except ValueError as e:
            raise GoldError(f"{path.name}, line {number}: {e}") from None
    return rows


def corpus_text(numbers: list[int], corpus: Path) -> dict[int, Pair]:
    """The tokenized pairs of the corpus at these numbers."""
    wanted, found = set(numbers), {}
    stream = corpus_pairs(corpus, {})
    for index, (src, tgt) in enumerate(itertools.islice(stream, max(numbers) + 1)):
        if index in wanted:
            found[index] = (tokenize(src), tokenize(tgt))
    return found


def held_out_gold(
    corpus: str | Path | None = None, gold: Path = HELD_OUT
) -> tuple[list[Pair], list[GoldLinks]]:
    """The held-out set's pairs (from ``corpus``, else the local fra-eng.zip) and links;
    ``gold=DEV``: the dev set's, kept the same way."""
    path = Path(corpus) if corpus else fra_eng_copy()
    if path is None or not path.is_file():
        raise GoldError(
            "The held-out gold set reads its sentences from fra-eng.zip, which is not on this "
            "machine: set FRA_ENG_ZIP to a copy (or train once on fra-eng to download it)."
        )
    rows = gold_rows(gold)
    text = corpus_text([n for n, _, _ in rows], path)
    pairs = []
    for number, digest, _ in rows:
        pair = text.get(number)
        if pair is None or pair_hash(*pair) != digest:
            raise GoldError(
                f"{path.name} is not the corpus the held-out gold set was made from (pair "
                f"{number} differs): use d2l's fra-eng.zip."
            )
        pairs.append(pair)
    links = [links for _, _, links in rows]
    check_gold(pairs, links)
    return pairs, links
