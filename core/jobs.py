"""Training jobs: launch ``python -m core.train`` as its own process and track it on disk.

A run directory holds everything about a job (config.json, metrics.jsonl, status.json
written by the trainer; job.json written here at launch), so a job survives page reloads,
closed tabs and server restarts: the disk is the source of truth, never a Streamlit
session. One GPU job at a time (an ``fcntl.flock`` the trainer holds until it exits) and
at most ``ATTENTION_STUDIO_MAX_CPU_JOBS`` CPU jobs. No Streamlit here.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from core.checkpoint import CheckpointError, atomic_save, read_checkpoint
from core.data import FRA_ENG_ENV, DataConfig, DataError, default_cache_dir, inspect_file
from core.data import validate_config as validate_data_config
from core.model import ModelConfig
from core.presets import PRESETS
from core.runs import RunDir, read_json, write_json
from core.trainer import TrainConfig, device_description, pick_device

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNS_ENV = "ATTENTION_STUDIO_RUNS"  # where run directories live (default <repo>/runs)
CHECKPOINTS_ENV = "ATTENTION_STUDIO_CHECKPOINTS"  # promoted models (default <repo>/checkpoints)
MAX_CPU_JOBS_ENV = "ATTENTION_STUDIO_MAX_CPU_JOBS"  # concurrent CPU jobs (default 1)
MAX_GPU_JOBS_ENV = "ATTENTION_STUDIO_MAX_GPU_JOBS"  # concurrent GPU jobs (default 1)
MAX_UPLOAD_BYTES = 20 * 2**20  # largest uploaded corpus accepted
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # promoted model names
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LIVE_STATES = ("starting", "running")
JOB_FILE = "job.json"  # launch metadata written by this module (the trainer never touches it)
UPLOADS = ".uploads"  # staged uploads, under the runs root
STARTUP_GRACE_S = 10.0  # a run dir this young without a pid is still being launched
SECTIONS = ("data", "model", "train")
CHOICES = {
    "split": ("random", "head"),
    "schedule": ("inverse_sqrt", "constant"),
    "device": ("auto", "cpu", "cuda", "mps"),
}
_CHILDREN: dict[int, subprocess.Popen] = {}  # trainers started by this process, reaped by poll()


class JobError(Exception):
    """A job cannot be started, stopped, resumed, deleted or promoted; the message says why."""


# ----------------------------------------------------------------------------- places


def runs_root() -> Path:
    """Directory of run directories (ATTENTION_STUDIO_RUNS or <repo>/runs), created."""
    root = Path(os.environ.get(RUNS_ENV) or REPO_ROOT / "runs")
    root.mkdir(parents=True, exist_ok=True)
    return root


def checkpoints_root() -> Path:
    """Directory of promoted models (ATTENTION_STUDIO_CHECKPOINTS or <repo>/checkpoints)."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or REPO_ROOT / "checkpoints")


def _env_int(name: str, default: int) -> int:
    """A positive integer from the environment, or ``default``."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def max_cpu_jobs() -> int:
    """How many CPU training jobs may run at once."""
    return _env_int(MAX_CPU_JOBS_ENV, 1)


def max_gpu_jobs() -> int:
    """How many GPU training jobs may run at once (one by default)."""
    return _env_int(MAX_GPU_JOBS_ENV, 1)


def run_dir(run_id: str) -> RunDir:
    """The RunDir of ``run_id``; refuses ids that could leave the runs directory."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        raise JobError(f"'{run_id}' is not a valid run id.")
    return RunDir(runs_root() / run_id)


# ----------------------------------------------------------------------------- settings


