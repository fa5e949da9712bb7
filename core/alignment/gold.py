"""Gold word alignments: sentence pairs and Pharaoh links (``i-j`` sure, ``ipj`` possible).

Pairs are ``english tokens ||| french tokens`` lines. Links are one line per pair of
``i-j`` (sure) and ``ipj`` (possible) tokens, i the English token, j the French token,
counted from 0 (``one_indexed=True`` reads files counted from 1, such as the NAACL 2003
Hansards set). A reading error names the file and its 1-based line; ``check_gold`` names
the line where pairs and links disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from core.corpus.source import pair_columns
from core.corpus.text import tokenize

GOLD_DIR = Path(__file__).resolve().parent / "gold"  # the shipped set (README.md there)
STUDIO_PAIRS = GOLD_DIR / "studio.src-tgt"
STUDIO_LINKS = GOLD_DIR / "studio.gold"
SEPARATOR = "|||"
MAX_INDEX_DIGITS = 6  # a token index has at most this many digits (a sentence of a million)
LINK = re.compile(rf"(\d{{1,{MAX_INDEX_DIGITS}}})([-p])(\d{{1,{MAX_INDEX_DIGITS}}})")  # i-j, ipj

Link = tuple[int, int]  # (English token, French token), 0-indexed
Pair = tuple[list[str], list[str]]  # (English tokens, French tokens)


class GoldError(ValueError):
    """A gold file that cannot be used; the message names the file and line to fix."""


@dataclass
class GoldLinks:
    """One pair's gold links: sure S and possible P, with P ⊇ S as AER defines it."""

    sure: set[Link] = field(default_factory=set)  # unambiguous links
    possible: set[Link] = field(default_factory=set)  # every acceptable link, sure ones too

    def __post_init__(self) -> None:
        """Copy both sets and make every sure link possible too."""
        self.sure = set(self.sure)
        self.possible = set(self.possible) | self.sure


def file_lines(path: str | Path) -> list[str]:
    """A UTF-8 text file's lines (raises GoldError when it is not UTF-8)."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise GoldError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_pair_line(line: str) -> Pair:
    """``src ||| tgt`` or ``src<TAB>tgt`` (``pair_columns``) -> (English tokens, French
    tokens); GoldError saying what is wrong."""
    columns = pair_columns(line)
    if len(columns) != 2:
        raise GoldError(
            f"needs exactly one '{SEPARATOR}' (or one TAB) between English and French, found "
            f"{len(columns) - 1}"
        )
    src, tgt = (side.split() for side in columns)
    if not src or not tgt:
        raise GoldError(f"the {'English' if not src else 'French'} side is empty")
    return src, tgt


def read_pairs(path: str | Path) -> list[Pair]:
    """Every ``english ||| french`` (or ``english<TAB>french``) line of a file as token lists."""
    pairs = []
    for number, line in enumerate(file_lines(path), 1):
        try:
            pairs.append(parse_pair_line(line))
        except GoldError as e:
            raise GoldError(f"{path}, line {number}: {e}") from None
    return pairs


def parse_link(token: str, one_indexed: bool = False) -> tuple[Link, bool]:
    """``i-j`` or ``ipj`` -> ((i, j) counted from 0, whether it is sure)."""
    m = LINK.fullmatch(token)
    if m is None:
        shown = token if len(token) <= 40 else token[:39] + "…"
        raise GoldError(
            f"{shown!r} is not a link: write i-j (sure) or ipj (possible), each index at most "
            f"{MAX_INDEX_DIGITS} digits"
        )
    first = 1 if one_indexed else 0
    i, j = int(m[1]) - first, int(m[3]) - first
    if i < 0 or j < 0:
        raise GoldError(f"{token!r} has a 0, but the file is read as counted from 1")
    return (i, j), m[2] == "-"


def parse_link_line(line: str, one_indexed: bool = False) -> GoldLinks:
    """One line of Pharaoh links (an empty line: no links)."""
    sure, possible = set(), set()
    for token in line.split():
        link, is_sure = parse_link(token, one_indexed)
        (sure if is_sure else possible).add(link)
    return GoldLinks(sure, possible)


def read_links(path: str | Path, one_indexed: bool = False) -> list[GoldLinks]:
    """Every line of a Pharaoh links file, counted from 0 (or from 1 with ``one_indexed``)."""
    links = []
    for number, line in enumerate(file_lines(path), 1):
        try:
            links.append(parse_link_line(line, one_indexed))
        except GoldError as e:
            raise GoldError(f"{path}, line {number}: {e}") from None
    return links


def link_problem(pair: Pair, links: GoldLinks) -> str | None:
    """The first link outside the pair's tokens, in words, or None."""
    src, tgt = pair
    for i, j in sorted(links.possible):
        if i >= len(src) or j >= len(tgt):
            return (
                f"link {i}-{j} (counted from 0) is out of range for "
                f"{len(src)} English and {len(tgt)} French tokens"
            )
    return None


def check_gold(
    pairs: list[Pair], links: list[GoldLinks], names: tuple[str, str] | None = None
) -> None:
    """Raise GoldError naming the line when counts differ or a link is out of range.

    ``names`` (pairs file, links file) puts the files' names in the message.
    """
    pairs_name, links_name = names or ("", "")
    if len(pairs) != len(links):
        if names:
            raise GoldError(
                f"{links_name}: {len(links)} lines of links for the {len(pairs)} pairs of "
                f"{pairs_name}; it needs one line (maybe empty) per pair"
            )
        first = min(len(pairs), len(links)) + 1
        raise GoldError(
            f"{len(pairs)} pairs but {len(links)} lines of links: line {first} has no "
            f"{'links' if len(links) < len(pairs) else 'pair'} (one line of links per pair)"
        )
    for number, (pair, gold) in enumerate(zip(pairs, links), 1):
        problem = link_problem(pair, gold)
        if problem:
            where = (
                f"{links_name}, line {number}"
                if names
                else f"pair {number} (line {number} of both files)"
            )
            raise GoldError(f"{where}: {problem}")


def write_links(links: GoldLinks | set[Link]) -> str:
    """One pair's Pharaoh line, counted from 0: ``i-j`` sure, ``ipj`` possible only."""
    if not isinstance(links, GoldLinks):
        links = GoldLinks(set(links))
    kinds = [(link, "-") for link in links.sure]
    kinds += [(link, "p") for link in links.possible - links.sure]
    return " ".join(f"{i}{kind}{j}" for (i, j), kind in sorted(kinds))


def studio_gold() -> tuple[list[Pair], list[GoldLinks]]:
    """The shipped gold set (``core/alignment/gold``), checked."""
    pairs, links = read_pairs(STUDIO_PAIRS), read_links(STUDIO_LINKS)
    check_gold(pairs, links)
    return pairs, links


def tokenized_like_ours(tokens: list[str]) -> bool:
    """Whether tokens are already what ``core.corpus.text.tokenize`` makes of their text."""
    return tokenize(" ".join(tokens)) == list(tokens)
