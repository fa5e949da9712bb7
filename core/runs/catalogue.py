"""The one model catalogue: every checkpoint the app can offer, described.

Models are ``checkpoints/**/*.pt`` (the shipped one and those saved from runs), every
run's ``best.pt`` / ``last.pt``, and Hugging Face encoder-decoder folders (``save_pretrained``
layout) under ``checkpoints/`` or the operator's models folder (``ATTENTION_STUDIO_MODELS``).
Home, Translate and Attention all list them from here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from core.corpus.user_files import describe_data
from core.model import opened
from core.model.bleu import usable_bleu
from core.model.checkpoints import CheckpointError, read_metadata
from core.places import checkpoints_root, models_root, runs_root
from core.runs.budget import parameters
from core.runs.history import history_path
from core.runs.run_dir import RunDir
from core.training.settings import blocks_words

SHIPPED_NAME = "fra-eng-small.pt"  # the model the app ships with, under checkpoints/
ALIGNED_NAME = "fra-eng-small-aligned.pt"  # shipped beside it: one head trained to align
REVERSE_NAME = "fr-en-small-aligned.pt"  # the aligned recipe French→English: both directions
SHIPPED_NAMES = (SHIPPED_NAME, ALIGNED_NAME, REVERSE_NAME)  # the default first
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # names of saved models
ORIGINS = ("shipped model", "saved model", "run best", "run last", "Hugging Face model")
HF_ORIGIN = ORIGINS[-1]
MAX_MODEL_FOLDERS = 200  # Hugging Face folders listed per root (deeper or more are skipped)
UNKNOWN_LANGUAGES = ("source", "target")  # the languages of a model whose files do not say


class ModelError(Exception):
    """A model cannot be saved under that name; the message says why."""


def size_label(model: dict | None) -> str:
    """E.g. '1.2 M params · 256 wide · 2+2 blocks · 4 heads' ('size unknown' without one)."""
    if not model or "d_model" not in model:
        return "size unknown"
    label = f"{model['d_model']} wide · {blocks_words(model)} · {model.get('num_heads')} heads"
    if "src_vocab_size" in model:
        try:
            params = parameters(model)
        except (TypeError, ValueError, RuntimeError):
            return label
        label = f"{params / 1e6:.2f} M params · {label}"
    return label


@dataclass
class ModelEntry:
    """One model file the app can offer, with what is known about it."""

    key: str  # stable id used in URLs: "checkpoints/<file>" or "runs/<run>/<file>"
    path: str  # the .pt file
    origin: str  # where it comes from, in words (see ORIGINS)
    mtime: float  # modification time (seconds since the epoch)
    data: str = ""  # where its training data came from
    size: str = "size unknown"  # parameters, width, blocks and heads in words
    heads: int | None = None  # attention heads per layer
    step: int | None = None  # optimiser steps trained
    val_bleu: float | None = None  # validation BLEU of this checkpoint, if measured
    run_dir: str | None = None  # the run directory with metrics and snapshots, if known
    history: str | None = None  # its run directory or .history file, for the training replay
    usable: bool = True  # False when the file cannot be read
    reason: str = ""  # why it is not usable
    trained_task: str = ""  # a model folder trained here: the task it records ("" otherwise)
    languages: tuple[str, str] | None = UNKNOWN_LANGUAGES  # (source, target) codes it
    # translates, from its files (UNKNOWN_LANGUAGES where they do not say); None: it does
    # not translate (a masked language model)
    direction: str = ""  # e.g. "fr→en" for a studio translator ("" where unknown), as a
    # Hugging Face folder's data says it

    @property
    def label(self) -> str:
        """One short line for a picker (fits 760 px); entry_caption says the rest."""
        if not self.usable:
            return f"{self.key} (unusable)"
        if self.origin == HF_ORIGIN:
            return f"{self.key} · {self.heads} heads · {self.data}"
        heads = f"{self.heads} heads" if self.heads else "heads ?"
        bleu = f"val BLEU {self.val_bleu:.1f}" if self.val_bleu is not None else "no val BLEU"
        step = f"step {self.step:,}" if self.step is not None else "step ?"
        return " · ".join(x for x in (self.key, self.direction, heads, step, bleu) if x)


def direction_words(languages: tuple[str, str] | None, data_config: dict) -> str:
    """The direction a studio checkpoint translates, e.g. 'fr→en'; "" where its files do not
    say or it was trained on another task (induction: no languages)."""
    if languages in (None, UNKNOWN_LANGUAGES) or data_config.get("task") == "induction":
        return ""
    return "→".join(languages)


def bleu_at(run_dir: Path | None, step: int | None) -> float | None:
    """The val BLEU recorded at ``step`` in a run's metrics, if any."""
    if run_dir is None or step is None or not RunDir(run_dir).metrics.is_file():
        return None
    for rec in reversed(RunDir(run_dir).read_metrics()):
        if rec.get("record") == "eval" and rec.get("step") == step and "val_bleu" in rec:
            return float(rec["val_bleu"])
    return None