def field_help(cls) -> dict[str, str]:
    """The comment after each field of a config dataclass, as help text."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#\s*(.+)$", src, re.M)}


@dataclass
class FormField:
    """One hyper-parameter as the Train form shows it."""

    section: str  # "data", "model" or "train"
    name: str  # field name in its config dataclass
    kind: str  # "int", "float", "bool", "str", "list" or "choice"
    help: str = ""  # the field's comment in its dataclass
    choices: tuple = ()  # allowed values of a "choice"


def form_fields() -> list[FormField]:
    """Every tunable field of DataConfig, ModelConfig and TrainConfig, in order."""
    skip = {"source", "src_vocab_size", "tgt_vocab_size", "pad_id"}
    out = []
    for section, cls in zip(SECTIONS, (DataConfig, ModelConfig, TrainConfig)):
        helps = field_help(cls)
        for f in fields(cls):
            if f.name in skip:
                continue
            kind = "choice" if f.name in CHOICES else str(f.type).split("[")[0]
            out.append(
                FormField(section, f.name, kind, helps.get(f.name, ""), CHOICES.get(f.name, ()))
            )
    return out


def _field_default(f):
    """The default value of a dataclass field (None when it has none)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def defaults(preset: str) -> dict[str, dict]:
    """Every setting of ``preset``: dataclass defaults overridden by the preset."""
    if preset not in PRESETS:
        raise JobError(f"Unknown preset '{preset}': choose one of {', '.join(PRESETS)}.")
    out = {}
    for section, cls in zip(SECTIONS, (DataConfig, ModelConfig, TrainConfig)):
        out[section] = {f.name: _field_default(f) for f in fields(cls)}
        out[section].update(copy.deepcopy(PRESETS[preset].get(section, {})))
    for name in ("src_vocab_size", "tgt_vocab_size", "pad_id"):
        out["model"].pop(name)
    return out


def merged_settings(preset: str, overrides: dict | None = None) -> dict[str, dict]:
    """The preset's settings with ``overrides`` ({"data"|"model"|"train": {...}}) applied."""
    cfg = defaults(preset)
    for section, values in (overrides or {}).items():
        if section not in cfg:
            raise JobError(f"Unknown settings group '{section}': use {', '.join(SECTIONS)}.")
        cfg[section].update(values)
    return cfg


def _reasons(check) -> list[str]:
    """Run a validate() call and turn its exception into a list of readable reasons."""
    try:
        check()
    except TypeError as e:
        return [f"unknown setting ({e})"]
    except (ValueError, DataError) as e:
        text = str(e).split(": ", 1)[1] if str(e).startswith("Invalid ") else str(e)
        return [r.strip().rstrip(".") for r in text.split("; ") if r.strip()]
    return []


def resolve_device(name: str = "auto") -> str:
    """The kind of device a run asking for ``name`` would train on: cuda, mps or cpu."""
    return pick_device(name).type


def validate_settings(preset: str, overrides: dict | None = None) -> list[str]:
    """Human reasons why these settings cannot train (an empty list when they can)."""
    try:
        cfg = merged_settings(preset, overrides)
    except JobError as e:
        return [str(e)]
    d, m, t = cfg["data"], cfg["model"], cfg["train"]
    problems = _reasons(lambda: validate_data_config(DataConfig(**d)))
    problems += _reasons(
        lambda: ModelConfig(
            src_vocab_size=d.get("max_vocab", 1), tgt_vocab_size=d.get("max_vocab", 1), **m
        ).validate()
    )
    problems += _reasons(lambda: TrainConfig(**t).validate())
    problems += _source_problems(d.get("source", "fra-eng"))
    if problems:
        return problems
    try:
        kind = resolve_device(t["device"])
    except ValueError as e:
        return [str(e)]
    return [p for p in [_memory_problem(cfg, kind)] if p]


def describe_settings(cfg: dict[str, dict]) -> str:
    """One line of what a run would be, e.g. 'first 512 + 128 pairs · width 256 · ...'."""
    d, m, t = cfg["data"], cfg["model"], cfg["train"]
    if d.get("split") == "head":
        data = f"first {d.get('num_train') or 'all'} + {d.get('num_val', 0)} pairs"
    else:
        data = f"random split, sentences up to {d['max_len']} words"
    limits = [f"{t['epochs']} epochs"] if t.get("epochs") else []
    limits += [f"{t['max_steps']:,} steps"] if t.get("max_steps") else []
    limits += [f"{t['time_budget'] / 60:g} min"] if t.get("time_budget") else []
    return " · ".join(
        [
            data,
            f"width {m['d_model']}",
            f"{m['num_encoder_layers']}+{m['num_decoder_layers']} blocks",
            f"{m['num_heads']} heads",
            f"FFN {m['d_ff']}",
            f"dropout {m['dropout']:g}",
            f"lr {t['lr']:g}",
            f"batch {t['batch_size']}",
            " or ".join(limits) or "no limit",
        ]
    )


