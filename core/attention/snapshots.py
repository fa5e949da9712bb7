"""Attention snapshots over training: a probe sentence's maps at each evaluation, with metrics."""

from __future__ import annotations

import math
import pickle
import zipfile
from dataclasses import dataclass, field

from core.attention.sentence_maps import SentenceMaps
from core.runs.history import open_history
from core.runs.run_dir import RunDir


@dataclass
class SnapshotFrame:
    """A probe sentence's maps at one training step, with the metrics of that moment."""

    step: int
    maps: SentenceMaps
    loss: float | None = None  # training loss of the last record at or before this step
    val_loss: float | None = None  # validation loss measured at this step
    val_bleu: float | None = None  # validation BLEU measured at this step


@dataclass
class SnapshotSeries:
    """A probe sentence's attention as it formed during training."""

    sentence: str
    frames: list[SnapshotFrame] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # snapshot files that could not be read

    @property
    def steps(self) -> list[int]:
        """Training steps with a frame, in order."""
        return [f.step for f in self.frames]


SNAPSHOT_ERRORS = (
    pickle.UnpicklingError,
    RuntimeError,
    EOFError,
    zipfile.BadZipFile,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
)


def probe_sentences(source) -> list[str]:
    """The probe sentences in the latest readable snapshot of a run or history file."""
    rd = open_history(source)
    for step in reversed(rd.snapshot_steps()):
        try:
            return [p["sentence"] for p in rd.load_snapshot(step)["probes"]]
        except SNAPSHOT_ERRORS:
            continue
    return []


def _metrics_at(records: list[dict], step: int) -> dict:
    """Training loss (last record ≤ step) and validation metrics at ``step``."""
    out = {"loss": None, "val_loss": None, "val_bleu": None}
    for rec in records:
        if rec.get("record") == "train" and rec.get("step", math.inf) <= step and "loss" in rec:
            out["loss"] = float(rec["loss"])
        if rec.get("record") == "eval" and rec.get("step") == step:
            for name in ("val_loss", "val_bleu"):
                if rec.get(name) is not None:
                    out[name] = float(rec[name])
    return out


def snapshot_series(source, sentence: str) -> SnapshotSeries:
    """Every snapshot of ``sentence`` in a run or history file, with loss and BLEU."""
    rd = open_history(source)
    records = rd.read_metrics()
    series = SnapshotSeries(sentence)
    steps = rd.readable_steps() if isinstance(rd, RunDir) else rd.snapshot_steps()
    if len(steps) < len(rd.snapshot_steps()):
        series.skipped.append(
            f"{len(rd.snapshot_steps()) - len(steps)} snapshots left out, spread evenly "
            "(together they would pass what the server reads)"
        )
    for step in steps:
        try:
            probes = rd.load_snapshot(step)["probes"]
            probe = next((p for p in probes if p["sentence"] == sentence), None)
            if probe is None:
                continue
            maps = SentenceMaps.from_probe(probe)
        except SNAPSHOT_ERRORS as e:
            series.skipped.append(f"step {step}: {type(e).__name__}")
            continue
        series.frames.append(SnapshotFrame(step, maps, **_metrics_at(records, step)))
    return series