@functools.lru_cache(maxsize=4096)
def _checkpoint_info(path: str, mtime_ns: int, size: int) -> dict:
    """Metadata of a checkpoint file, its weights never read (cached per path, modification
    time and size: a few hundred bytes each)."""
    ckpt = read_metadata(path)
    cfg = ckpt.get("model_config") or {}
    state = ckpt.get("state") or {}
    return {
        "data_config": ckpt.get("data_config") or {},
        "size": size_label(cfg),
        "heads": cfg.get("num_heads"),
        "step": state.get("step"),
        "best_bleu": usable_bleu(state.get("best_bleu")),
        "val_bleu": usable_bleu(ckpt.get("val_bleu")),  # its own step's (core.checkpoint)
        "run": ckpt.get("run"),
        "promoted_from": ckpt.get("promoted_from"),
        "languages": opened.languages_of(path, ckpt),
    }


def _run_with_snapshots(name: str | None, runs: Path) -> str | None:
    """The run directory called ``name`` under ``runs`` if it has snapshots."""
    if not name:
        return None
    candidate = runs / str(name)
    return str(candidate) if RunDir(candidate).snapshot_steps() else None


def _origin(path: Path, info: dict) -> str:
    """Where a file under checkpoints/ comes from, in words."""
    saved = info.get("promoted_from")
    if not saved:
        return "shipped model" if path.name in SHIPPED_NAMES else "model file"
    step = f" at step {info['step']:,}" if info.get("step") is not None else ""
    return f"saved from run {saved.get('run', '?')}{step}"


def read_entry(path: Path, key: str, run_dir: Path | None, runs: Path) -> ModelEntry:
    """Describe one checkpoint file; a reading error gives an unusable entry, never raises."""
    try:
        st = path.stat()
        info = _checkpoint_info(str(path), st.st_mtime_ns, st.st_size)
    except (CheckpointError, OSError) as e:
        reason = _unreadable(path, e)
        return ModelEntry(key, str(path), "unreadable", _mtime(path), usable=False, reason=reason)
    if run_dir is not None:
        origin = "run best" if path.name == "best.pt" else "run last"
    else:
        origin = _origin(path, info)
    bleu = info["best_bleu"] if info["val_bleu"] is None else info["val_bleu"]
    direction = direction_words(info["languages"], info["data_config"])
    if origin == "run last":  # best_bleu is the best so far, not necessarily this one's
        bleu = bleu_at(run_dir, info["step"])
    return ModelEntry(
        key,
        str(path),
        origin,
        st.st_mtime,
        data=" · ".join(x for x in (describe_data(info["data_config"]), direction) if x),
        size=info["size"],
        heads=info["heads"],
        step=info["step"],
        val_bleu=bleu,
        run_dir=str(run_dir) if run_dir else _run_with_snapshots(info["run"], runs),
        history=_history_of(path, run_dir, info["run"], runs),
        languages=info["languages"],
        direction=direction,
    )


def _history_of(path: Path, run_dir: Path | None, run: str | None, runs: Path) -> str | None:
    """The training history of a model: its run directory, else the file beside it."""
    if run_dir is not None:
        return str(run_dir)
    beside = history_path(path)
    return _run_with_snapshots(run, runs) or (str(beside) if beside.is_file() else None)


NO_CHECKPOINT_YET = "no checkpoint saved yet (training may still be starting)"


def _run_entries(runs: Path) -> list[ModelEntry]:
    """Every run's best.pt and last.pt (or a note that a run has none yet)."""
    entries = []
    for run in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found = [n for n in ("best.pt", "last.pt") if (run / n).is_file()]
        for name in found:
            entries.append(read_entry(run / name, f"runs/{run.name}/{name}", run, runs))
        if not found and (run / "config.json").is_file():
            reason = NO_CHECKPOINT_YET
            entries.append(
                ModelEntry(
                    f"runs/{run.name}/",
                    str(run),
                    "run",
                    run.stat().st_mtime,
                    usable=False,
                    reason=reason,
                )
            )
    return entries


@functools.lru_cache(maxsize=1024)
def _folder_info(path: str, version: tuple) -> dict:
    """What a Hugging Face model folder's files say (config and weight headers, the languages
    it translates; cached per folder and ``_folder_version``)."""
    return opened.describe_folder(path) | {"languages": opened.languages_of(path)}


