"""``python -m core.checkpoint SRC DST``: write a compact copy of a checkpoint (and its history).

A decoder-only run's checkpoint is copied as its ``save_pretrained`` folder (DST a folder,
e.g. ``checkpoints/induction-2l.hf``), its history beside it (``induction-2l.history``). DST
ends in .pt (.hf for a folder) and replaces only a copy the studio wrote (``refusal``).

The library is ``core.model.checkpoints`` (save, load, compact), ``core.runs.history`` and
``core.alignment.head_aer.store_in_history`` (every head's validation numbers at each snapshot
model of the run, kept in the history so the copy shows them without the run or the corpus).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from core.alignment.head_aer import store_in_history
from core.command_line import CommandParser, run_command, terminal_progress
from core.corpus.source import DataError
from core.model import checkpoints as ckpts
from core.model.checkpoints import CheckpointError, atomic_save, compact, read_checkpoint
from core.model.opened import describe_folder
from core.runs.catalogue import bleu_at
from core.runs.history import FORMAT, HistoryFile, history_path, history_sharer, write_history


def build_parser() -> argparse.ArgumentParser:
    """SRC, DST, --float32 and --no-history."""
    p = CommandParser(description="Write a compact (float16, no optimiser) copy.")
    p.add_argument("src", help="a studio checkpoint (a run's best.pt or last.pt, or a copy)")
    p.add_argument("dst", help="the copy, new or one the studio wrote: .pt, or .hf (a folder) for "
                   "a decoder-only or encoder model")  # fmt: skip
    p.add_argument("--float32", action="store_true", help="keep float32 weights")
    p.add_argument("--no-history", action="store_true", help="do not write DST's .history file "
                   "(the run's metrics and attention snapshots up to the checkpoint's step, "
                   "written when SRC is inside a run directory)")  # fmt: skip
    p.add_argument("--no-trajectories", action="store_true", help="do not measure every head "
                   "on the validation sentences at the run's snapshot models and keep the "
                   "numbers in the .history file")  # fmt: skip
    return p


def run(args: argparse.Namespace) -> list[str]:
    """Write the compact copy and, beside it, the run's history up to its step."""
    meta = read_checkpoint(args.src, mmap=True)
    if why := refusal(args, ckpts.saved_as_folder(meta)):
        raise CheckpointError(why)
    out = compact(args.src, args.dst, half=not args.float32)
    folder = out.is_dir()  # a decoder-only model: its save_pretrained folder (no training state)
    step = (meta.get("state") or {}).get("step") if folder else own_bleu(Path(args.src).parent, out)
    size = sum(f.stat().st_size for f in out.iterdir()) if folder else out.stat().st_size
    lines = [f"wrote {out} ({size / 1e6:.1f} MB)"]
    if args.no_history:
        return lines
    history = write_history(Path(args.src).parent, out, step)
    if history is not None and not args.no_trajectories and not folder:
        try:  # every head's numbers at each step with a snapshot model, for Over training
            store_in_history(Path(args.src).parent, out, step, progress=terminal_progress())
        except (DataError, CheckpointError, OSError, ValueError) as e:
            lines.append(f"note: no validation numbers over training in the history: {e}")
    if history is not None:
        lines.append(f"wrote {history} ({history.stat().st_size / 1e6:.2f} MB)")
    return lines


def refusal(args: argparse.Namespace, folder: bool) -> str | None:
    """Why DST cannot be written, in one line (None if it can): not named .pt (.hf when SRC is
    copied as a ``folder``), SRC itself, a name a model of the other form holds (one history
    each name), or there (or its .history) and not the studio's."""
    src, dst = Path(args.src), Path(args.dst)
    if dst.suffix != (suffix := ".hf" if folder else ".pt"):
        kind = "its model folder" if folder else "one file"
        return f"{dst}: the copy's name ends in {suffix} (this model is copied as {kind})"
    if (other := history_sharer(dst)) is not None:
        return f"{other} is there: a copy named {dst.name} would share its name and history"
    if dst.exists() and dst.resolve() == src.resolve():
        return f"{dst} is SRC: name another file for the copy"
    if dst.exists() and (dst.parent / "metrics.jsonl").is_file():  # best.pt, last.pt
        return f"{dst} is a run's own checkpoint (it resumes from it): it is left as it is"
    if dst.exists() and not studio_wrote(dst, folder):
        return f"{dst} is there and is not a model the studio wrote: it is left as it is"
    history = history_path(dst)
    if history.exists() and HistoryFile(history).section("format") != FORMAT:
        why = "is there and is not a history the studio wrote: it is left as it is"
        return None if args.no_history else f"{history} {why} (or pass --no-history)"
    return None


def studio_wrote(path: Path, folder: bool) -> bool:
    """Whether a copy may replace ``path``: a checkpoint the studio wrote, or (``folder``) a
    model folder recording a task trained here."""
    try:
        if folder:
            return path.is_dir() and bool(describe_folder(path)["task"])
        return path.is_file() and bool(read_checkpoint(path, mmap=True))
    except Exception:  # noqa: BLE001 - a file or folder the door cannot read is not ours
        return False


def own_bleu(run_dir: Path, out: Path) -> int | None:
    """Record in the copy the validation BLEU at its own step, read from the run's metrics
    (a run's last.pt: its state's best_bleu is the run's best so far, not its own); the
    copy's step."""
    ckpt = read_checkpoint(out)
    step = (ckpt.get("state") or {}).get("step")
    bleu = bleu_at(run_dir, step)
    if bleu is not None:
        ckpt["val_bleu"] = bleu
        atomic_save(ckpt, out)
    return step


def main(argv=None) -> int:
    """Write a compact copy of a checkpoint, with its history."""
    return run_command(build_parser(), run, (CheckpointError,), argv)


if __name__ == "__main__":
    raise SystemExit(main())
