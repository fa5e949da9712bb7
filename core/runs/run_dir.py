"""A run directory's files: config.json, metrics.jsonl, status.json, checkpoints, snapshots.

The trainer writes these files; the app and the CLI read them (the app also writes
job.json at launch). Writes are atomic (temporary file + rename) or append-only, so a
reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import torch

from core.model.checkpoints import atomic_save, exported_folder
from core.places import replace_durably, runs_root, shown_path
from core.runs.budget import MAX_SNAPSHOTS, METRICS_BYTES, SNAPSHOT_BYTES, SNAPSHOTS_BYTES

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # run directory names


MODEL_PREFIX = "model_"  # snapshots/model_<step>.pt: the model at a snapshot step (float16)
PARSED_METRICS_BYTES = 64 * 2**20  # metrics files whose records the process keeps parsed


def thinned(steps: list[int], keep: int) -> set[int]:
    """The steps to delete so that at most ``keep`` stay: past it, every other one goes
    (the first and the last stay), so the kept ones stay spread evenly."""
    if len(steps) <= keep:
        return set()
    if keep < 2:
        return set(steps) - set(steps[-keep:] if keep else [])
    return set(steps) - {*steps[::2], steps[-1]}


class RunError(Exception):
    """A run cannot be found, started, stopped, resumed or deleted; the message says why."""


def write_json(path: Path, obj) -> None:
    """Write JSON atomically and durably (the old file or the new one after a power loss);
    each writer its own temporary file, so two writing at once (sessions racing on a run, the
    trainer and the server) never move each other's away."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    replace_durably(tmp, path)


def read_json(path: Path, default=None):
    """Read a JSON file, or ``default`` if it is missing or half-written."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def _ends_mid_line(f) -> bool:
    """True if a binary file opened for appending is non-empty and lacks a final newline."""
    if f.seek(0, os.SEEK_END) == 0:
        return False
    f.seek(-1, os.SEEK_END)
    return f.read(1) != b"\n"


_parsed: dict[str, tuple[tuple, int, list[dict]]] = {}  # path -> (version, offset, records)
_parsed_lock = threading.Lock()


def read_records(path: Path) -> list[dict]:
    """The complete JSON-object lines of a metrics file, parsed once per version of the file
    in this process (a file that only grew is read from where the last read ended); shared
    between callers, so never mutate the records. At most PARSED_METRICS_BYTES of files stay
    parsed (the least recently read go first)."""
    key = str(path)
    try:
        st = os.stat(path)
    except OSError:
        return []
    with _parsed_lock:
        version, offset, records = _parsed.pop(key, ((None, None, None), 0, []))
        if version[:2] != (st.st_dev, st.st_ino) or st.st_size < offset:
            offset, records = 0, []  # a new file (rewritten, rewound): read it whole
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != version:
            more, offset = _parse_from(path, offset)
            records = records + more
        _parsed[key] = ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), offset, records)
        _forget_oldest()
        return list(records)


def _parse_from(path: Path, offset: int) -> tuple[list[dict], int]:
    """(the complete records after byte ``offset``, the offset after the last complete line)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    records = [r for r in map(_record, data[:end].splitlines()) if r is not None]
    if (last := _record(data[end:])) is not None:  # whole, only its newline still to come
        records.append(last)
        end = len(data)
    return records, offset + end


def _record(line: bytes) -> dict | None:
    """One JSON object line as a dict (None: half-written, damaged or not an object)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _forget_oldest() -> None:
    """Drop the least recently read files' records past PARSED_METRICS_BYTES (caller locks)."""
    while len(_parsed) > 1 and sum(v[1] for v in _parsed.values()) > PARSED_METRICS_BYTES:
        del _parsed[next(iter(_parsed))]


