"""Alignments of a run's training pairs, written into its folder before it trains.

Alignment-supervised training (Garg et al. 2019) trains one cross-attention head toward
word alignments of the training pairs. They come from one of two places:

- a **teacher checkpoint**: its best attention reader on the shipped gold set (or the one
  named) aligns every training pair, as Garg et al. do without a statistical aligner (they
  read the alignments of a model trained first);
- **eflomal**, run by the studio on the training pairs (both directions, grow-diag-final-and;
  ``core.alignment.eflomal_teacher``), as Garg et al. supervise with a statistical aligner;
- a **statistical aligner** run outside the app (eflomal, fast_align, GIZA++): its output in
  the community's files, ``english ||| french`` lines and one Pharaoh line per pair.

Either way the run's ``alignments.txt`` (``core.corpus.supervision``) holds one line per
pair, its first line ``# <where they came from>``; the trainer matches lines to training
pairs by their words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from core.alignment.eflomal_teacher import EFLOMAL, eflomal_links
from core.alignment.extract import Reader, links, mode_label, pair_maps
from core.alignment.gold import check_gold, read_links, read_pairs, studio_gold
from core.alignment.grid import alignment_grid
from core.corpus.config import DataConfig
from core.corpus.splits import load_splits
from core.corpus.supervision import supervision_line, write_supervision
from core.model.interface import TranslationModel
from core.model.opened import open_model

CHUNK = 2048  # pairs read at once (their maps are dropped after each chunk)
Pairs = Sequence[tuple[Sequence[str], Sequence[str]]]


def best_reader(lm: TranslationModel) -> Reader:
    """The teacher's reader with the lowest AER on the shipped gold set."""
    return alignment_grid(lm, *studio_gold()).best.reader()


def teacher_links(
    lm: TranslationModel,
    pairs: Pairs,
    reader: Reader,
    tick: Callable[[int], None] | None = None,
) -> list[set]:
    """Each pair's word links (source word, target word) under the teacher's reader."""
    out: list[set] = []
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start : start + CHUNK]
        out += [links(m, reader) for m in pair_maps(lm, chunk)]
        if tick:
            tick(len(chunk))
    return out


def describe_reader(name: str, reader: Reader) -> str:
    """e.g. "fra-eng-small.pt, layer 1, mean of heads, AWO"."""
    head = "mean of heads" if reader.head is None else f"head {reader.head}"
    layer = "all layers" if reader.layer is None else f"layer {reader.layer}"
    return f"{name}, {layer}, {head}, {mode_label(reader.mode)}"


def file_links(pairs_path: str | Path, links_path: str | Path) -> tuple[list, list[set]]:
    """(pairs, each pair's sure and possible links) of an aligner's files, checked
    (GoldError naming the file and line when they do not fit)."""
    pairs = read_pairs(pairs_path)
    gold = read_links(links_path)
    check_gold(pairs, gold, (Path(pairs_path).name, Path(links_path).name))
    return pairs, [set(g.possible) for g in gold]  # possible links include the sure ones


def write_alignments(path: str | Path, source: str, pairs: Pairs, pair_links: list[set]) -> int:
    """Write the run's alignments file; the number of pairs with at least one link."""
    lines = [f"# {' '.join(source.split())}"] + [
        supervision_line(s, t, k) for (s, t), k in zip(pairs, pair_links) if k
    ]
    return write_supervision(path, lines) - 1


def read_source(path: str | Path) -> str:
    """The description on an alignments file's first line ("" without one)."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    return first[2:].strip() if first.startswith("# ") else ""


def prepare_alignments(
    path: str | Path,
    data: DataConfig,
    teacher: str | None = None,
    links_file: str | None = None,
    pairs_file: str | None = None,
    bar: bool = True,
) -> str:
    """Write a run's alignments file from a teacher checkpoint, eflomal (``teacher`` is
    ``"eflomal"``) or an aligner's files; the description saved with the run (file names
    only, no folders of this machine)."""
    if teacher == EFLOMAL:
        pairs = load_splits(data).train.pairs
        progress = _bar(len(pairs), "eflomal aligning the pairs (estimated)") if bar else None
        pair_links = eflomal_links(pairs, _fraction(progress, len(pairs)))
        if progress:
            progress.close()
        source = f"eflomal (grow-diag-final-and) on the {len(pairs):,} training pairs"
    elif teacher:
        lm = open_model(str(teacher))
        pairs = load_splits(data).train.pairs
        reader = best_reader(lm)
        progress = _bar(len(pairs)) if bar else None
        pair_links = teacher_links(lm, pairs, reader, progress.update if progress else None)
        if progress:
            progress.close()
        source = describe_reader(Path(teacher).name, reader)
    elif links_file and pairs_file:
        pairs, pair_links = file_links(pairs_file, links_file)
        source = f"{Path(links_file).name} ({len(pairs):,} pairs)"
    else:
        raise ValueError("give --align-teacher, or both --align-links and --align-pairs")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    n = write_alignments(path, source, pairs, pair_links)
    return f"{source}; {n:,} pairs aligned"


def _bar(total: int, desc: str = "aligning the training pairs"):
    """A tqdm bar (with ETA) for the teacher's pass over the training pairs."""
    from tqdm import tqdm

    return tqdm(total=total, unit="pair", desc=desc)


def _fraction(bar, total: int):
    """progress(fraction) moving ``bar`` to that share of ``total`` (None without a bar)."""
    if bar is None:
        return None
    return lambda f: bar.update(max(0, round(f * total) - bar.n))
