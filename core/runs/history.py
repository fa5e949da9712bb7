"""A model's training history in one file beside its checkpoint: metrics and probe snapshots.

A run directory holds the history of its run (metrics.jsonl, snapshots/). A model copied
out of a run (the shipped model, "Save as a model") keeps it in ``<model>.history``: the
metric records (numbers only: no validation sentences, no paths) and the probe
sentences' attention maps at each evaluation, in float16. It is a plain-tensor file,
loaded with ``weights_only=True``.

``open_history`` gives either kind the same three readers: ``read_metrics``,
``snapshot_steps`` and ``load_snapshot``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from core.model.checkpoints import atomic_save
from core.runs.budget import sizeof
from core.runs.run_dir import RunDir, thinned

FORMAT = "attention-studio-history/1"
SUFFIX = ".history"
MODEL_SUFFIXES = (".pt", ".hf")  # a model file, a model folder: one history each name
MAX_BYTES = 20 * 2**20  # a history file larger than this is neither written nor read
PACKED_SHARE = 0.9  # what a packed history may take of MAX_BYTES (the file adds headers)
TEXT_KEYS = ("record",)  # the only text a shipped metric record keeps
NESTED_KEYS = ("circuits",)  # the only nested numbers it keeps: an induction run's head scores


def history_path(checkpoint) -> Path:
    """Where the history of a model file lives: ``name.pt`` -> ``name.history``."""
    return Path(checkpoint).with_suffix(SUFFIX)


def history_sharer(checkpoint) -> Path | None:
    """The model already there under the same name in the other form (``name.hf`` for
    ``name.pt`` and the other way round), whose history is the same file; None if none."""
    path = Path(checkpoint)
    for suffix in MODEL_SUFFIXES:
        if suffix != path.suffix and (other := path.with_suffix(suffix)).exists():
            return other
    return None


def clean_record(record: dict) -> dict:
    """A metric record with numbers only (drops validation examples and any text; an induction
    run's circuit scores stay)."""
    keep = (int, float, bool, type(None))
    return {
        k: v
        for k, v in record.items()
        if k in TEXT_KEYS
        or (isinstance(v, keep) and k != "path")
        or (k in NESTED_KEYS and numbers_only(v))
    }


def numbers_only(value) -> bool:
    """Whether a value holds numbers only: a number, or dicts and lists of them."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and numbers_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(numbers_only(v) for v in value)
    return isinstance(value, (int, float, bool, type(None)))


def _half(probe: dict) -> dict:
    """A snapshot probe with its maps in float16."""
    return {k: v.half() if isinstance(v, torch.Tensor) else v for k, v in probe.items()}


def pack_history(run_dir, up_to_step: int | None = None) -> dict:
    """A run's metrics and snapshots up to ``up_to_step`` (all when None), as one dict of
    less than MAX_BYTES: past it, every other snapshot goes (the first and the last stay),
    then every other training record."""
    rd = RunDir(run_dir)
    last = float("inf") if up_to_step is None else up_to_step
    records = [clean_record(r) for r in rd.read_metrics() if r.get("step", 0) <= last]
    steps = [s for s in rd.snapshot_steps() if s <= last]
    while len(steps) > 2 and rd.snapshot_bytes(steps) > PACKED_SHARE * MAX_BYTES // 2:
        steps = [s for s in steps if s not in thinned(steps, len(steps) - 1)]
    snapshots = []
    for step in steps:
        probes = rd.load_snapshot(step)["probes"]
        snapshots.append({"step": step, "probes": [_half(p) for p in probes]})
    history = {"format": FORMAT, "metrics": records, "snapshots": snapshots}
    while sizeof(history) > PACKED_SHARE * MAX_BYTES and len(history["metrics"]) > 2:
        history["metrics"] = _thinned_records(history["metrics"])
    if sizeof(history) > PACKED_SHARE * MAX_BYTES:
        raise ValueError(f"the run's history would pass {MAX_BYTES // 2**20} MB")
    return history


def _thinned_records(records: list[dict]) -> list[dict]:
    """Every other training record gone (the first and the last stay); evaluations kept,
    unless they are all that is left, then every other one of them."""
    train = [i for i, r in enumerate(records) if r.get("record") == "train"]
    pool = train if len(train) > 2 else list(range(len(records)))
    gone = {pool[i] for i in range(1, len(pool) - 1, 2)}
    return [r for i, r in enumerate(records) if i not in gone]


def write_history(run_dir, checkpoint, up_to_step: int | None = None) -> Path | None:
    """Write a run's history beside ``checkpoint``; None (nothing written) if it has none."""
    history = pack_history(run_dir, up_to_step)
    if not history["metrics"] and not history["snapshots"]:
        return None
    dest = history_path(checkpoint)
    _save_within_limit(history, dest)
    return dest


def _save_within_limit(data: dict, dest: Path) -> None:
    """Write a history file, or ValueError (and nothing written) when it passes MAX_BYTES."""
    tmp = dest.with_name(dest.name + ".new")
    atomic_save(data, tmp)
    if tmp.stat().st_size > MAX_BYTES:
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{dest.name} would pass {MAX_BYTES // 2**20} MB; it is not written")
    os.replace(tmp, dest)


def add_section(path, name: str, payload: dict) -> None:
    """Add (or replace) a section of plain data in a history file, atomically."""
    if name in ("format", "metrics", "snapshots"):
        raise ValueError(f"{name!r} is a history file's own section")
    data = HistoryFile(path)._load()
    _save_within_limit(data | {name: payload}, Path(path))


class HistoryFile:
    """The readers of a RunDir, over a ``.history`` file (read once, on first use)."""

    def __init__(self, path):
        self.path = Path(path)
        self._data: dict | None = None

    def _load(self) -> dict:
        """The file's contents; ValueError when it is not a history file."""
        if self._data is None:
            if self.path.stat().st_size > MAX_BYTES:
                raise ValueError(f"{self.path.name} is larger than {MAX_BYTES // 2**20} MB")
            try:
                data = torch.load(self.path, map_location="cpu", weights_only=True)
            except Exception as e:  # a damaged file can fail deep inside the unpickler
                raise ValueError(f"{self.path.name} cannot be read ({type(e).__name__})") from e
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"{self.path.name} is not a training history file")
            self._data = data
        return self._data

    def read_metrics(self) -> list[dict]:
        """The metric records (an unreadable file has none)."""
        try:
            return [r for r in self._load()["metrics"] if isinstance(r, dict)]
        except (OSError, ValueError, RuntimeError, KeyError, TypeError):
            return []

    def snapshot_steps(self) -> list[int]:
        """Training steps with a snapshot, in order (an unreadable file has none)."""
        try:
            return sorted(int(s["step"]) for s in self._load()["snapshots"])
        except (OSError, ValueError, RuntimeError, KeyError, TypeError):
            return []

    def section(self, name: str):
        """Another section the file carries (e.g. per-step numbers), or None."""
        try:
            return self._load().get(name)
        except (OSError, ValueError, RuntimeError):
            return None

    def load_snapshot(self, step: int) -> dict:
        """The snapshot at ``step``: {"step", "probes"} (KeyError when there is none)."""
        for snapshot in self._load()["snapshots"]:
            if int(snapshot["step"]) == step:
                return snapshot
        raise KeyError(f"no snapshot at step {step}")


def open_history(source) -> RunDir | HistoryFile:
    """The history readers of a run directory or of a ``.history`` file."""
    path = Path(source)
    return HistoryFile(path) if path.suffix == SUFFIX else RunDir(path)
