"""A run in TensorBoard's own format, so ``tensorboard --logdir`` opens it beside other work.

What goes in: every number of every metrics record as a scalar (``train/loss``,
``eval/val_bleu``, ...; at the record's step and wall-clock time), an induction run's circuit
scores at each evaluation (``circuits/induction/layer 1 head 3``, the same for
``previous_token`` and ``duplicate_token``, and ``circuits/repeat_loss``, ``first_copy_loss``,
``icl``: ``core.runs.circuit_history``), each layer group's weight
and gradient distribution at each evaluation as a histogram (``weights/encoder 0``,
``grads/encoder 0``: the auto-ranged histogram ``core.training.monitor`` logged, with its
count, sum and sum of squares), the settings and the probe sentences as text, and each probe
sentence's maps at its snapshots as images (``maps/probe 1/cross``: one tile per layer (rows)
and head (columns), white 0 to dark blue 1, at most ``IMAGE_STEPS`` snapshots per tag
spread evenly, TensorBoard's own default for images).

Sizes: every summary is measured before it is written, and one that would take the file
past ``budget.TENSORBOARD_BYTES`` is left out (scalars go first, then distributions, texts
and images; the summary counts what was left out); an image's pixels are capped
(``IMAGE_PIXELS``) before it is drawn.
The events file is named without the machine's host name.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch.utils.tensorboard import summary as tb
from torch.utils.tensorboard.writer import FileWriter

from core.attention.sentence_maps import SentenceMaps
from core.attention.snapshots import SNAPSHOT_ERRORS, probe_sentences
from core.figures.training import downsample
from core.runs.budget import TENSORBOARD_BYTES
from core.runs.circuit_history import LOSSES, MEASURES, circuit_evals, heads_of, score
from core.runs.exports import config_json
from core.runs.history import open_history
from core.runs.run_dir import RunDir

IMAGE_STEPS = 10  # snapshots drawn per (probe, kind): TensorBoard keeps 10 images per tag
IMAGE_PIXELS = 512 * 1024  # the most pixels one image may have (past it: the mean of the heads)
TILE_PX = 64  # a map's longer side, in pixels, where it fits
GAP_PX = 2  # white between tiles
LOW, HIGH = np.array([255, 255, 255]), np.array([8, 48, 107])  # weight 0 and 1 (Blues' ends)
EVENT_OVERHEAD = 48  # bytes around a summary: its event's step and time, the record's framing
EVENTS_NAME = "events.out.tfevents.{}.attention-studio"  # no host name; ns: never reused
Progress = Callable[[float, str], None]


def map_image(weights: np.ndarray) -> tuple[np.ndarray, bool]:
    """(L, H, Q, K) weights as one RGB image (h, w, 3) of uint8: a tile per layer (rows) and
    head (columns); True when the heads were averaged to keep it under IMAGE_PIXELS."""
    layers, heads, q, k = weights.shape
    scale = max(1, TILE_PX // max(q, k))
    tiles = weights
    if _pixels(layers, heads, q, k, scale) > IMAGE_PIXELS:
        tiles = weights.mean(axis=1, keepdims=True)  # (L, 1, Q, K)
        scale = _fitting_scale(layers, 1, q, k, scale)
    rows, cols = tiles.shape[:2]
    th, tw = q * scale, k * scale
    image = np.full((rows * (th + GAP_PX) - GAP_PX, cols * (tw + GAP_PX) - GAP_PX, 3), 255.0)
    for layer in range(rows):
        for head in range(cols):
            cells = (
                np.clip(tiles[layer, head], 0.0, 1.0).repeat(scale, 0).repeat(scale, 1)
            )  # (th, tw)
            top, left = layer * (th + GAP_PX), head * (tw + GAP_PX)
            image[top : top + th, left : left + tw] = LOW + cells[..., None] * (HIGH - LOW)
    return image.round().astype(np.uint8), tiles.shape[1] != heads


def _pixels(rows: int, cols: int, q: int, k: int, scale: int) -> int:
    """Pixels of a grid of rows x cols tiles of q x k cells, ``scale`` pixels a cell."""
    return (rows * (q * scale + GAP_PX)) * (cols * (k * scale + GAP_PX))


def _fitting_scale(rows: int, cols: int, q: int, k: int, scale: int) -> int:
    """The largest scale up to ``scale`` whose grid fits IMAGE_PIXELS (at least 1)."""
    while scale > 1 and _pixels(rows, cols, q, k, scale) > IMAGE_PIXELS:
        scale -= 1
    return scale


def _literal(text: str) -> str:
    """Text TensorBoard's Markdown shows as typed: an indented code block."""
    return "\n".join("    " + line for line in str(text).splitlines() or [""])