class RunDir:
    """Paths and readers/writers of one training run's directory."""

    def __init__(self, path):
        self.path = Path(path)
        self.config = self.path / "config.json"
        self.metrics = self.path / "metrics.jsonl"
        self.status = self.path / "status.json"
        self.last = self.path / "last.pt"
        self.best = self.path / "best.pt"
        self.snapshots = self.path / "snapshots"
        self.stop_file = self.path / "STOP"
        self.log = self.path / "train.log"
        self.job = self.path / "job.json"  # launch metadata written by the app, not the trainer
        self.request = self.path / "request.json"  # settings the app asks the trainer to use
        self.notes = self.path / "notes.json"  # the user's note and tags (core.runs.notes)
        self.alignments = self.path / "alignments.txt"  # supervision (core.corpus.supervision)

    @property
    def name(self) -> str:
        """The run id (directory name)."""
        return self.path.name

    def create(self) -> None:
        """Make the directory tree."""
        self.snapshots.mkdir(parents=True, exist_ok=True)

    def discard(self) -> None:
        """Remove the run's folder and everything in it (a run that never began)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def append_metrics(self, record: dict) -> bool:
        """Append one JSON line and flush it (never glued onto a half-written line); past
        METRICS_BYTES the file is thinned (``thin_metrics``). True when it was thinned."""
        line = json.dumps(record) + "\n"
        with open(self.metrics, "ab+") as f:
            if _ends_mid_line(f):  # a crash cut the last record short: start a new line
                line = "\n" + line
            f.write(line.encode())
            f.flush()
            size = f.tell()
        if size <= METRICS_BYTES:
            return False
        self.thin_metrics()
        return True

    def thin_metrics(self) -> None:
        """Halve the training records (every other one goes; the first and the last stay), and
        the evaluations too where they fill half the file, so metrics.jsonl stays under
        METRICS_BYTES, spread evenly over the run; rewritten atomically."""
        records = self.read_metrics()
        train = [i for i, r in enumerate(records) if r.get("record") == "train"]
        gone = {train[i] for i in range(1, len(train) - 1, 2)}
        evals = [i for i, r in enumerate(records) if r.get("record") == "eval"]
        eval_bytes = sum(len(json.dumps(records[i])) for i in evals)
        if eval_bytes > METRICS_BYTES // 2:
            gone |= {evals[i] for i in range(1, len(evals) - 1, 2)}
        self._write_records([r for i, r in enumerate(records) if i not in gone])

    def _write_records(self, records: list[dict]) -> None:
        """Replace metrics.jsonl with these records, atomically."""
        tmp = self.metrics.with_name(self.metrics.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.replace(tmp, self.metrics)

    def read_metrics(self) -> list[dict]:
        """All complete metric records (a half-written line is skipped), parsed once per file
        version in this process and shared: never mutate the records."""
        return read_records(self.metrics)

    def rewind(self, step: int) -> None:
        """Forget what was written after the checkpoint at ``step``, before resuming from it.

        Metric records and snapshots of later steps and half-written lines go (metrics.jsonl
        is rewritten atomically), and so do the trainer's half-written checkpoint files.
        """
        self._write_records([r for r in self.read_metrics() if r.get("step", 0) <= step])
        for later in self.snapshot_steps():
            if later > step:
                self.snapshot_path(later).unlink(missing_ok=True)
        for later in self.snapshot_model_steps():
            if later > step:
                self.snapshot_model(later).unlink(missing_ok=True)
        half_written = [p.with_name(p.name + ".tmp") for p in (self.last, self.best)]
        for path in [*half_written, *self.snapshots.glob("*.tmp")]:
            path.unlink(missing_ok=True)

    def restart(self) -> None:
        """Forget an attempt that left no checkpoint, before starting the run again from its
        settings: its metrics, snapshots, best.pt and status go (its settings stay)."""
        self.metrics.unlink(missing_ok=True)
        for path in (self.best, *self.snapshots.glob("*.pt"), *self.snapshots.glob("*.tmp")):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.folder_of(self.best), ignore_errors=True)  # a decoder-only run's
        write_json(self.status, {"updated_at": time.time()})

    def write_status(self, **fields) -> dict:
        """Merge ``fields`` into status.json (atomically) and return it."""
        status = read_json(self.status, {}) or {}
        status.update(fields, updated_at=time.time())
        write_json(self.status, status)
        return status

    def read_status(self) -> dict:
        """The last status written, or {} before the first."""
        return read_json(self.status, {}) or {}

    def write_config(self, configs: dict) -> None:
        """Save the run's configs (data, model, train) and corpus summary."""
        write_json(self.config, configs)

    def read_config(self) -> dict:
        """The configs the run was started with."""
        return read_json(self.config, {}) or {}

    def save_snapshot(self, step: int, probes: list[dict], keep: int = MAX_SNAPSHOTS) -> None:
        """Store the probe sentences' attention maps at a training step; past ``keep``
        (``run_bytes.snapshots_to_keep``), every other one goes (the first and the last stay),
        so they stay spread evenly."""
        atomic_save({"step": step, "probes": probes}, self.snapshot_path(step))
        for gone in thinned(self.snapshot_steps(), keep):
            self.snapshot_path(gone).unlink(missing_ok=True)

    def snapshot_steps(self) -> list[int]:
        """Training steps that have an attention snapshot, in order."""
        return self._steps("step_")

    def _steps(self, prefix: str) -> list[int]:
        """The steps of ``snapshots/<prefix><step>.pt`` files, in order."""
        if not self.snapshots.is_dir():
            return []
        found = (p.stem[len(prefix) :] for p in self.snapshots.glob(f"{prefix}*.pt"))
        return sorted(int(s) for s in found if s.isdigit())

    def folder_of(self, checkpoint: Path) -> Path:
        """The ``save_pretrained`` folder beside a decoder-only run's checkpoint (best.hf)."""
        return exported_folder(checkpoint)

    def snapshot_model(self, step: int) -> Path:
        """Where the model of a snapshot step is (``snapshots/model_<step>.pt``)."""
        return self.snapshots / f"{MODEL_PREFIX}{step:08d}.pt"

    def snapshot_model_steps(self) -> list[int]:
        """Snapshot steps whose model was kept, in order."""
        return self._steps(MODEL_PREFIX)

    def thin_snapshot_models(self, keep: int) -> None:
        """Keep at most ``keep`` snapshot models, spread evenly (the last always stays)."""
        for gone in thinned(self.snapshot_model_steps(), keep):
            self.snapshot_model(gone).unlink(missing_ok=True)

    def snapshot_path(self, step: int) -> Path:
        """Where the probe maps of a step are (``snapshots/step_<step>.pt``)."""
        return self.snapshots / f"step_{step:08d}.pt"

    def snapshot_bytes(self, steps: list[int]) -> int:
        """Bytes of the snapshot files of these steps on disk (missing ones count 0)."""
        total = 0
        for step in steps:
            try:
                total += self.snapshot_path(step).stat().st_size
            except OSError:
                continue
        return total

    def readable_steps(self, limit: int = SNAPSHOTS_BYTES) -> list[int]:
        """The snapshot steps whose files together fit ``limit`` bytes: every other one goes
        (the first and the last stay) until they do (runs written before the limits)."""
        steps = self.snapshot_steps()
        while len(steps) > 2 and self.snapshot_bytes(steps) > limit:
            steps = [s for s in steps if s not in thinned(steps, len(steps) - 1)]
        return steps

    def load_snapshot(self, step: int) -> dict:
        """The probe maps saved at ``step`` (plain tensors, loaded with weights_only);
        ValueError for a file past budget.SNAPSHOT_BYTES (written before the limit), unread."""
        path = self.snapshot_path(step)
        if path.stat().st_size > SNAPSHOT_BYTES + 2**20:
            raise ValueError(f"the snapshot of step {step} is too large to read on this server")
        return torch.load(path, map_location="cpu", weights_only=True)

    def request_stop(self) -> None:
        """Ask the trainer to save and stop at its next step."""
        self.stop_file.touch()

    def stop_requested(self) -> bool:
        """True if a stop file is present."""
        return self.stop_file.exists()


