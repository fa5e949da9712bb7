"""Gold sets the Alignment section scores: the shipped one, or two files a user uploads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import streamlit as st

from core.alignment.extract import WHOLE, modes
from core.alignment.gold import (
    GOLD_DIR,
    GoldError,
    GoldLinks,
    check_gold,
    parse_link_line,
    parse_pair_line,
    studio_gold,
)
from core.alignment.held_out import held_out_gold
from core.model.interface import TranslationModel, prompt_positions
from core.runs import budget
from pages.ui.heavy_work import heavy_slot
from pages.ui.text import md

MAX_GOLD_BYTES = 2 * 2**20  # largest uploaded pairs or gold file
MAX_GOLD_PAIRS = 2000  # more pairs than usual gold sets hold (the Hansards test set: 447)
MAX_PAIR_WORDS = 100  # longest uploaded sentence, so that its pieces fit any model here
MAX_NAME_CHARS = 80  # a longer file name is shortened in messages
REFERENCE = GOLD_DIR / "reference.json"  # a statistical aligner's score, by bench/alignment.py
HELD_OUT_REFERENCE = GOLD_DIR / "tatoeba-test.reference.json"  # the same on the held-out set
REFERENCE_KEYS = ("aligner", "aer", "precision", "recall", "pairs", "how")
T = TypeVar("T")


@dataclass(frozen=True)
class GoldSet:
    """Pairs with their gold links, named for the page, keyed by their content."""

    name: str  # in words, e.g. "the shipped gold set (64 pairs)"
    pairs: list  # (English tokens, French tokens) per pair
    links: list[GoldLinks]  # the gold links of each pair
    key: str  # a hash of the content: the cache key
    reference: str | None = None  # the file of a statistical aligner's score on it (the
    # app's own gold sets: studio_gold, held_out_gold)


def content_key(*parts: bytes) -> str:
    """A short hash of some byte strings, the cache key of a gold set."""
    digest = hashlib.sha1()
    for part in parts:
        digest.update(hashlib.sha1(part).digest())
    return digest.hexdigest()[:20]


def shown_name(name: str) -> str:
    """A file name as messages show it: on one line, at most MAX_NAME_CHARS long."""
    name = " ".join(str(name).split()) or "(unnamed file)"
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"


def text_lines(name: str, data: bytes) -> list[str]:
    """The lines of an uploaded file; GoldError naming it unless non-empty UTF-8 in the limit."""
    if len(data) > MAX_GOLD_BYTES:
        size = f"{len(data) / 2**20:.1f} MB"
        raise GoldError(f"{name}: {size}; the limit is {MAX_GOLD_BYTES // 2**20} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise GoldError(f"{name}, line {line}: not UTF-8 text") from None
    if not text.strip():
        raise GoldError(f"{name}: the file is empty")
    return text.splitlines()


def parsed(name: str, lines: list[str], parse) -> list:
    """``parse(line)`` of every line; a GoldError names the file and the line."""
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(parse(line))
        except GoldError as e:
            raise GoldError(f"{name}, line {number}: {e}") from None
    return out


def checked_pairs(name: str, data: bytes) -> list:
    """The pairs of an uploaded ``english ||| french`` file, each side at most MAX_PAIR_WORDS."""
    pairs = parsed(name, text_lines(name, data), parse_pair_line)
    if len(pairs) > MAX_GOLD_PAIRS:
        raise GoldError(
            f"{name}: {len(pairs)} pairs; the page scores at most {MAX_GOLD_PAIRS} "
            "(python -m core.align takes any number)"
        )
    for number, (src, tgt) in enumerate(pairs, 1):
        if max(len(src), len(tgt)) > MAX_PAIR_WORDS:
            raise GoldError(f"{name}, line {number}: longer than {MAX_PAIR_WORDS} words")
    return pairs


def uploaded_gold(pairs_file: tuple[str, bytes], gold_file: tuple[str, bytes], one_indexed: bool):
    """The GoldSet of two uploaded files, each (name, bytes); GoldError naming file and line."""
    pairs_name, gold_name = shown_name(pairs_file[0]), shown_name(gold_file[0])
    pairs = checked_pairs(pairs_name, pairs_file[1])
    lines = text_lines(gold_name, gold_file[1])
    links = parsed(gold_name, lines, lambda line: parse_link_line(line, one_indexed))
    check_gold(pairs, links, (pairs_name, gold_name))
    key = content_key(pairs_file[1], gold_file[1], b"1" if one_indexed else b"0")
    return GoldSet(f"{gold_name} ({len(pairs)} pairs)", pairs, links, key)


@st.cache_data(show_spinner=False, max_entries=1)
def shipped_gold() -> GoldSet:
    """The shipped gold set, read and checked once."""
    pairs, links = studio_gold()
    content = repr((pairs, [(sorted(g.sure), sorted(g.possible)) for g in links]))
    name = f"the shipped gold set ({len(pairs)} pairs)"
    key = content_key(content.encode())
    return GoldSet(name, pairs, links, key, reference=REFERENCE.name)


@st.cache_data(show_spinner="Reading the held-out pairs from fra-eng.zip…", max_entries=1)
def held_out_set() -> GoldSet:
    """The held-out Tatoeba gold set, its sentences read once from the local fra-eng.zip
    (GoldError saying how to get it where there is none)."""
    pairs, links = held_out_gold()
    content = repr((pairs, [(sorted(g.sure), sorted(g.possible)) for g in links]))
    name = f"the held-out Tatoeba pairs ({len(pairs)} pairs)"
    key = content_key(content.encode())
    return GoldSet(name, pairs, links, key, reference=HELD_OUT_REFERENCE.name)


def reference_score(name: str = REFERENCE.name) -> dict | None:
    """What a statistical aligner scored on one of the app's gold sets (bench/alignment.py
    wrote it to ``GOLD_DIR / name``), else None."""
    try:
        ref = json.loads((GOLD_DIR / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(ref, dict) or not all(k in ref for k in REFERENCE_KEYS):
        return None
    numbers = all(isinstance(ref[k], int | float) for k in ("aer", "precision", "recall"))
    return ref if numbers else None


def scoring_problem(lm: TranslationModel, gold: GoldSet) -> str | None:
    """Why the server will not score every reader of ``lm`` on ``gold``, in one line
    (``budget.scoring_problem``: the pairs, the model's size and a prompted model's template
    tokens); None when it will."""
    tokenizer, whole = "bpe" if lm.subword else "word", WHOLE in modes(lm)
    prompt = prompt_positions(lm)
    return budget.scoring_problem(vars(lm.cfg), gold.pairs, tokenizer, whole, prompt)


def within_bounds(lm: TranslationModel, gold: GoldSet, compute: Callable[[], T]) -> T | None:
    """``compute()`` now, on any gold set (the app's own ones too: a link can ask for every
    model and template): within the server's bounds (``scoring_problem``) and in its one slot
    for heavy work, else None after a message saying why not (TimeLimit inside the slot is
    the caller's to show). A result cached for every session is looked up (``peek``) by the
    caller first, so a class opening one link computes it once."""
    if problem := scoring_problem(lm, gold):
        st.error(md(problem))
        return None
    with heavy_slot() as slot:
        return None if slot is None else compute()
