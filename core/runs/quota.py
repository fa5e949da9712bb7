"""The disk quota: the runs folder and the saved models share one limit
(``ATTENTION_STUDIO_QUOTA_GB``; by default half of what the disk leaves them), and so does the
number of runs (``ATTENTION_STUDIO_MAX_RUNS``).

Where users are known each user, teachers aside, may hold a share of both that leaves room
for a class: a ``CLASS_SIZE``-th by default (``ATTENTION_STUDIO_CLASS_SIZE``;
``ATTENTION_STUDIO_USER_QUOTA_GB`` and ``ATTENTION_STUDIO_USER_MAX_RUNS`` set each share
directly). A live run counts for what it may still grow to (its budget, recorded in job.json
at launch), not only for what it holds now; a refusal names the largest holdings to delete.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.model.checkpoints import CheckpointError, read_checkpoint
from core.places import checkpoints_root, runs_root
from core.runs.budget import GB, BudgetError, size_words
from core.runs.owners import teachers

QUOTA_ENV = "ATTENTION_STUDIO_QUOTA_GB"  # runs + saved models on disk (default: see quota)
USER_QUOTA_ENV = "ATTENTION_STUDIO_USER_QUOTA_GB"  # each user's share (default: see CLASS_SIZE)
QUOTA_SHARE = 0.5  # by default the app's folders may hold half of what the disk leaves them
CLASS_SIZE_ENV = "ATTENTION_STUDIO_CLASS_SIZE"  # users the server keeps room for (default below)
CLASS_SIZE = 20  # by default each user may hold a twentieth of the runs and of the quota, so
# that a few users cannot fill the server before the rest of a class of 20 has started
USER_MAX_RUNS_ENV = "ATTENTION_STUDIO_USER_MAX_RUNS"  # each user's runs (default: see CLASS_SIZE)
QUOTA_MIN_BYTES = 1 * GB  # the default quota is never below this
MAX_SAVED_MODELS = 200  # models saved from runs ("Save as a model"), all users together
MAX_RUNS_ENV = "ATTENTION_STUDIO_MAX_RUNS"  # run folders the server keeps (default MAX_RUNS)
MAX_RUNS = 200  # run folders, all users together: the catalogue reads each run's checkpoints'
# metadata once per server start (about 40 ms each), so 200 runs cost at most ~16 s once, and
# every metadata cache (4,096 entries) holds them all


# ----------------------------------------------------------------------------- on disk


def folder_bytes(path: Path) -> int:
    """Bytes of the files under a folder (symlinks not followed; files that vanish skipped)."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += folder_bytes(Path(entry.path))
            else:
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


@dataclass
class Holder:
    """One thing on disk the quota counts: a run, a saved model, or the app's own files."""

    what: str  # "run", "model" or "other"
    name: str  # run id, model file name, or folder name
    size: int  # bytes it holds now
    charge: int  # bytes it counts for (a live run: what it may still grow to)
    owner: str | None = None  # who made it, where users are known

    def words(self) -> str:
        """E.g. 'run 20261126-010203-small (1.20 GB)'."""
        return f"{self.what} {self.name} ({size_words(self.size)})"


def _read_json(path: Path) -> dict:
    """A small JSON file as a dict ({} when missing or damaged)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def holders(live: Callable[[str], bool] | None = None) -> list[Holder]:
    """Everything in the runs folder and the saved models, with what each counts for.

    ``live(run_id)`` tells whether a run's trainer is running (then it counts for the larger
    of its size and its recorded budget); by default runs count for their size.
    """
    out: list[Holder] = []
    runs = runs_root()
    for entry in sorted(os.scandir(runs), key=lambda e: e.name):
        path = Path(entry.path)
        if not entry.is_dir(follow_symlinks=False):
            out.append(Holder("other", entry.name, _size(path), _size(path)))
            continue
        size = folder_bytes(path)
        if entry.name.startswith("."):
            out.append(Holder("other", entry.name, size, size))
            continue
        job = _read_json(path / "job.json")
        budget = job.get("budget_bytes") if isinstance(job.get("budget_bytes"), int) else 0
        charge = max(size, budget) if live is not None and live(entry.name) else size
        out.append(Holder("run", entry.name, size, charge, job.get("owner")))
    models = checkpoints_root()
    for path in sorted(models.rglob("*.pt")) if models.is_dir() else []:
        size = _size(path) + _size(path.with_suffix(".history"))
        out.append(Holder("model", path.name, size, size, _model_owner(path)))
    return out


def _size(path: Path) -> int:
    """A file's size (0 when it is gone)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _model_owner(path: Path) -> str | None:
    """Who saved a model (its metadata's ``promoted_from.owner``; None for the others)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _recorded_owner(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4096)
def _recorded_owner(path: str, mtime_ns: int, size: int) -> str | None:
    """The owner a checkpoint file records, read once per file version (weights never read)."""
    try:
        promoted = read_checkpoint(path, mmap=True).get("promoted_from")
    except CheckpointError:
        return None
    owner = promoted.get("owner") if isinstance(promoted, dict) else None
    return owner if isinstance(owner, str) else None


def _env_gb(name: str) -> int | None:
    """A size in GB from the environment, as bytes (None when unset or unreadable)."""
    try:
        value = float(os.environ[name])
    except (KeyError, ValueError):
        return None
    return int(value * GB) if value > 0 else None


def quota_bytes(used: int) -> int:
    """The bytes the runs folder and saved models may hold together: ATTENTION_STUDIO_QUOTA_GB,
    else QUOTA_SHARE of what they hold plus the disk's free space (at least QUOTA_MIN_BYTES)."""
    if (set_by_env := _env_gb(QUOTA_ENV)) is not None:
        return set_by_env
    free = shutil.disk_usage(runs_root()).free
    return max(QUOTA_MIN_BYTES, int(QUOTA_SHARE * (free + used)))