class _Events:
    """One events file with a byte limit checked before each summary is written."""

    def __init__(self, out: Path, limit: int):
        self.out, self.limit, self.bytes = out, limit, 0
        self.before = set(out.glob("events.out.tfevents.*"))  # files of earlier exports stay
        self.writer = FileWriter(str(out))
        self.counts = {"scalars": 0, "histograms": 0, "texts": 0, "images": 0}
        self.over = {kind: 0 for kind in self.counts}  # left out: past the limit

    def add(self, kind: str, summary, step: int, walltime: float | None) -> bool:
        """Write one summary; False (nothing written) where it would pass the limit."""
        size = summary.ByteSize() + EVENT_OVERHEAD
        if self.bytes + size > self.limit:
            self.over[kind] += 1
            return False
        self.writer.add_summary(summary, step, walltime)
        self.bytes += size
        self.counts[kind] += 1
        return True

    def close(self, keep: bool = True) -> Path | None:
        """Flush, close, and name the file without the host name (or delete it); its path."""
        self.writer.close()
        (written,) = set(self.out.glob("events.out.tfevents.*")) - self.before
        if not keep:
            written.unlink()
            return None
        named = self.out / EVENTS_NAME.format(time.time_ns())
        written.rename(named)
        return named


def _scalars(events: _Events, records: list[dict]) -> None:
    """Every number of every record as ``<record kind>/<name>``."""
    for r in records:
        step, walltime = r.get("step"), r.get("time")
        if not isinstance(step, int):
            continue
        for name, value in r.items():
            if name in ("step", "time") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and np.isfinite(value):
                tag = f"{r.get('record', 'record')}/{name}"
                events.add("scalars", tb.scalar(tag, float(value)), step, walltime)
    _circuit_scalars(events, records)


def _circuit_scalars(events: _Events, records: list[dict]) -> None:
    """Each evaluation's circuit scores: every head's three scores and the losses."""
    evals = circuit_evals(records)
    heads = heads_of(evals) if evals else []
    for r in evals:
        step, walltime, circuits = r["step"], r.get("time"), r["circuits"]
        for measure in MEASURES:
            for layer, head in heads:
                if (value := score(r, measure, (layer, head))) is not None:
                    tag = f"circuits/{measure}/layer {layer} head {head}"
                    events.add("scalars", tb.scalar(tag, value), step, walltime)
        for name in LOSSES:
            value = circuits.get(name)
            if isinstance(value, (int, float)) and np.isfinite(value):
                events.add("scalars", tb.scalar(f"circuits/{name}", float(value)), step, walltime)


def _histograms(events: _Events, records: list[dict]) -> None:
    """Each evaluation's weight and gradient distributions (``weights/<group>``, ``grads/...``)."""
    for r in records:
        for which, groups in (r.get("distributions") or {}).items():
            for group, d in groups.items():
                lo, hi, counts = d["percentiles"][0], d["percentiles"][-1], d["counts"]
                width = (hi - lo) / len(counts)
                limits = [lo + width * (i + 1) for i in range(len(counts))]
                summary = tb.histogram_raw(
                    f"{which}/{group}", lo, hi, d["num"], d["sum"], d["sum_squares"],
                    limits, counts,
                )  # fmt: skip
                events.add("histograms", summary, r["step"], r.get("time"))


