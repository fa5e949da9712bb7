"""Run status as the app shows it: state with dead trainers detected, progress, lists, logs."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from core.corpus.splits import NO_VALIDATION
from core.corpus.user_files import describe_data
from core.model.bleu import usable_bleu
from core.places import runs_root
from core.runs.catalogue import size_label
from core.runs.log_lines import last_message, starting_words
from core.runs.processes import check_trainer
from core.runs.run_dir import RUN_ID_RE, RunDir, RunError, read_json, run_dir

LIVE_STATES = ("starting", "running")
FINAL_STATES = ("finished", "stopped", "failed", "diverged")  # written by the trainer at its end
STOP_GRACE_S = 30.0  # a trainer still running this long after a stop request is killed
EARLY_STOP = "Stopped before training began."  # status message of a stop while loading
STARTUP_GRACE_S = 10.0  # a run dir this young without a pid is still being launched
FEW_PAIRS = 5000  # a run trained on at most this many pairs cannot generalise (d2l: 512)


@dataclass
class RunInfo:
    """What the app shows about one run, with the process state checked."""

    run_id: str
    path: Path
    state: str  # starting | running | finished | stopped | failed | diverged | unknown
    alive: bool  # its trainer process is verified running (and has not written its end)
    resumable: bool  # not running and last.pt exists
    stopping: bool = False  # a stop was requested and the trainer is still saving
    stop_requested_at: float | None = None  # when the stop was asked for (live runs)
    message: str = ""  # why it failed or stopped, in words
    progress: float = 0.0  # 0..1
    eta_s: float | None = None  # seconds left (live runs)
    step: int = 0
    total_steps: int | None = None
    best_bleu: float | None = None  # None before any BLEU was measured
    device: str = ""  # e.g. "cpu (2 threads)"
    device_type: str = ""  # cpu | cuda | mps (as launched)
    started_at: float | None = None  # first launch (epoch seconds)
    launched_at: float | None = None  # its last launch (a resume's), else its first
    finished_at: float | None = None
    preset: str = ""
    name: str = ""  # a name the user gave the run ("" = none)
    owner: str | None = None  # who made it, where users are known (core.runs.owners)
    heads: int | None = None  # attention heads per layer
    lr: float | None = None  # peak learning rate it trains with
    data: str = ""  # short data description
    train_pairs: int | None = None  # most pairs it trains on, if its settings cap them
    val_pairs: int | None = None  # validation pairs its corpus gave (None: not read yet)
    time_budget: float = 0.0  # seconds of training its settings allow (0: no time budget)
    size: str = ""  # short model size description
    supervision: str = ""  # the head trained to align and from what ("" = none)
    translates: bool = True  # it learns to translate (not a masked LM, induction or lm run)
    processes: int = 1  # training processes of its last launch
    pid: int | None = None
    identity: str | None = None  # the trainer's recorded process identity (see processes)
    has_best: bool = False
    has_last: bool = False
    status: dict = field(default_factory=dict)  # raw status.json

    @property
    def live(self) -> bool:
        """True while the run is starting or running."""
        return self.state in LIVE_STATES

    @property
    def label(self) -> str:
        """A short description for pickers and legends: name or id, preset, size, data."""
        parts = [self.name or self.run_id, self.preset]
        parts += [f"{self.heads} heads" if self.heads else "", self.data]
        return " · ".join(p for p in parts if p)

    @property
    def stop_overdue(self) -> bool:
        """True when the trainer ignored a stop request for longer than STOP_GRACE_S."""
        asked = self.stop_requested_at
        return self.alive and asked is not None and time.time() - asked > STOP_GRACE_S


def _effective_state(rd: RunDir, status: dict, job: dict, alive: bool) -> tuple[str, str]:
    """(state, message) from status.json and whether the trainer is alive."""
    raw = status.get("state")
    fresh = status.get("updated_at", 0) >= job.get("launched_at", 0)  # written by this launch
    if alive:
        return (raw if fresh and raw else "starting"), status.get("message", "")
    if fresh and raw in FINAL_STATES:
        return raw, status.get("message", "")
    if (
        not (job.get("pid") or status.get("pid"))
        and time.time() - job.get("created_at", 0) < STARTUP_GRACE_S
    ):
        return "starting", ""
    msg = "The training process ended unexpectedly (server killed, machine rebooted or a crash)."
    last = last_message(log_tail(rd.path.name, 20, rd=rd))
    if last:
        msg += f" Last log line: {last[:300]}"
    if rd.last.is_file():
        msg += " It can be resumed from its last checkpoint."
    return "failed", msg


def run_info(run_id: str) -> RunInfo:
    """Status of a run, with dead trainers detected (shown as failed, resumable if possible).

    A read: it never writes a run's files, never waits and takes no lock, so any caller
    (one holding the launch lock included) may call it.
    """
    rd = run_dir(run_id)
    if not rd.path.is_dir():
        raise RunError(f"Run '{run_id}' does not exist (deleted, or another runs directory).")
    status, config = rd.read_status(), rd.read_config()
    job = read_json(rd.job, {}) or {}
    pid = job.get("pid") or status.get("pid")
    recorded = job.get("identity") or status.get("identity")
    check = check_trainer(pid, rd.path, recorded)
    if check is not True and status.get("state") in LIVE_STATES:  # it may have written its
        status = rd.read_status()  # end just before exiting: read what it left
    if check is None:
        state, message = "unknown", _unknown_message(pid)
    else:
        state, message = _effective_state(rd, status, job, check)
    alive = bool(check) and state in LIVE_STATES  # a trainer that wrote its end is exiting
    fresh = status.get("updated_at", 0) >= job.get("launched_at", 0)  # by this launch
    data = config.get("data") or job.get("settings", {}).get("data", {})
    model = config.get("model") or job.get("settings", {}).get("model", {})
    return RunInfo(
        run_id=rd.name,
        path=rd.path,
        state=state,
        alive=alive,
        resumable=state not in (*LIVE_STATES, "unknown")
        and rd.last.is_file()
        and rd.config.is_file(),
        stopping=alive and rd.stop_requested(),
        stop_requested_at=_mtime(rd.stop_file) if alive else None,
        message=message,
        progress=float(status.get("progress") or 0.0),
        eta_s=status.get("eta_s") if alive and fresh else None,  # not the last launch's end
        step=int(status.get("step") or 0),
        total_steps=status.get("total_steps"),
        best_bleu=usable_bleu(status.get("best_bleu")),
        device=status.get("device", ""),
        device_type=job.get("device_type", ""),
        started_at=job.get("created_at") or status.get("started_at"),
        launched_at=job.get("launched_at") or job.get("created_at") or status.get("started_at"),
        finished_at=status.get("finished_at"),
        preset=job.get("preset", ""),
        name=str(job.get("name") or ""),
        owner=job.get("owner") if isinstance(job.get("owner"), str) else None,
        heads=model.get("num_heads"),
        lr=(config.get("train") or {}).get("lr"),
        data=describe_data(data),
        train_pairs=train_pairs_cap(data),
        val_pairs=_whole_or_zero((config.get("summary") or {}).get("val")),
        time_budget=_seconds(config.get("train") or job.get("settings", {}).get("train") or {}),
        size=size_label(model),
        supervision=supervision_label(config.get("train") or {}),
        translates=model.get("arch") != "encoder" and data.get("task") in (None, "translation"),
        processes=_whole(job.get("processes") or status.get("world_size")) or 1,
        pid=pid,
        identity=recorded,
        has_best=rd.best.is_file(),
        has_last=rd.last.is_file(),
        status=status,
    )


def supervision_label(train: dict) -> str:
    """e.g. "cross layer 0 head 0 trained to align (weight 0.05; alignments from ...)"."""
    if not train.get("align_weight"):
        return ""
    return (
        f"cross layer {train.get('align_layer', 0)} head {train.get('align_head', 0)} trained "
        f"to align (weight {train['align_weight']:g}; alignments from "
        f"{train.get('align_source') or '?'})"
    )


def train_pairs_cap(data: dict) -> int | None:
    """The most training pairs a run's data settings allow (None: the whole corpus)."""
    caps = [data.get("num_train")] if data.get("split") == "head" else []
    caps.append(data.get("max_pairs"))
    caps = [int(c) for c in caps if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    return min(caps) if caps else None


def few_pairs_note(info: RunInfo) -> str:
    """Why a run on few pairs (the d2l preset: 512) translates poorly ("" when it has plenty);
    a run without validation pairs is told what it goes without instead of its BLEU."""
    pairs = info.train_pairs
    if not info.translates or info.preset != "d2l" and (pairs is None or pairs > FEW_PAIRS):
        return ""  # a masked LM, induction or lm run: no translations, no BLEU
    how_many = f"at most {pairs:,}" if pairs else "few"
    book = " (the d2l preset reproduces the book's experiment)" if info.preset == "d2l" else ""
    if info.val_pairs == 0:
        expect = (
            f"It has no validation pairs: {NO_VALIDATION}. Its translations show what it "
            "learnt of its own pairs"
        )
    else:
        expect = (
            "Expect a low validation BLEU (around 5 for d2l) and examples full of <unk>, for "
            "words it never saw. That is the book's point: the model and its attention work, "
            "the data is too small"
        )
    return (
        f"This run trains on {how_many} sentence pairs{book}: too few to generalise. {expect}. "
        "For usable translations, train the small preset on all of fra-eng."
    )


FEW_STEPS = 500  # a run ending before this many steps has barely left the small preset's
# warm-up (400 steps): it cannot translate yet, whatever its settings


def short_run_note(info: RunInfo, yours: bool = True) -> str:
    """Why a finished run cannot translate yet when its limit bought too few steps (under
    FEW_STEPS) or its validation BLEU is still 0, and how to go on ("" otherwise): with
    **Train longer** below where the reader may (``yours``), else who can."""
    if info.state != "finished" or not info.translates or few_pairs_note(info):
        return ""  # few pairs: few_pairs_note says why; another task: its steps are its own
    zero = bool(info.val_pairs) and info.best_bleu is not None and info.best_bleu < 1
    if info.step >= FEW_STEPS and not zero:
        return ""
    limit = (
        f"Its time budget of {format_duration(info.time_budget)}"
        if info.time_budget
        else "Its limit"
    )
    bleu = f" (validation BLEU {info.best_bleu:.1f})" if zero else ""
    busy = " (a busy machine takes fewer steps a minute)" if info.time_budget else ""
    return (
        f"{limit} bought {info.step:,} training steps{bleu}: too few to learn to translate"
        f"{busy}. "
        + (
            "Give it more with **Train longer** below."
            if yours
            else "Its owner or a teacher can give it more with **Train longer**."
        )
    )


def _unknown_message(pid) -> str:
    """Why a run's state cannot be told, and what to do."""
    return (
        f"The trainer's process (pid {pid}) cannot be verified on this system (no /proc, "
        "or a process of another user), so its state is unknown. The app will not signal "
        "it: check it yourself, and stop it there if it is still running."
    )


def _mtime(path: Path) -> float | None:
    """A file's modification time, or None when it is absent."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def list_runs() -> list[RunInfo]:
    """Every run under the runs directory, newest first."""
    infos = []
    for path in runs_root().iterdir():
        if path.is_dir() and not path.name.startswith(".") and RUN_ID_RE.fullmatch(path.name):
            with contextlib.suppress(RunError):
                infos.append(run_info(path.name))
    return sorted(infos, key=lambda r: (r.started_at or 0, r.run_id), reverse=True)


def read_metrics(run_id: str) -> list[dict]:
    """All metric records of a run (train and eval lines)."""
    return run_dir(run_id).read_metrics()


def _whole_or_zero(value) -> int | None:
    """A whole number of 0 or more read from a run's files, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _seconds(train: dict) -> float:
    """A run's time budget in seconds from its train settings (0.0: none or unreadable)."""
    value = train.get("time_budget")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else 0.0


def _whole(value) -> int | None:
    """A positive whole number read from a run's files, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def log_message(run_id: str) -> str:
    """The last line of a run's log that says something: torchrun's banner of asterisks,
    its OMP_NUM_THREADS notice and library warnings left out ("" when none does)."""
    return last_message(log_tail(run_id, 20))


def doing_now(info: RunInfo) -> str:
    """What a live run without a step yet is doing: its status message, else "starting 2
    processes" (or "starting the trainer")."""
    return info.status.get("message") or starting_words(info.processes)


def startup_words(info: RunInfo, now: float | None = None) -> str:
    """What a live run without a step yet is doing, for how long, and how long since its
    launch: "learning BPE (cached next time) for 1 min 05 s · 3 min 10 s since launch"."""
    now = time.time() if now is None else now
    launched = info.launched_at or now
    since = info.status.get("phase_started_at")
    mine = isinstance(since, (int, float)) and since >= launched - 1  # this launch's phase
    during = f" for {format_duration(now - since)}" if mine else ""
    return f"{doing_now(info)}{during} · {format_duration(now - launched)} since launch"


def log_tail(run_id: str, lines: int = 20, rd: RunDir | None = None) -> str:
    """The last lines of a run's train.log (progress-bar redraws collapsed)."""
    rd = rd or run_dir(run_id)
    try:
        with open(rd.log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    rows = [row.rstrip("\r").split("\r")[-1] for row in text.split("\n")]
    return "\n".join([r for r in rows if r.strip()][-lines:])


def format_duration(seconds: float | None) -> str:
    """'1 h 05 min', '3 min 20 s' or '12 s' ('—' when unknown)."""
    if not isinstance(seconds, (int, float)) or not seconds >= 0 or seconds == float("inf"):
        return "—"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def when(ts: float | None) -> str:
    """A local date and time, or '—'."""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "—"


def latest_examples(records: list[dict]) -> pd.DataFrame:
    """The validation translations of the last evaluation that logged some (may be empty)."""
    evals = [r for r in records if r.get("record") == "eval" and r.get("examples")]
    examples = evals[-1]["examples"] if evals else []
    columns = {"src": "English", "out": "model output", "ref": "reference"}
    frame = pd.DataFrame(examples, columns=list(columns))
    frame["out"] = [o if isinstance(o, str) and o.strip() else EMPTY for o in frame["out"]]
    return frame.rename(columns=columns)


EMPTY = "(empty)"  # a model output of no words, as the examples show it


def metrics_signature(run_ids: list[str]) -> tuple:
    """(run id, size, modification time) of each run's metrics.jsonl: changes with new lines."""
    signature = []
    for run_id in run_ids:
        try:
            st = run_dir(run_id).metrics.stat()
            signature.append((run_id, st.st_size, st.st_mtime_ns))
        except (OSError, RunError):
            signature.append((run_id, 0, 0))
    return tuple(signature)


def legend_names(runs: list[RunInfo]) -> dict[str, str]:
    """run id -> its label, made unique (a run id is added where two labels agree)."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.label] = counts.get(r.label, 0) + 1
    return {r.run_id: r.label if counts[r.label] == 1 else f"{r.label} ({r.run_id})" for r in runs}
