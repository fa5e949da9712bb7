"""eflomal as the teacher of alignment-supervised training: its alignments of a run's
training pairs, both directions symmetrised with grow-diag-final-and, cached per corpus.

Garg et al. (2019) supervise one cross-attention head with a statistical aligner's links
(GIZA++ in their paper) and report a lower AER than the aligner's own; a head taught by the
model's own attention cannot beat its teacher. eflomal (Östling & Tiedemann 2016) is the
aligner the studio measures against (``bench/alignment.py``: AER 0.051 on the studio gold
set). It is GPLv3, so the studio never imports it: it runs as a separate process
(``core.runs.eflomal_program`` finds it) on files the studio writes (the pairs' words are
data in a file, never arguments).

The links of a corpus are kept in ``<runs>/.eflomal/<hash>.links`` (one Pharaoh line per
pair; the hash covers the pairs and the aligner's options), so a second run on the same
pairs does not align again; the folder keeps at most ``CACHE_BYTES``, the oldest going first.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from core.alignment.aer import grow_diag_final_and
from core.alignment.gold import parse_link_line
from core.places import runs_root
from core.runs.eflomal_program import EFLOMAL, eflomal_program, missing_line

__all__ = ["EFLOMAL", "EflomalError", "eflomal_links", "eflomal_program", "missing_line"]

OPTIONS = ("--model", "3")  # IBM1 + HMM + fertility, eflomal's best (its default too)
CACHE_BYTES = 64 * 2**20  # the .eflomal folder
PAIRS_PER_S = 15_000  # eflomal --model 3 here (2-core AMD EPYC): the progress bar's estimate
Pairs = Sequence[tuple[Sequence[str], Sequence[str]]]


class EflomalError(OSError):
    """eflomal is missing or failed: the message says what to do."""


def corpus_key(pairs: Pairs) -> str:
    """The cache key of a corpus: a hash of its lines and the aligner's options."""
    h = hashlib.sha256(" ".join(OPTIONS).encode())
    for src, tgt in pairs:
        h.update(f"{' '.join(src)} ||| {' '.join(tgt)}\n".encode())
    return h.hexdigest()[:32]


def cache_file(pairs: Pairs) -> Path:
    """Where a corpus's symmetrised links are kept."""
    return runs_root() / ".eflomal" / f"{corpus_key(pairs)}.links"


def eflomal_links(pairs: Pairs, progress: Callable[[float], None] | None = None) -> list[set]:
    """Each pair's links (source word i, target word j): eflomal both ways, grow-diag-final-
    and; from the cache when these pairs were aligned before. ``progress(fraction)``: the
    first half estimated from the time eflomal takes here, about every second (it reports
    none), the second half the pairs symmetrised. EflomalError if it is missing or fails."""
    kept = cache_file(pairs)
    if kept.is_file():
        lines = kept.read_text(encoding="utf-8").splitlines()
        if len(lines) == len(pairs):
            return [set(parse_link_line(x).sure) for x in lines]
    program = eflomal_program()
    if program is None:
        raise EflomalError(missing_line())
    half = None if progress is None else (lambda f: progress(f / 2))  # eflomal: the first half
    forward, backward = run_eflomal(program, pairs, half)
    links = []
    for n, (f, b, (s, t)) in enumerate(zip(forward, backward, pairs), 1):
        both = grow_diag_final_and(f, b, len(s), len(t))
        links.append({(i, j) for i, j in both if i < len(s) and j < len(t)})
        if progress is not None and (n % 5000 == 0 or n == len(pairs)):
            progress(0.5 + n / len(pairs) / 2)  # symmetrising: the second half
    keep(kept, ["" if not k else " ".join(f"{i}-{j}" for i, j in sorted(k)) for k in links])
    return links


def run_eflomal(program: str, pairs: Pairs, progress=None) -> tuple[list, list]:
    """(forward links, backward links) per pair, both as (source i, target j)."""
    with tempfile.TemporaryDirectory(prefix="eflomal-") as tmp:
        folder = Path(tmp)
        data, fwd, rev = folder / "pairs.txt", folder / "fwd.txt", folder / "rev.txt"
        lines = [f"{_side(s)} ||| {_side(t)}" for s, t in pairs]
        data.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [program, "-i", str(data), "-f", str(fwd), "-r", str(rev), *OPTIONS, "--overwrite"]
        done = threading.Event()
        ticker = threading.Thread(target=_estimate, args=(len(pairs), done, progress), daemon=True)
        if progress is not None:
            ticker.start()
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        finally:
            done.set()
            if ticker.is_alive():
                ticker.join()  # its last report before any that follow
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no message"]
            raise EflomalError(f"eflomal failed (exit {result.returncode}): {said[0][:200]}")
        read = lambda p: [parse_link_line(x).sure for x in p.read_text().splitlines()]  # noqa: E731
        forward, backward = read(fwd), read(rev)
    if len(forward) != len(pairs) or len(backward) != len(pairs):
        raise EflomalError(f"eflomal wrote {len(forward)} lines for {len(pairs)} pairs")
    return forward, backward


def _side(words: Sequence[str]) -> str:
    """One side of eflomal's input line: the words, a word that is eflomal's separator (a
    corpus may hold one) as another token of the same length, "." for an empty side."""
    return " ".join("|" if w == "|||" else w for w in words) or "."


def _estimate(n: int, done: threading.Event, progress: Callable[[float], None]) -> None:
    """Report an estimated fraction every second until ``done`` (at most 0.99 before it),
    then 1."""
    start, expected = time.monotonic(), max(1.0, n / PAIRS_PER_S)
    while not done.wait(1.0):
        progress(min(0.99, (time.monotonic() - start) / expected))
    progress(1.0)


def keep(path: Path, lines: list[str]) -> None:
    """Write a corpus's links into the cache when they fit, the oldest entries going past
    CACHE_BYTES (a size known before writing)."""
    text = "\n".join(lines) + "\n"
    size = len(text.encode("utf-8"))
    if size > CACHE_BYTES:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = sorted(path.parent.glob("*.links"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in entries)
    while entries and total + size > CACHE_BYTES:
        old = entries.pop(0)
        total -= old.stat().st_size
        old.unlink(missing_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