def _images(events: _Events, rd, walltimes: dict[int, float], progress: Progress) -> dict:
    """Each probe's maps at up to IMAGE_STEPS snapshots; what was left out and why."""
    steps = downsample(rd.snapshot_steps(), IMAGE_STEPS)
    left_out = {"unreadable snapshots": 0, "images with their heads averaged": 0}
    for i, step in enumerate(steps):
        progress(0.5 + 0.5 * i / max(len(steps), 1), f"maps at step {step}")
        try:
            probes = [SentenceMaps.from_probe(p) for p in rd.load_snapshot(step)["probes"]]
        except SNAPSHOT_ERRORS:
            left_out["unreadable snapshots"] += 1
            continue
        for number, maps in enumerate(probes, start=1):
            for kind in maps.drawn_kinds:  # a one-stack run's snapshot holds one kind
                image, averaged = map_image(maps.weights(kind))
                left_out["images with their heads averaged"] += averaged
                summary = tb.image(f"maps/probe {number}/{kind}", image, dataformats="HWC")
                events.add("images", summary, step, walltimes.get(step))
    return left_out


def export_tensorboard(
    source, out: Path, images: bool = True, limit: int = TENSORBOARD_BYTES,
    progress: Progress | None = None,
) -> dict:  # fmt: skip
    """Write a run (a run directory or a ``.history`` file) as one TensorBoard events file in
    ``out`` (created); a summary: the file, its bytes, counts and what was left out."""
    progress = progress or (lambda fraction, what: None)
    rd = open_history(source)
    records = rd.read_metrics()
    out.mkdir(parents=True, exist_ok=True)
    events = _Events(out, limit)
    try:
        left_out = _write(events, rd, records, source, images, progress)
    except BaseException:
        events.close(keep=False)  # no half-written export stays behind
        raise
    path = events.close()
    progress(1.0, "done")
    over = {f"{kind} past the limit": n for kind, n in events.over.items()}
    return {"events_file": path.name, "bytes": path.stat().st_size, **events.counts,
            "left_out": {k: v for k, v in {**over, **left_out}.items() if v}}  # fmt: skip


def _write(events: _Events, rd, records: list[dict], source, images: bool, progress) -> dict:
    """Scalars, distributions, texts and (when ``images``) the maps; what was left out."""
    progress(0.0, "scalars")
    _scalars(events, records)
    progress(0.25, "distributions")
    _histograms(events, records)
    if isinstance(rd, RunDir) and rd.read_config():
        text = _literal(config_json(rd).decode("utf-8"))  # as the Train page's "Settings as JSON"
        events.add("texts", tb.text("settings", text), 0, None)
    probes = probe_sentences(source)
    if probes:
        listing = "\n".join(f"probe {i}: {s}" for i, s in enumerate(probes, start=1))
        events.add("texts", tb.text("probe sentences", _literal(listing)), 0, None)
    walltimes = {r["step"]: r["time"] for r in records if r.get("record") == "eval" and "time" in r}
    return _images(events, rd, walltimes, progress) if images else {}


def tensorboard_zip(source, folder: str, limit: int = TENSORBOARD_BYTES) -> bytes:
    """The export as a zip of ``folder/`` (the events file and ``export.json``, the summary):
    unzip it and run ``tensorboard --logdir`` on the folder above."""
    with tempfile.TemporaryDirectory(prefix="tensorboard-") as tmp:
        out = Path(tmp) / "log"
        done = export_tensorboard(source, out, limit=limit)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
            z.write(out / done["events_file"], f"{folder}/{done['events_file']}")
            z.writestr(f"{folder}/export.json", json.dumps(done, indent=2) + "\n")
        return buffer.getvalue()