def _source_problems(source: str) -> list[str]:
    """Why a data source cannot be read (fra-eng is always fine: it is downloaded)."""
    if source == "fra-eng":
        return []
    try:
        info = inspect_data(source)
    except JobError as e:
        return [str(e)]
    return [] if info["usable"] else [f"{source} has no usable sentence pairs"]


# ----------------------------------------------------------------------------- memory


def _vocab_guess(data: dict) -> int:
    """A generous guess of the vocabulary size these data settings produce."""
    rows = data.get("num_train") if data.get("split") == "head" else 0
    rows = rows or data.get("max_pairs") or 200_000
    return max(8, min(int(data["max_vocab"]), 20_000, 8 + 3 * int(rows)))


def estimate_memory(cfg: dict[str, dict]) -> int:
    """Rough bytes one training step needs: weights, gradients, Adam, activations."""
    d, m, t = cfg["data"], cfg["model"], cfg["train"]
    v, dm, ff, h = _vocab_guess(d), m["d_model"], m["d_ff"], m["num_heads"]
    le, ld = m["num_encoder_layers"], m["num_decoder_layers"]
    seq, batch = d["max_len"] + 2, t["batch_size"]
    params = 3 * v * dm + le * (4 * dm * dm + 2 * dm * ff) + ld * (8 * dm * dm + 2 * dm * ff)
    per_token = (
        le * (10 * dm + 2 * ff + 3 * h * seq) + ld * (16 * dm + 2 * ff + 5 * h * seq) + 4 * v
    )  # floats kept for backward per target position
    return 4 * (4 * params + batch * seq * per_token)


def available_memory(kind: str) -> int | None:
    """Bytes free for training on a device kind (None when unknown)."""
    if kind == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _memory_problem(cfg: dict, kind: str) -> str | None:
    """A reason if the batch clearly cannot fit in the device's memory."""
    need, have = estimate_memory(cfg), available_memory(kind)
    if have is None or need <= 0.8 * have:
        return None
    return (
        f"a batch of {cfg['train']['batch_size']} needs about {need / 2**30:.1f} GB on "
        f"{kind} but only {have / 2**30:.1f} GB is available; lower batch_size, max_len, "
        "max_vocab or d_model"
    )


# ----------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=32)
def _inspect_cached(path: str, mtime: float, size: int) -> dict:
    """core.data.inspect_file, cached by path, modification time and size."""
    return inspect_file(path)


def inspect_data(source: str | Path) -> dict:
    """Usable and skipped line counts of a pairs file (JobError if unreadable)."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise JobError(f"Corpus file not found: {path}")
    st = path.stat()
    try:
        return _inspect_cached(str(path.resolve()), st.st_mtime, st.st_size)
    except DataError as e:
        raise JobError(str(e)) from e


def stage_upload(name: str, data: bytes) -> Path:
    """Save an uploaded corpus (size-limited) under the runs root; returns its path."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise JobError(
            f"{name} is {len(data) / 2**20:.1f} MB; the upload limit is "
            f"{MAX_UPLOAD_BYTES // 2**20} MB. Pass a path to a local file instead."
        )
    if not data.strip():
        raise JobError(f"{name} is empty.")
    suffix = Path(name).suffix.lower()
    suffix = suffix if suffix in (".tsv", ".txt", ".zip") else ".txt"
    dest = runs_root() / UPLOADS / (hashlib.sha1(data).hexdigest()[:16] + suffix)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.is_file():
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    return dest


def fra_eng_status() -> dict:
    """Where fra-eng would come from: {"available": bool, "path": str | None, "where": str}."""
    env = os.environ.get(FRA_ENG_ENV)
    if env and Path(env).is_file():
        return {"available": True, "path": env, "where": f"{FRA_ENG_ENV}"}
    cached = default_cache_dir() / "fra-eng.zip"
    if cached.is_file():
        return {"available": True, "path": str(cached), "where": "cache"}
    return {"available": False, "path": None, "where": "download"}


def _data_label(source: str, data: dict) -> str:
    """A short description of a run's data, e.g. 'fra-eng (head 512 + 128)'."""
    label = "fra-eng" if source == "fra-eng" else Path(source).name
    if data.get("split") == "head" and (data.get("num_train") or data.get("num_val")):
        label += f" (head {data.get('num_train') or 'all'} + {data.get('num_val', 0)})"
    return label


# ----------------------------------------------------------------------------- processes


