"""Alignment supervision asked for from the Train page: where a new run's alignments come from.

The Train form offers what ``python -m core.train --align-teacher / --align-links
--align-pairs`` offers (Garg et al. 2019; ``core.alignment.teacher``): a **teacher**, one of
the models the app lists (its best attention reader aligns the training pairs), **eflomal**
run on the training pairs (``teacher`` is then ``"eflomal"``, where it is installed), or a
statistical **aligner's files** uploaded by the user (Pharaoh links and their
``english ||| french`` lines). A browser names a teacher only by its catalogue key, never a
path; uploaded files are kept in the run under fixed names, each at most
``budget.ALIGNMENT_FILE_BYTES``. The trainer reads the choice from the run's request.json
(``requested_alignment``), as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.runs.budget import ALIGNMENT_FILE_BYTES, size_words
from core.runs.eflomal_program import EFLOMAL, eflomal_program, missing_line
from core.runs.run_dir import RunDir, read_json

LINKS_NAME, PAIRS_NAME = "alignment-links.txt", "alignment-pairs.txt"  # in the run directory
ALIGN_WEIGHT = 0.05  # Garg et al.'s lambda, when alignments are given without a weight


@dataclass
class AlignmentChoice:
    """A teacher model's catalogue key, or an aligner's two files (their bytes)."""

    teacher: str = ""  # catalogue key, e.g. "checkpoints/fra-eng-small.pt"
    links: bytes = b""  # Pharaoh links, one line per pair
    pairs: bytes = b""  # the "english ||| french" lines they align

    @property
    def files(self) -> bool:
        """Whether the aligner's files were given (rather than a teacher)."""
        return bool(self.links or self.pairs)


def teacher_path(key: str) -> Path | None:
    """The file of a usable studio model the app lists under ``key`` (None: no such model)."""
    from core.runs.catalogue import list_models  # here: the trainer reads requests without it

    for entry in list_models():
        if entry.key == key and entry.usable and entry.path.endswith(".pt"):
            return Path(entry.path)
    return None


def alignment_problems(choice: AlignmentChoice | None, train: dict) -> list[str]:
    """Why this choice cannot supervise a run with these training settings ([]: it can)."""
    if choice is None:
        if train.get("align_weight", 0) > 0:
            return ["align_weight needs alignments: choose a teacher model or an aligner's files"]
        return []
    if choice.teacher and choice.files:
        return ["alignments: choose a teacher model or an aligner's files, not both"]
    if choice.teacher == EFLOMAL:
        return [] if eflomal_program() else [f"alignments: {missing_line()}"]
    if choice.teacher:
        if teacher_path(choice.teacher) is None:
            return [f"alignments: no usable model {choice.teacher!r} to teach them"]
        return []
    if not (choice.links and choice.pairs):
        return ["alignments: upload both the aligner's links and the pairs they align"]
    return [
        f"alignments: the {what} file is {size_words(len(data))}; at most "
        f"{size_words(ALIGNMENT_FILE_BYTES)}"
        for what, data in (("links", choice.links), ("pairs", choice.pairs))
        if len(data) > ALIGNMENT_FILE_BYTES
    ]


def alignment_bytes(choice: AlignmentChoice | None) -> int:
    """Disk the choice adds to a run: the uploaded files (a teacher adds none here)."""
    return len(choice.links) + len(choice.pairs) if choice is not None else 0


def stage_alignment(rd: RunDir, choice: AlignmentChoice | None, train: dict) -> dict:
    """Keep the choice in the run (uploads under fixed names) and give a weight where none
    was set; the request.json entry the trainer reads ({} without supervision)."""
    if choice is None:
        return {}
    if not train.get("align_weight"):
        train["align_weight"] = ALIGN_WEIGHT
    if choice.teacher == EFLOMAL:
        return {"teacher": EFLOMAL}
    if choice.teacher:
        return {"teacher": str(teacher_path(choice.teacher))}
    (rd.path / LINKS_NAME).write_bytes(choice.links[:ALIGNMENT_FILE_BYTES])
    (rd.path / PAIRS_NAME).write_bytes(choice.pairs[:ALIGNMENT_FILE_BYTES])
    return {"links": LINKS_NAME, "pairs": PAIRS_NAME}


def requested_alignment(rd: RunDir) -> tuple[str | None, str | None, str | None]:
    """(teacher, links, pairs) the app's request.json of a run asks for (Nones: nothing);
    the files only as the fixed names inside the run."""
    request = read_json(rd.request, None)
    asked = request.get("alignment") if isinstance(request, dict) else None
    if not isinstance(asked, dict) or not asked:
        return None, None, None
    if isinstance(asked.get("teacher"), str):
        return asked["teacher"], None, None
    return None, str(rd.path / LINKS_NAME), str(rd.path / PAIRS_NAME)
