"""Save as a model: a run's checkpoint copied under a name into the models folder, with the
validation pairs of its corpus when that is not fra-eng (a few hundred KB at most), so that
head importance, the faithfulness table and the validation sentences still work where the
corpus is not.

A saved model belongs to whoever saved it where users are known (``core.runs.owners``); it
fits the quota and the count of saved models (``core.runs.budget``); a model the app did
not save (the shipped model, the operator's files) is never replaced from a browser.

A decoder-only run's model is its ``save_pretrained`` folder (``<run>/best.hf``): it is copied
whole to ``checkpoints/<name>.hf`` (``core.model.checkpoints.copied_folder``, as ``python -m
core.checkpoint`` copies it), with ``promoted_from.json`` in it saying from which run and by whom.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from core.model.checkpoints import (
    CheckpointError,
    all_finite,
    atomic_save,
    copied_folder,
    exported_folder,
    read_checkpoint,
    read_metadata,
    saved_as_folder,
    validation_pairs_of,
)
from core.places import checkpoints_root
from core.runs import budget, quota
from core.runs.catalogue import ModelError, bleu_at, validate_name
from core.runs.history import MAX_BYTES, history_path, history_sharer, write_history
from core.runs.jobs import check_room
from core.runs.locks import launch_lock
from core.runs.owners import (
    OwnershipError,
    User,
    check_change,
    check_create,
    check_owner,
    owner_of,
)
from core.runs.run_dir import RunError, run_dir


def promote(
    run_id: str, which: str, name: str, overwrite: bool = False, user: User | None = None
) -> Path:
    """Copy a run's best or last checkpoint to checkpoints/<name>.pt (weights and metadata)
    with its history; ``user`` None is the command line (the operator)."""
    name = validate_name(name)
    if which not in ("best", "last"):
        raise ModelError(f"Choose 'best' or 'last', not '{which}'.")
    try:
        rd = run_dir(run_id)
        check_owner(user, rd, "save a model from")
        check_create(user, "a model")
    except (RunError, OwnershipError) as e:
        raise ModelError(str(e)) from e
    ckpt = _copy_of(run_id, rd.best if which == "best" else rd.last, which)
    if (bleu := bleu_at(rd.path, (ckpt.get("state") or {}).get("step"))) is not None:
        ckpt["val_bleu"] = bleu  # its own step's: a last checkpoint is not the run's best
    if (pairs := validation_pairs_of(ckpt)) is not None:  # its validation basis travels with it
        ckpt["validation_pairs"] = pairs
    ckpt["promoted_from"] = {"run": run_id, "which": which, "at": time.time()}
    ckpt["promoted_from"]["owner"] = owner_of(user)
    if saved_as_folder(ckpt):  # a decoder-only run's model: its folder
        src = rd.best if which == "best" else rd.last
        dest = _promote_folder(src, checkpoints_root() / f"{name}.hf", ckpt, overwrite, user)
        return _with_history(rd.path, dest, ckpt)
    dest = checkpoints_root() / f"{name}.pt"
    with launch_lock():  # the checks and the write together: two sessions cannot both pass
        _check_replace(dest, overwrite, user)
        need = budget.sizeof(ckpt) + MAX_BYTES - _size(dest) - _size(history_path(dest))
        try:
            check_room(max(need, 0), f"model {name}", owner_of(user))
        except RunError as e:
            raise ModelError(str(e)) from None
        dest = _publish(ckpt, dest, overwrite)
    return _with_history(rd.path, dest, ckpt)


def _with_history(run_path: Path, dest: Path, ckpt: dict) -> Path:
    """``dest`` once the run's history up to the checkpoint's step is written beside it."""
    try:  # the model carries its training history (metrics, snapshots) up to its step
        if write_history(run_path, dest, (ckpt.get("state") or {}).get("step")) is None:
            history_path(dest).unlink(missing_ok=True)  # not an older model's history
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        history_path(dest).unlink(missing_ok=True)
        raise ModelError(f"Saved {dest.name}, but not its training history: {e}") from e
    return dest


PROMOTED = "promoted_from.json"  # in a saved model folder: from which run, by whom


def _promote_folder(src: Path, dest: Path, ckpt: dict, overwrite: bool, user) -> Path:
    """A decoder-only run's model folder (beside ``src``) copied to ``dest``, the checks and
    the copy under the launch lock as for a checkpoint; ModelError in one line."""
    with launch_lock():
        _check_replace(dest, overwrite, user)
        need = _size(exported_folder(src)) + MAX_BYTES - _size(dest) - _size(history_path(dest))
        try:
            check_room(max(need, 0), f"model {dest.stem}", owner_of(user))
            copied_folder(src, dest)
        except RunError as e:
            raise ModelError(str(e)) from None
        except (CheckpointError, OSError) as e:
            raise ModelError(f"Could not save {dest.name}: {e}") from None
        (dest / PROMOTED).write_text(json.dumps(ckpt["promoted_from"]), encoding="utf-8")
    return dest


def _promoted_from(dest: Path):
    """The ``promoted_from`` record of a saved model (a file or a folder); None for a model the
    app did not save."""
    if dest.is_dir():
        try:
            return json.loads((dest / PROMOTED).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    try:
        return read_metadata(dest).get("promoted_from")
    except CheckpointError:
        return None


def _copy_of(run_id: str, src: Path, which: str) -> dict:
    """A run's checkpoint without optimiser and random state; ModelError when unusable."""
    try:
        ckpt = read_checkpoint(src)
    except CheckpointError as e:
        raise ModelError(f"Run {run_id} has no usable {which} checkpoint: {e}") from e
    if not all_finite(ckpt.get("state_dict") or {}):
        raise ModelError(
            f"Run {run_id}'s {which} checkpoint has NaN or infinite weights; it cannot be "
            "saved as a model. Use a checkpoint from before training diverged."
        )
    return {k: v for k, v in ckpt.items() if k not in ("optimizer", "rng")}


def _check_replace(dest: Path, overwrite: bool, user: User | None) -> None:
    """ModelError unless a model may be written at ``dest``: a new name within the count of
    saved models, or (asked) a model saved from a run that ``user`` may change."""
    if (other := history_sharer(dest)) is not None:  # one name, one model: one history
        raise ModelError(
            f"A model named '{dest.stem}' already exists ({other.name}); choose another name."
        )
    if not dest.exists():
        if problem := quota.saved_models_problem():
            raise ModelError(problem)
        return
    if not overwrite:
        raise ModelError(
            f"A model named '{dest.stem}' already exists; choose another name or allow overwriting."
        )
    if user is None:
        return  # the command line: the operator may replace anything
    promoted = _promoted_from(dest)
    if not isinstance(promoted, dict):
        raise ModelError(
            f"'{dest.stem}' is the shipped model or a file the server's operator put there: "
            "it cannot be replaced from the app. Choose another name."
        )
    try:
        check_change(user, promoted.get("owner"), "replace", f"model {dest.stem}")
    except OwnershipError as e:
        raise ModelError(str(e)) from None


def _size(path: Path) -> int:
    """A file's size, or a folder's files' sizes together (0 when it is absent)."""
    try:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def _publish(ckpt: dict, dest: Path, overwrite: bool) -> Path:
    """Write ``dest`` whole; without ``overwrite``, never replace a model (even in a race)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    atomic_save(ckpt, tmp)
    try:
        if overwrite:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)  # fails if dest exists: two sessions cannot both create it
    except FileExistsError:
        raise ModelError(
            f"A model named '{dest.stem}' already exists; choose another name or allow overwriting."
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return dest
