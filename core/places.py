"""Where the app keeps its files: runs, models, the download cache and the corpus folders.

Every folder is set by the environment; nothing else in ``core`` names a folder."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


RUNS_ENV = "ATTENTION_STUDIO_RUNS"  # where run directories live (default <repo>/runs)


CHECKPOINTS_ENV = "ATTENTION_STUDIO_CHECKPOINTS"  # promoted models (default <repo>/checkpoints)


MODELS_ENV = "ATTENTION_STUDIO_MODELS"  # Hugging Face model folders an operator offers (none)


DATA_ENV = "ATTENTION_STUDIO_DATA"  # corpus files the app may read (default <repo>/data)


UPLOADS = ".uploads"  # staged uploads, under the runs root


ABLATION = ".ablation"  # cached head-importance results (core.ablate), under the runs root


ATTRIBUTION = ".attribution"  # cached faithfulness tables (core.attribute), under the runs root


TRAJECTORIES = ".trajectories"  # cached head trajectories (core.trajectories), under the runs root


CORPORA = ".corpora"  # corpora prepared for training (core.runs.corpus_cache), under the runs root


CACHE_ENV = "ATTENTION_STUDIO_CACHE"  # where the downloaded corpus is kept (default ~/.cache)


def default_cache_dir() -> Path:
    """Where the downloaded corpus is kept (ATTENTION_STUDIO_CACHE or ~/.cache/attention-studio)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "attention-studio"


def runs_root() -> Path:
    """Directory of run directories (ATTENTION_STUDIO_RUNS or <repo>/runs), created."""
    root = Path(os.environ.get(RUNS_ENV) or REPO_ROOT / "runs")
    root.mkdir(parents=True, exist_ok=True)
    return root


def checkpoints_root() -> Path:
    """Directory of promoted models (ATTENTION_STUDIO_CHECKPOINTS or <repo>/checkpoints)."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or REPO_ROOT / "checkpoints")


def models_root() -> Path | None:
    """The operator's folder of Hugging Face model folders (ATTENTION_STUDIO_MODELS), if set;
    model folders under checkpoints/ are offered either way."""
    value = os.environ.get(MODELS_ENV)
    return Path(value).expanduser() if value else None


def data_root() -> Path:
    """Folder of the user's corpus files (ATTENTION_STUDIO_DATA or <repo>/data), created."""
    root = Path(os.environ.get(DATA_ENV) or REPO_ROOT / "data").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def uploads_root() -> Path:
    """Folder of staged uploads (<runs root>/.uploads; not created)."""
    return runs_root() / UPLOADS


def ablation_root() -> Path:
    """Folder of cached head-importance results (<runs root>/.ablation; not created)."""
    return runs_root() / ABLATION


def attribution_root() -> Path:
    """Folder of cached attribution faithfulness tables (<runs root>/.attribution)."""
    return runs_root() / ATTRIBUTION


def trajectories_root() -> Path:
    """Folder of cached per-head trajectories over training (<runs root>/.trajectories)."""
    return runs_root() / TRAJECTORIES


def corpora_root() -> Path:
    """Folder of corpora prepared for training (<runs root>/.corpora; not created)."""
    return runs_root() / CORPORA


def shown_path(path) -> str:
    """A path as a message shows it, never this machine's layout: inside one of the app's
    folders, that folder's name and the rest ('data/pairs.tsv', 'runs/<id>/last.pt',
    'uploads/<file>'); inside the project, relative to it; elsewhere, its base name."""
    p = Path(path)
    try:
        resolved = p.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return p.name
    folders = [
        (uploads_root(), "uploads"),
        (data_root(), "data"),
        (runs_root(), "runs"),
        (checkpoints_root(), "checkpoints"),
        *([(models_root(), "models")] if models_root() else []),
        (default_cache_dir(), "download-cache"),
        (REPO_ROOT, ""),
    ]
    for root, label in folders:
        try:
            inside = resolved.relative_to(root.resolve()).as_posix()
        except (ValueError, OSError, RuntimeError):
            continue
        inside = "" if inside == "." else inside
        return f"{label}/{inside}" if label else inside or "."
    return p.name


# a path from the root or from ~ inside words another library wrote (not a web address's
# //, not a relative a/b), less the full stop or bracket that ends the sentence after it
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])~?/[^\s'\"`<>|]*[^\s'\"`<>|.,;:)\]}]")


def shown_paths(text: str, *paths) -> str:
    """Words another library wrote (an error from transformers, safetensors, tokenizers, the
    system) with every path of this machine in them shown as ``shown_path`` shows it:
    ``paths`` first, where the text may hold them whole (with spaces), then anything else
    that starts at the root or at ~ (a web address is left as it is)."""
    known = {Path(p).expanduser() for p in paths} | {Path(p).expanduser().resolve() for p in paths}
    for path in sorted((str(p) for p in known if p.is_absolute()), key=len, reverse=True):
        text = text.replace(path, shown_path(path))
    return ABSOLUTE_PATH.sub(lambda found: shown_path(found.group()) or "…", text)


RUN_CORPUS = "corpus"  # <run>/corpus/<name>: the copy of a run's corpus, under its own name


def run_corpus_files(run) -> list[Path]:
    """The copy of its corpus a run keeps: ``<run>/corpus/<the file's name>`` (runs made
    before 29 November 2026: ``<run>/data.<suffix>``)."""
    run = Path(run)
    return sorted(p for p in [*run.glob("data.*"), *(run / RUN_CORPUS).glob("*")] if p.is_file())


def corpus_folders() -> list[Path]:
    """The only folders the app reads corpus files from: data, download cache, uploads."""
    return [data_root(), default_cache_dir(), uploads_root()]


def replace_durably(tmp: Path, dest: Path) -> None:
    """Move a fully written ``tmp`` onto ``dest`` so that a crash or a power loss leaves the
    old file or the new one, whole: the data reaches the disk (fsync) before the rename, and
    the rename before this returns (the folder's fsync, where the system allows it)."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    try:
        folder = os.open(Path(dest).parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)