def _folder_version(folder: Path) -> tuple:
    """Each file's name, size and modification time: a weights file cut short, grown or
    replaced after its folder was listed is read again."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return tuple((p.name, st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()])


def _mtime(path: Path) -> float:
    """A path's modification time, 0 where it cannot be read (a dangling link)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _unreadable(folder: Path, e: Exception) -> str:
    """Why a model (file or folder) cannot be listed, in one line without a path of this
    machine."""
    if isinstance(e, (opened.HFModelError, CheckpointError)):
        return " ".join(str(e).split())  # a library's words may run over several lines
    if isinstance(e, OSError):
        return f"{folder.name} cannot be read ({e.strerror or type(e).__name__})."
    return f"{folder.name} cannot be read ({type(e).__name__})."


def folder_entry(folder: Path, key: str) -> ModelEntry:
    """One Hugging Face model folder; an unusable entry with the reason, never raises."""
    try:
        info = _folder_info(str(folder), _folder_version(folder))
    except Exception as e:  # noqa: BLE001 - one broken folder is listed, never takes a page down
        return ModelEntry(key, str(folder), "unreadable", _mtime(folder), usable=False,
                          reason=_unreadable(folder, e))  # fmt: skip
    langs = f"{info.get('source_lang', '?')}→{info.get('target_lang', '?')}"
    known = info.get("source_lang") or info.get("target_lang")
    return ModelEntry(
        key,
        str(folder),
        HF_ORIGIN,
        (folder / opened.FOLDER_CONFIG).stat().st_mtime,
        data=f"Hugging Face {info['model_type']}" + (f" · {langs}" if known else ""),
        size=opened.size_label(info),
        heads=info["model_config"]["num_heads"],
        trained_task=info.get("task") or "",
        languages=info["languages"],
        history=_history_of(folder, None, None, folder.parent),
    )


def model_folders(root: Path) -> list[Path]:
    """Hugging Face model folders (holding config.json) at most two levels under ``root``,
    none reached through a symbolic link (a link could lead anywhere on the server)."""
    if not root.is_dir():
        return []
    found = [c.parent for c in (*root.glob("*/config.json"), *root.glob("*/*/config.json"))]
    kept = [p for p in found if not any(part.startswith(".") for part in p.parts[-2:])]
    return sorted(p for p in kept if not _through_link(root, p))[:MAX_MODEL_FOLDERS]


def _through_link(root: Path, folder: Path) -> bool:
    """Whether ``folder`` (under ``root``), or a folder between them, is a symbolic link."""
    path = folder
    while path != root and path != path.parent:
        if path.is_symlink():
            return True
        path = path.parent
    return False


def folder_entries(checkpoints: Path) -> list[ModelEntry]:
    """Every Hugging Face model folder under checkpoints/ and the operator's models folder."""
    roots = [(checkpoints, "checkpoints")] + ([(models_root(), "models")] if models_root() else [])
    return [
        folder_entry(folder, f"{label}/{folder.relative_to(root).as_posix()}/")
        for root, label in roots
        for folder in model_folders(root)
    ]


def list_models(checkpoints: Path | None = None, runs: Path | None = None) -> list[ModelEntry]:
    """Every checkpoint under ``checkpoints``, every run's best/last and every Hugging Face
    model folder, newest first."""
    checkpoints = Path(checkpoints) if checkpoints else checkpoints_root()
    runs = Path(runs) if runs else runs_root()
    entries = []
    if checkpoints.is_dir():
        for path in sorted(checkpoints.rglob("*.pt")):
            key = "checkpoints/" + path.relative_to(checkpoints).as_posix()
            entries.append(read_entry(path, key, None, runs))
        entries += folder_entries(checkpoints)
    if runs.is_dir():
        entries += _run_entries(runs)
    return sorted(entries, key=lambda e: e.mtime, reverse=True)


def default_entry(entries: Sequence[ModelEntry]) -> ModelEntry | None:
    """The shipped model if it is usable (the plain one before the one trained to align),
    else the newest usable model, else None."""
    usable = [e for e in entries if e.usable]
    shipped = [e for e in usable if e.origin == "shipped model"]
    shipped.sort(key=lambda e: Path(e.path).name != SHIPPED_NAME)  # stable: else newest first
    return (shipped or usable or [None])[0]


def shipped_entry(entries: Sequence[ModelEntry], name: str) -> ModelEntry | None:
    """The usable shipped model of this file name (SHIPPED_NAMES), or None."""
    found = (e for e in entries if e.usable and e.origin == "shipped model")
    return next((e for e in found if Path(e.path).name == name), None)