def _reap() -> None:
    """Collect exit codes of finished trainers started here (no zombies)."""
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def pid_alive(pid) -> bool:
    """True if a process with this pid exists and is not a zombie."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    _reap()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_trainer(pid, path: Path) -> bool:
    """True if ``pid`` is alive and is ``core.train`` writing into ``path``."""
    if not pid_alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return True  # no /proc: trust the pid
    target = os.path.realpath(path)
    return "core.train" in args and any(
        os.path.realpath(os.path.join(cwd, a)) == target for a in args if a
    )


# ----------------------------------------------------------------------------- run info


@dataclass
class RunInfo:
    """What the app shows about one run, with the process state checked."""

    run_id: str
    path: Path
    state: str  # starting | running | finished | stopped | failed
    alive: bool  # its trainer process is running now (and has not written its final state)
    resumable: bool  # not running and last.pt exists
    stopping: bool = False  # a stop was requested and the trainer is still saving
    message: str = ""  # why it failed or stopped, in words
    progress: float = 0.0  # 0..1
    eta_s: float | None = None  # seconds left (live runs)
    step: int = 0
    total_steps: int | None = None
    best_bleu: float | None = None  # None before any BLEU was measured
    device: str = ""  # e.g. "cpu (2 threads)"
    device_kind: str = ""  # cpu | cuda | mps (as launched)
    started_at: float | None = None  # first launch (epoch seconds)
    finished_at: float | None = None
    preset: str = ""
    data: str = ""  # short data description
    size: str = ""  # short model size description
    pid: int | None = None
    has_best: bool = False
    has_last: bool = False
    status: dict = field(default_factory=dict)  # raw status.json

    @property
    def live(self) -> bool:
        """True while the run is starting or running."""
        return self.state in LIVE_STATES


def _effective_state(rd: RunDir, status: dict, job: dict, alive: bool) -> tuple[str, str]:
    """(state, message) from status.json and whether the trainer is alive."""
    raw = status.get("state")
    fresh = status.get("updated_at", 0) >= job.get("launched_at", 0)  # written by this launch
    if alive:
        return (raw if fresh and raw else "starting"), status.get("message", "")
    if fresh and raw in ("finished", "stopped", "failed"):
        return raw, status.get("message", "")
    if (
        not (job.get("pid") or status.get("pid"))
        and time.time() - job.get("created_at", 0) < STARTUP_GRACE_S
    ):
        return "starting", ""
    msg = "The training process ended unexpectedly (server killed, machine rebooted or a crash)."
    last = log_tail(rd.path.name, 3, rd=rd).strip().splitlines()
    if last:
        msg += f" Last log line: {last[-1][:300]}"
    if rd.last.is_file():
        msg += " It can be resumed from its last checkpoint."
    return "failed", msg


def _size_label(model: dict) -> str:
    """E.g. '1.2 M params · 256 wide · 2+2 blocks · 4 heads'."""
    if not model or "d_model" not in model:
        return ""
    label = (
        f"{model['d_model']} wide · {model.get('num_encoder_layers')}+"
        f"{model.get('num_decoder_layers')} blocks · {model.get('num_heads')} heads"
    )
    if "src_vocab_size" in model:
        with contextlib.suppress(TypeError, ValueError, RuntimeError):
            params = count_parameters(json.dumps(model, sort_keys=True))
            label = f"{params / 1e6:.2f} M params · {label}"
    return label


@functools.lru_cache(maxsize=256)
def count_parameters(model_json: str) -> int:
    """Parameters of a Transformer with this ModelConfig (built on the meta device)."""
    import torch

    from core.model import Transformer

    with torch.device("meta"):
        model = Transformer(ModelConfig(**json.loads(model_json)))
    return sum(p.numel() for p in model.parameters())


def run_info(run_id: str) -> RunInfo:
    """Status of a run, with dead trainers detected (shown as failed, resumable if possible)."""
    rd = run_dir(run_id)
    if not rd.path.is_dir():
        raise JobError(f"Run '{run_id}' does not exist (deleted, or another runs directory).")
    status, config = rd.read_status(), rd.read_config()
    job = read_json(rd.path / JOB_FILE, {}) or {}
    pid = job.get("pid") or status.get("pid")
    alive = is_trainer(pid, rd.path)
    state, message = _effective_state(rd, status, job, alive)
    alive = alive and state in LIVE_STATES  # a trainer that wrote its final state is exiting
    if state == "failed" and status.get("state") in LIVE_STATES:
        _record_death(rd, pid, message)
    data = config.get("data") or job.get("settings", {}).get("data", {})
    model = config.get("model") or job.get("settings", {}).get("model", {})
    bleu = status.get("best_bleu")
    return RunInfo(
        run_id=rd.name,
        path=rd.path,
        state=state,
        alive=alive,
        resumable=not alive and rd.last.is_file() and rd.config.is_file(),
        stopping=alive and rd.stop_requested(),
        message=message,
        progress=float(status.get("progress") or 0.0),
        eta_s=status.get("eta_s") if alive else None,
        step=int(status.get("step") or 0),
        total_steps=status.get("total_steps"),
        best_bleu=bleu if isinstance(bleu, (int, float)) and bleu >= 0 else None,
        device=status.get("device", ""),
        device_kind=job.get("device_kind", ""),
        started_at=job.get("created_at") or status.get("started_at"),
        finished_at=status.get("finished_at"),
        preset=job.get("preset", ""),
        data=job.get("data_label") or _data_label(data.get("source", "fra-eng"), data),
        size=_size_label(model),
        pid=pid,
        has_best=rd.best.is_file(),
        has_last=rd.last.is_file(),
        status=status,
    )


def _record_death(rd: RunDir, pid, message: str) -> None:
    """Write 'failed' into status.json of a run whose trainer died (unless relaunched)."""
    with _launch_lock():
        job = read_json(rd.path / JOB_FILE, {}) or {}
        if (job.get("pid") or rd.read_status().get("pid")) == pid and not is_trainer(pid, rd.path):
            rd.write_status(state="failed", message=message, eta_s=None)


def list_runs() -> list[RunInfo]:
    """Every run under the runs directory, newest first."""
    infos = []
    for path in runs_root().iterdir():
        if path.is_dir() and not path.name.startswith(".") and RUN_ID_RE.fullmatch(path.name):
            with contextlib.suppress(JobError):
                infos.append(run_info(path.name))
    return sorted(infos, key=lambda r: (r.started_at or 0, r.run_id), reverse=True)


def read_metrics(run_id: str) -> list[dict]:
    """All metric records of a run (train and eval lines)."""
    return run_dir(run_id).read_metrics()


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


# ----------------------------------------------------------------------------- locks


@contextlib.contextmanager
def _launch_lock():
    """Serialise launches and state repairs across sessions and processes."""
    with open(runs_root() / ".launch.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def acquire_gpu_lock(run_id: str) -> int:
    """An open fd holding one of the GPU slots (flock), or JobError naming the holder."""
    holders = []
    for slot in range(max_gpu_jobs()):
        path = runs_root() / f".gpu.lock.{slot}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holders.append(read_json(path, {}) or {})
            os.close(fd)
            continue
        _write_lock(fd, {"run_id": run_id, "pid": os.getpid()})
        return fd
    who = ", ".join(f"run {h.get('run_id', '?')} (pid {h.get('pid', '?')})" for h in holders)
    raise JobError(
        f"The GPU is busy: {who} holds it. One GPU job runs at a time; wait for it "
        "to finish, stop it, or set the device to 'cpu'."
    )


def _write_lock(fd: int, holder: dict) -> None:
    """Record who holds a lock inside the lock file (for the busy message)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