def user_quota_bytes(quota: int) -> int:
    """What one user's runs and models may hold (ATTENTION_STUDIO_USER_QUOTA_GB, else the
    quota over the class size)."""
    set_by_env = _env_gb(USER_QUOTA_ENV)
    return set_by_env if set_by_env is not None else quota // class_size()


def _whole_setting(name: str, default: int) -> int:
    """A whole number above 0 from the environment (``default`` when unset); BudgetError for
    a value the server does not understand."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise BudgetError(f"{name} must be a whole number above 0, not {raw!r}")
    return int(raw)


def class_size() -> int:
    """How many users the server keeps room for (ATTENTION_STUDIO_CLASS_SIZE, else CLASS_SIZE)."""
    return _whole_setting(CLASS_SIZE_ENV, CLASS_SIZE)


def user_max_runs() -> int:
    """How many runs one user may keep: ATTENTION_STUDIO_USER_MAX_RUNS, else the runs the
    server keeps over the class size (at least 1)."""
    return _whole_setting(USER_MAX_RUNS_ENV, max(1, max_runs() // class_size()))


def held_to_share(owner: str | None) -> bool:
    """Whether ``owner``'s holdings are held to a user's share (a known user, not a teacher)."""
    return owner is not None and owner not in teachers()


def check_room(
    need: int,
    what: str,
    owner: str | None = None,
    live: Callable[[str], bool] | None = None,
    exclude: str | None = None,
) -> None:
    """BudgetError unless ``need`` more bytes fit the quota (and ``owner``'s share of it, where
    users are known); the message names what to delete. ``exclude``: a run whose own charge
    ``need`` replaces (a resume)."""
    found = [h for h in holders(live) if not (h.what == "run" and h.name == exclude)]
    used = sum(h.charge for h in found)
    quota = quota_bytes(sum(h.size for h in found))
    if used + need > quota:
        raise BudgetError(
            f"Not enough room: {what} may take up to {size_words(need)} on disk, and the runs "
            f"and saved models already take {size_words(used)} of the {size_words(quota)} "
            f"this server allows ({QUOTA_ENV}). {_delete_hint(found, owner)}"
        )
    if not held_to_share(owner):
        return
    mine = [h for h in found if h.owner == owner]
    share = user_quota_bytes(quota)
    if sum(h.charge for h in mine) + need > share:
        raise BudgetError(
            f"Not enough room: {what} may take up to {size_words(need)} on disk, and your runs "
            f"and saved models already take {size_words(sum(h.charge for h in mine))} of the "
            f"{size_words(share)} each user may hold ({USER_QUOTA_ENV}). "
            f"{_delete_hint(mine, owner)}"
        )


def _delete_hint(found: list[Holder], owner: str | None) -> str:
    """'Delete runs or saved models first; the largest: run A (1.2 GB), model b.pt (20 MB).'"""
    yours = [h for h in found if h.what in ("run", "model") and (owner is None or h.owner == owner)]
    largest = sorted(yours, key=lambda h: -h.size)[:3]
    if not largest:
        return "Ask whoever runs the server to make room or raise the quota."
    return (
        "Delete runs or saved models you no longer need; the largest: "
        + ", ".join(h.words() for h in largest)
        + "."
    )


def max_runs() -> int:
    """How many run folders the server keeps: ATTENTION_STUDIO_MAX_RUNS (a whole number > 0),
    else MAX_RUNS."""
    return _whole_setting(MAX_RUNS_ENV, MAX_RUNS)


def settings_problem() -> str | None:
    """Why the server must not serve with its run and quota settings as written (None: it
    may)."""
    try:
        max_runs(), class_size(), user_max_runs()
    except BudgetError as e:
        return str(e)
    return None


def runs_problem(owner: str | None = None) -> str | None:
    """Why no more runs can be started (None: they can): the server keeps at most
    ``max_runs()`` run folders, and each user (where users are known, teachers aside)
    ``user_max_runs()`` of them."""
    if problem := settings_problem():
        return problem
    most = max_runs()
    found = [h for h in holders() if h.what == "run"]
    if len(found) >= most:
        return (
            f"This server keeps at most {most} runs ({MAX_RUNS_ENV}), and there are "
            f"{len(found)}: delete runs you no longer need, or ask whoever runs the server."
        )
    share = user_max_runs()
    mine = [h for h in found if h.owner == owner]
    if held_to_share(owner) and len(mine) >= share:
        return (
            f"Each user may keep at most {share} runs on this server, so that the rest of the "
            f"class has room ({USER_MAX_RUNS_ENV}), and you have {len(mine)}: delete runs "
            "you no longer need."
        )
    return None


def saved_models_problem() -> str | None:
    """Why no more models can be saved from runs (None: they can): model files and model
    folders (a decoder-only run's, ``name.hf``) count alike."""
    folder = checkpoints_root()
    saved = [*folder.rglob("*.pt"), *(p for p in folder.rglob("*.hf") if p.is_dir())]
    if len(saved) < MAX_SAVED_MODELS:
        return None
    return (
        f"This server keeps at most {MAX_SAVED_MODELS} saved models, and there are "
        f"{len(saved)}: replace one of yours, or ask whoever runs the server to remove some."
    )
