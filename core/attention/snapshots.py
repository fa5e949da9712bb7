"""Attention snapshots over training: a probe sentence's maps at each evaluation, with metrics."""

from __future__ import annotations

import math
import pickle
import zipfile
from dataclasses import dataclass, field

from core.attention.sentence_maps import SentenceMaps
from core.runs.circuit_history import circuit_evals
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
    induction: float | None = None  # the best head's induction score there (circuit scores)


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

    def measured(self, name: str) -> bool:
        """Whether any frame has the metric ``name`` ("val_bleu", "induction"...): what the
        run's own evaluation records hold (a run that writes no translation has no BLEU)."""
        return any(getattr(f, name) is not None for f in self.frames)


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


def _latest_probes(source) -> list[dict]:
    """The probes of the latest readable snapshot of a run or history file ([] for none)."""
    rd = open_history(source)
    for step in reversed(rd.snapshot_steps()):
        try:
            return list(rd.load_snapshot(step)["probes"])
        except SNAPSHOT_ERRORS:
            continue
    return []


def probe_sentences(source) -> list[str]:
    """The probe sentences in the latest readable snapshot of a run or history file."""
    return [p["sentence"] for p in _latest_probes(source)]


def probe_noun(source) -> str:
    """What a run's probes are: "sequence" where each is a token sequence read with no source
    (a run scored by its circuits keeps one pass over the sequence they read first:
    ``core.training.probes.circuit_probe``), else "sentence"."""
    probes = _latest_probes(source)
    read_alone = probes and all(not p.get("src_tokens") for p in probes)
    return "sequence" if read_alone else "sentence"


def best_induction(record: dict) -> float | None:
    """The highest induction score of any head in an evaluation record's circuit scores."""
    evals = circuit_evals([record])
    return max(map(max, evals[0]["circuits"]["induction"])) if evals else None


def _metrics_at(records: list[dict], step: int) -> dict:
    """Training loss (last record ≤ step) and validation metrics at ``step``: loss, BLEU and
    the best induction score, each where the run measured it."""
    out = {"loss": None, "val_loss": None, "val_bleu": None, "induction": None}
    for rec in records:
        if rec.get("record") == "train" and rec.get("step", math.inf) <= step and "loss" in rec:
            out["loss"] = float(rec["loss"])
        if rec.get("record") == "eval" and rec.get("step") == step:
            for name in ("val_loss", "val_bleu"):
                if rec.get(name) is not None:
                    out[name] = float(rec[name])
            if (best := best_induction(rec)) is not None:
                out["induction"] = float(best)
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