def _check_cpu_capacity() -> None:
    """JobError if the allowed number of CPU jobs are already running."""
    live = [r for r in list_runs() if r.alive and r.device_kind != "cuda"]
    if len(live) >= max_cpu_jobs():
        names = ", ".join(r.run_id for r in live)
        raise JobError(
            f"{len(live)} CPU training job(s) already running ({names}); the limit is "
            f"{max_cpu_jobs()} (set {MAX_CPU_JOBS_ENV} to change it). Stop a run or "
            "wait for it to finish."
        )


# ----------------------------------------------------------------------------- launch


def _flags(overrides: dict) -> list[str]:
    """core.train command-line flags for ``overrides`` (data.source becomes --data)."""
    argv = []
    for section in SECTIONS:
        for name, value in overrides.get(section, {}).items():
            flag = "--" + name.replace("_", "-")
            if section == "data" and name == "source":
                argv += [f"--data={value}"]
            elif isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, (list, tuple)):
                argv += [flag, *map(str, value)] if value else []
            else:
                argv.append(f"{flag}={value}")
    return argv


def _new_run_dir(preset: str) -> RunDir:
    """Create a fresh run directory named like 20261122-013000-small."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{preset}"
    for i in range(1, 1000):
        path = runs_root() / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return RunDir(path)
    raise JobError("Could not create a run directory (too many runs this second).")


def _stage_source(rd: RunDir, source: str) -> str:
    """Absolute corpus path for the trainer; staged uploads are copied into the run."""
    if source == "fra-eng":
        return source
    path = Path(source).expanduser().resolve()
    if path.parent == (runs_root() / UPLOADS).resolve():
        dest = rd.path / ("data" + path.suffix)
        shutil.copyfile(path, dest)
        return str(dest)
    return str(path)


def _launch(rd: RunDir, argv: list[str], job: dict, gpu_fd: int | None) -> None:
    """Start the trainer in its own session, log to train.log, record its pid."""
    job["launched_at"] = time.time()
    write_json(rd.path / JOB_FILE, {**job, "pid": None})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(rd.log, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            pass_fds=(gpu_fd,) if gpu_fd is not None else (),
        )
    _CHILDREN[proc.pid] = proc
    job["pid"] = proc.pid
    job.setdefault("launches", []).append({"pid": proc.pid, "at": job["launched_at"]})
    write_json(rd.path / JOB_FILE, job)
    if gpu_fd is not None:
        _write_lock(gpu_fd, {"run_id": rd.name, "pid": proc.pid})


@contextlib.contextmanager
def _device_slot(kind: str, run_id: str):
    """Hold a GPU slot (yielding its fd for the trainer) or check the CPU job limit."""
    if kind != "cuda":
        _check_cpu_capacity()
        yield None
        return
    fd = acquire_gpu_lock(run_id)
    try:
        yield fd
    finally:
        os.close(fd)  # the trainer keeps its own copy of the locked file open


def start_run(preset: str, overrides: dict | None = None) -> str:
    """Validate settings, then launch ``python -m core.train`` in a new run; returns its id."""
    overrides = copy.deepcopy(overrides or {})
    problems = validate_settings(preset, overrides)
    if problems:
        raise JobError("Cannot start: " + "; ".join(problems) + ".")
    cfg = merged_settings(preset, overrides)
    kind = resolve_device(cfg["train"]["device"])
    with _launch_lock():
        rd = _new_run_dir(preset)
        try:
            with _device_slot(kind, rd.name) as gpu_fd:
                source = cfg["data"].get("source", "fra-eng")
                overrides.setdefault("data", {})["source"] = _stage_source(rd, source)
                argv = [
                    sys.executable,
                    "-m",
                    "core.train",
                    "--out",
                    str(rd.path),
                    "--preset",
                    preset,
                    "--no-progress",
                    *_flags(overrides),
                ]
                job = {
                    "run_id": rd.name,
                    "preset": preset,
                    "overrides": overrides,
                    "settings": merged_settings(preset, overrides),
                    "device_kind": kind,
                    "data_label": _data_label(source, cfg["data"]),
                    "created_at": time.time(),
                    "argv": argv,
                }
                _launch(rd, argv, job, gpu_fd)
        except BaseException:
            shutil.rmtree(rd.path, ignore_errors=True)
            raise
    return rd.name


def resume_run(run_id: str, limits: dict | None = None) -> None:
    """Continue a stopped or failed run from last.pt (``limits``: new epochs, max_steps...)."""
    rd = run_dir(run_id)
    info = run_info(run_id)
    if info.alive:
        raise JobError(f"Run {run_id} is still {info.state}; nothing to resume.")
    if not info.resumable:
        raise JobError(
            f"Run {run_id} has no last checkpoint (last.pt) to resume from; "
            "start a new run instead."
        )
    job = read_json(rd.path / JOB_FILE, {}) or {"run_id": run_id, "created_at": info.started_at}
    kind = job.get("device_kind") or resolve_device(
        rd.read_config().get("train", {}).get("device", "auto")
    )
    keep = ("epochs", "max_steps", "time_budget")
    extra = _flags({"train": {k: v for k, v in (limits or {}).items() if k in keep}})
    argv = [sys.executable, "-m", "core.train", "--out", str(rd.path), "--resume", "--no-progress"]
    with _launch_lock(), _device_slot(kind, run_id) as gpu_fd:
        _launch(rd, argv + extra, {**job, "device_kind": kind, "argv": argv + extra}, gpu_fd)


def stop_run(run_id: str, wait: float = 0.0) -> RunInfo:
    """Ask a live run to save a checkpoint and stop (STOP file + SIGTERM)."""
    rd = run_dir(run_id)
    info = run_info(run_id)
    if not info.alive:
        raise JobError(f"Run {run_id} is not running (it is {info.state}).")
    rd.request_stop()
    if info.state == "running":
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGTERM)  # the trainer saves last.pt, then exits
    else:
        _stop_starting(rd, info.pid)
    deadline = time.time() + wait
    while time.time() < deadline and run_info(run_id).alive:
        time.sleep(0.2)
    return run_info(run_id)


def _stop_starting(rd: RunDir, pid: int) -> None:
    """Stop a trainer still loading data (before its SIGTERM handler exists)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    if not pid_alive(pid) and rd.read_status().get("state") in (None, *LIVE_STATES):
        rd.write_status(state="stopped", message="Stopped before training began.", eta_s=None)