def _origin_rank(entry: ModelEntry) -> tuple[int, int]:
    """Which models to offer first: shipped (in SHIPPED_NAMES' order), saved, Hugging Face, a
    run's best, its last."""
    ranks = {"shipped model": 0, HF_ORIGIN: 2, "run best": 3, "run last": 4}
    names = (*SHIPPED_NAMES, Path(entry.path).name)
    return ranks.get(entry.origin, 1), names.index(Path(entry.path).name)  # 1: a saved model


def _direction_rank(languages: tuple[str, str] | None, wanted: tuple[str, str]) -> int:
    """0: known to translate ``wanted``; 1: either side does not say; 2: another direction."""
    if languages == wanted and wanted != UNKNOWN_LANGUAGES:
        return 0
    return 1 if UNKNOWN_LANGUAGES in (languages, wanted) else 2


def translators(entries: Sequence[ModelEntry], entry: ModelEntry) -> list[ModelEntry]:
    """The usable models but ``entry`` that translate (no masked language model)."""
    return [e for e in entries if e.usable and e.key != entry.key and e.languages is not None]


def compared_entry(
    entries: Sequence[ModelEntry], entry: ModelEntry, languages: tuple[str, str]
) -> ModelEntry | None:
    """The model to compare ``entry`` (translating ``languages``) with by default: another
    translator of the same direction (or one whose files do not say), its kin first (the
    other shipped model beside a shipped one, the other checkpoint of its run), then shipped,
    saved, Hugging Face models and runs' checkpoints, newest first; None where no other model
    may translate that direction (one of another direction would read the sentence as
    unknown words)."""

    def kin(e: ModelEntry) -> bool:
        shipped = e.origin == entry.origin == "shipped model"
        return shipped or bool(entry.run_dir and e.run_dir == entry.run_dir)

    def rank(e: ModelEntry) -> tuple:
        return _direction_rank(e.languages, languages), not kin(e), _origin_rank(e), -e.mtime

    same = [e for e in translators(entries, entry) if _direction_rank(e.languages, languages) < 2]
    return min(same, key=rank, default=None)


def reverse_entries(
    entries: Sequence[ModelEntry], entry: ModelEntry, languages: tuple[str, str]
) -> list[ModelEntry]:
    """The usable models that translate the other way round of ``languages`` (known from their
    files), shipped ones first; [] where ``languages`` are not known."""
    if languages == UNKNOWN_LANGUAGES:
        return []
    found = [e for e in translators(entries, entry) if e.languages == tuple(languages[::-1])]
    return sorted(found, key=lambda e: (_origin_rank(e), -e.mtime))


def find_entry(entries: Sequence[ModelEntry], key: str | None) -> ModelEntry | None:
    """The usable entry with this key, or None."""
    return next((e for e in entries if e.key == key and e.usable), None)


def entry_caption(entry: ModelEntry) -> str:
    """One line under the picker: origin, data, size, step and validation BLEU."""
    if entry.origin == HF_ORIGIN and entry.trained_task:  # its steps and scores: its history
        return f"{entry.origin} · {entry.size} · trained here on the {entry.trained_task} task"
    if entry.origin == HF_ORIGIN:
        return f"{entry.origin} · {entry.size} · not trained here: no steps or validation BLEU"
    step = f"step {entry.step:,}" if entry.step is not None else "step unknown"
    bleu = (
        f"val BLEU {entry.val_bleu:.1f}"
        if entry.val_bleu is not None
        else "no validation BLEU recorded"
    )
    return f"{entry.origin} · {entry.data} · {entry.size} · {step} · {bleu}"


def validate_name(name: str) -> str:
    """A safe model file name (letters, digits, . _ -), or ModelError saying what is wrong."""
    name = (name or "").strip()
    if name.endswith(".pt"):
        name = name[:-3]
    if not NAME_RE.fullmatch(name) or name in (".", ".."):
        raise ModelError(
            f"'{name}' is not a valid model name: use 1-64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (no slashes or spaces)."
        )
    return name


def models_frame(entries: Sequence[ModelEntry]) -> pd.DataFrame:
    """One row per model: key, origin, validation BLEU, step, size, data, and the problem of
    those that cannot open (the column only where one has one: an empty column was what a
    1400 px page cut at the right)."""
    columns = {"key": "model", "origin": "origin", "val_bleu": "val BLEU", "step": "step"}
    columns |= {"size": "size", "data": "data"}
    if any(not e.usable for e in entries):
        columns["reason"] = "problem"
    rows = [asdict(e) | ({} if e.usable else {"size": ""}) for e in entries]
    return pd.DataFrame(rows, columns=list(columns)).rename(columns=columns)