UNBEGUN = {"status.json", ".trainer.lock", "STOP", "snapshots"}  # all a run stopped early leaves


def new_run_problem(out: str) -> str:
    """Why ``out`` cannot take a new run from the command line ('' when it can): empty, a
    file, a run already (``--resume`` continues it) or a folder of other files, which the
    run's would mix with."""
    rd = RunDir(out)
    if not out.strip() or (rd.path.exists() and not rd.path.is_dir()):
        return f"--out {out!r} is not a folder to create: name one, e.g. runs/my-run"
    held = sorted(p.name for p in rd.path.iterdir()) if rd.path.is_dir() else []
    if set(held) <= UNBEGUN and not any(rd.snapshots.glob("*")):
        return ""  # nothing, or a run stopped before its first step: started afresh
    run_files = {p.name for p in (rd.config, rd.metrics, rd.status, rd.last, rd.best, rd.request)}
    if found := [name for name in held if name in run_files]:
        return (
            f"{shown_path(rd.path)} already holds a run ({', '.join(found)}): add --resume to "
            "continue it, or give another --out"
        )
    if held:
        return f"{shown_path(rd.path)} holds other files ({held[0]} …): give a new or empty folder"
    return ""


def run_dir(run_id: str) -> RunDir:
    """The RunDir of ``run_id``; refuses ids that could leave the runs directory."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        raise RunError(f"'{run_id}' is not a valid run id.")
    return RunDir(runs_root() / run_id)