def delete_run(run_id: str) -> None:
    """Delete a run directory; refused while its trainer is running."""
    info = run_info(run_id)
    if info.alive:
        raise JobError(f"Run {run_id} is {info.state}; stop it before deleting it.")
    shutil.rmtree(info.path)


# ----------------------------------------------------------------------------- models


def validate_name(name: str) -> str:
    """A safe model file name (letters, digits, . _ -), or JobError saying what is wrong."""
    name = (name or "").strip()
    if name.endswith(".pt"):
        name = name[:-3]
    if not NAME_RE.fullmatch(name) or name in (".", ".."):
        raise JobError(
            f"'{name}' is not a valid model name: use 1-64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (no slashes or spaces)."
        )
    return name


def promote(run_id: str, which: str, name: str, overwrite: bool = False) -> Path:
    """Copy a run's best or last checkpoint to checkpoints/<name>.pt (weights and metadata)."""
    name = validate_name(name)
    if which not in ("best", "last"):
        raise JobError(f"Choose 'best' or 'last', not '{which}'.")
    rd = run_dir(run_id)
    src = rd.best if which == "best" else rd.last
    try:
        ckpt = read_checkpoint(src)
    except CheckpointError as e:
        raise JobError(f"Run {run_id} has no usable {which} checkpoint: {e}") from e
    dest = checkpoints_root() / f"{name}.pt"
    if dest.exists() and not overwrite:
        raise JobError(
            f"A model named '{name}' already exists; choose another name or allow overwriting."
        )
    ckpt = {k: v for k, v in ckpt.items() if k not in ("optimizer", "rng")}
    ckpt["promoted_from"] = {"run": run_id, "which": which, "at": time.time()}
    atomic_save(ckpt, dest)
    return dest


def list_models(root: Path | None = None) -> list[dict]:
    """Models in checkpoints/ with their metadata, or the reason each cannot be read."""
    root = root or checkpoints_root()
    out = []
    for path in sorted(root.glob("*.pt")) if root.is_dir() else []:
        row = {"name": path.stem, "path": str(path), "size_mb": path.stat().st_size / 2**20}
        try:
            ckpt = read_checkpoint(path)
        except CheckpointError as e:
            out.append({**row, "error": str(e)})
            continue
        m = ckpt.get("model_config", {})
        state = ckpt.get("state") or {}
        bleu = state.get("best_bleu")
        out.append(
            {
                **row,
                "run": ckpt.get("run", ""),
                "step": state.get("step"),
                "best_bleu": bleu if isinstance(bleu, (int, float)) and bleu >= 0 else None,
                "size": _size_label(m),
                "error": "",
            }
        )
    return out


# ----------------------------------------------------------------------------- devices


@functools.lru_cache(maxsize=1)
def device_summary() -> str:
    """The device a new run would use with device 'auto', in words."""
    return device_description(pick_device("auto"))


def gpu_stats() -> list[dict]:
    """Utilisation and memory of each NVIDIA GPU (empty without nvidia-smi)."""
    query = "--query-gpu=name,utilization.gpu,memory.used,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=3,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            rows.append(
                {
                    "name": parts[0],
                    "util": float(parts[1]),
                    "mem_used_mb": float(parts[2]),
                    "mem_total_mb": float(parts[3]),
                }
            )
    return rows
