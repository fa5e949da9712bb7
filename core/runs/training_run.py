"""One training run in its run directory: the trainer connected to the run's files.

The run directory receives config.json, metrics.jsonl, status.json, last.pt / best.pt
and attention snapshots. SIGTERM or a STOP file saves a checkpoint and exits as
"stopped"; a resume continues the run exactly where its last checkpoint left it.
A NaN/inf loss ends the run as "diverged" (exit code 3), keeping the last finite checkpoint.

Under ``torchrun --nproc-per-node N -m core.train ...`` the N processes train one run
(core.training.distributed): rank 0 alone writes the run's files and evaluates; a stop
reaches every process at the same step; a run resumes with the same or another number of them.
The command line is ``core.train``; this module never parses it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from core.corpus.bpe import checkpoint_entries, checkpoint_vocabs
from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.corpus.splits import summary_words, unk_warnings
from core.corpus.supervision import read_supervision
from core.model.bleu import usable_bleu
from core.model.checkpoints import read_checkpoint
from core.model.config import ModelConfig
from core.model.trainee import build_model
from core.places import shown_path
from core.runs import run_bytes
from core.runs.corpus_cache import prepared_corpus
from core.runs.cpu_share import trainer_share
from core.runs.locks import hold_run, run_is_held
from core.runs.processes import identity
from core.runs.recorder import RunRecorder, budget_eta
from core.runs.run_dir import RunDir, RunError, read_json
from core.runs.status import EARLY_STOP
from core.runs.system import trim_heap
from core.training import distributed
from core.training.config import RESUME_CHANGES, TrainConfig
from core.training.devices import (
    MEMORY_ENV,
    device_description,
    limit_memory,
    lower_priority,
    memory_limit,
    resolve_device,
)
from core.training.distributed import World
from core.training.loop import Trainer, TrainState
from core.training.settings import DERIVED, config_problems, settings_from_args

DIVERGED_EXIT = 3  # exit code of a run that diverged (2: bad settings or data)


class StoppedEarly(Exception):  # noqa: N818 - a stop, not an error
    """A stop (SIGTERM) arrived before training began: the process ends at once."""


def _stop_now(*_) -> None:
    """SIGTERM before training: interrupt whatever is loading (nothing learned, nothing lost)."""
    raise StoppedEarly


def status_writer(rd: RunDir, world: World):
    """rd.write_status on rank 0; elsewhere nothing (one process writes the run's files)."""
    return rd.write_status if world.is_main else lambda **fields: fields


def phase_writer(rd: RunDir, world: World):
    """A callback that says in the run's status (rank 0) and its log what the start-up does
    now, and since when (``phase_started_at``: the page shows how long it has taken)."""
    if not world.is_main:
        return lambda words: None

    def phase(words: str) -> None:
        rd.write_status(message=words, phase_started_at=time.time())
        print(f"{words}…", flush=True)

    return phase


def prepare(rd: RunDir, configs: dict, resume: bool, world: World):
    """Build the corpus (prepared once per corpus and data settings: ``corpus_cache``), model
    and trainer (restored from last.pt when resuming), each phase said in the status."""
    if configs["model"].get("arch", "encoder-decoder") != "encoder-decoder":
        configs["data"]["shared_vocab"] = True  # one stack reads and writes one vocabulary
    data_cfg = DataConfig(**configs["data"])
    phase = phase_writer(rd, world)
    with distributed.local_first(world):  # one download, one preparation per machine
        progress = _download_bar(rd) if world.is_main else None
        corpus = prepared_corpus(data_cfg, progress=progress, phase=phase)
    phase(f"building the model ({corpus.summary.get('train', '?')} training pairs)")
    ckpt = read_checkpoint(rd.last) if resume else None
    if ckpt is not None:
        corpus.use_vocabs(*checkpoint_vocabs(ckpt))
    elif world.distributed and data_cfg.tokenizer != "word":  # one tokenizer for every process
        mine = checkpoint_entries(corpus.src_vocab, corpus.tgt_vocab)
        corpus.use_vocabs(*checkpoint_vocabs(distributed.from_main(world, mine)))
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab),
        tgt_vocab_size=len(corpus.tgt_vocab),
        **configs["model"],
    )
    train_cfg = TrainConfig(**configs["train"])
    if train_cfg.threads:
        torch.set_num_threads(train_cfg.threads)
    torch.manual_seed(train_cfg.seed)
    model = build_model(model_cfg)  # the d2l Transformer, or a decoder-only model (its arch)
    state = None
    if ckpt is not None:
        model.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}
        )
        state = TrainState(**ckpt["state"])
    trainer = Trainer(model, corpus, train_cfg, state, world, run_alignments(rd, train_cfg))
    if ckpt is not None:
        if "optimizer" in ckpt:
            trainer.optimizer.load_state_dict(ckpt["optimizer"])
        trainer.rng = saved_rng(ckpt.get("rng"), world)
        if world.is_main:
            rd.rewind(trainer.state.step)  # what came after the checkpoint is done again
    configs["model"] = asdict(model_cfg)
    configs["summary"] = {**corpus.summary, "path": shown_path(corpus.summary.get("path", ""))}
    return trainer


def run_alignments(rd: RunDir, cfg: TrainConfig) -> dict | None:
    """The run's alignments of its training pairs when it trains a head to align, else None."""
    if not cfg.align_weight:
        return None
    if not rd.alignments.is_file():
        raise DataError(
            "align_weight is set, but the run has no alignments: start it with "
            "python -m core.train --align-teacher CHECKPOINT (or --align-links and --align-pairs)"
        )
    return read_supervision(rd.alignments)


def saved_rng(rng, world: World):
    """The random streams this rank continues (None: a rank the saved run lacked; seeded)."""
    ranks = (rng.get("ranks") or []) if isinstance(rng, dict) else []
    if world.rank < len(ranks):
        return ranks[world.rank]
    return rng if world.is_main else None


def _download_bar(rd: RunDir):
    """A progress callback for the corpus download: a tqdm bar and the run's status."""
    from tqdm import tqdm

    bar, last = {}, [0.0]

    def update(done: int, total: int | None) -> None:
        if "b" not in bar:
            bar["b"] = tqdm(total=total, unit="B", unit_scale=True, desc="fra-eng.zip")
        bar["b"].update(done - bar["b"].n)
        if time.time() - last[0] > 0.5 or done == total:
            last[0] = time.time()
            size = f" / {total / 1e6:.1f}" if total else ""
            rd.write_status(
                message=f"downloading fra-eng.zip: {done / 1e6:.1f}{size} MB",
                download=done / total if total else None,
            )

    return update


def load_run_configs(rd: RunDir, args: argparse.Namespace) -> dict:
    """The saved configs of a run to resume, with new limits (lr...) from the flags or request.

    A run killed before its first checkpoint has only its settings (config.json, or the
    app's request.json): it starts again from them, as nothing was learned yet.
    """
    saved = rd.read_config() or _launch_settings(rd)
    if not all(isinstance(saved.get(g), dict) for g in ("data", "model", "train")):
        raise DataError(no_run_words(rd))
    configs = {k: dict(saved[k]) for k in ("data", "model", "train")}
    changes = read_request(rd).get("limits", {}) if args.request else {}
    for key in RESUME_CHANGES:
        if f"train.{key}" in vars(args):
            changes[key] = getattr(args, f"train.{key}")
    configs["train"].update({k: v for k, v in changes.items() if k in RESUME_CHANGES})
    configs["model"] = {k: v for k, v in configs["model"].items() if k not in DERIVED}
    return checked(configs)


def _launch_settings(rd: RunDir) -> dict:
    """The settings the app launched a run with (its request.json), or {}."""
    request = read_json(rd.request, None)
    settings = request.get("settings") if isinstance(request, dict) else None
    return settings if isinstance(settings, dict) else {}


def read_request(rd: RunDir) -> dict:
    """The app's request.json of a run (its settings or new limits), as data."""
    request = read_json(rd.request, None)
    if not isinstance(request, dict):
        raise DataError(f"{rd.request} is missing or not a JSON object.")
    return request


def checked(configs: dict) -> dict:
    """The configs if every field is valid, else ValueError naming each problem."""
    problems = config_problems(configs)
    if problems:
        raise ValueError("Invalid settings: " + "; ".join(problems) + ".")
    return configs


def new_run_configs(rd: RunDir, args: argparse.Namespace) -> dict:
    """Settings of a new run (the app's request.json, or the preset and the flags), within
    this server's limits (``core.runs.budget``)."""
    if args.request:
        settings = read_request(rd).get("settings")
        configs = {g: dict((settings or {}).get(g) or {}) for g in ("data", "model", "train")}
        if source := vars(args).get("train.align_source"):  # alignments written for it
            configs["train"]["align_source"] = source
        configs = checked(configs)
    else:
        configs = checked(settings_from_args(args))
    if problems := run_bytes.run_problems(configs):
        raise ValueError("Invalid settings: " + "; ".join(problems) + ".")
    return configs


def train_run(args: argparse.Namespace, world: World | None = None) -> int:
    """Run (or resume) training in args.out (each process of a torchrun launch); exit code."""
    world, rd = world or World(), RunDir(args.out)
    signal.signal(signal.SIGTERM, _stop_now)  # before training: stop at once, nothing to save
    configs = load_run_configs(rd, args) if args.resume else new_run_configs(rd, args)
    resume = args.resume and rd.last.is_file()
    if args.resume and not resume:
        print(f"{rd.name} has no checkpoint yet: starting it again from its settings", flush=True)
    limit_memory(resolve_device(configs["train"].get("device", "auto")))
    lower_priority()
    if world.is_main:
        rd.create()
        if args.resume or getattr(args, "fresh", False):  # a stale STOP must not end this run
            rd.stop_file.unlink(missing_ok=True)
        if args.resume and not resume:  # as a resume rewinds past its checkpoint: from zero
            rd.restart()
    status_writer(rd, world)(
        state="starting",
        pid=os.getpid(),
        identity=identity(os.getpid()),
        started_at=time.time(),
        resumed=resume,
        message="",
        phase_started_at=None,
        eta_s=None,  # not the last launch's "0 s": unknown until this one has a pace
        finished_at=None,
        diverged_at=None,
    )
    trainer = prepare(rd, configs, resume, world)
    share = trainer_share(trainer.device.type, configs["train"].get("threads", 0))
    if share is not None:  # one thread fewer while other processes keep a core busy
        trainer.on("batch", lambda _trainer, _info: share.update())  # after every step
    trim_heap()  # what reading and encoding the corpus freed
    # a signal only asks: the processes decide together at the next step (Trainer.agree)
    signal.signal(signal.SIGTERM, lambda *_: setattr(trainer, "stop_asked", True))
    if world.is_main and rd.stop_requested():
        trainer.stop_asked = True
    devices = distributed.gather(world, device_description(trainer.device))
    if not world.is_main:
        outcome = trainer.run()
        return DIVERGED_EXIT if outcome == "diverged" else 0
    rd.write_config(configs)
    warnings = unk_warnings(trainer.corpus, DataConfig(**configs["data"]))
    start_status(rd, trainer, warnings, distributed.describe(world, devices[0], devices))
    bar = None if args.no_progress else _progress_bar(args.out, trainer)
    recorder = RunRecorder(rd, trainer, configs, bar)
    recorder.saved_step = trainer.state.step if resume else None
    where = rd.read_status().get("device")
    print(f"training on {where}: {summary_words(configs['summary'])}", flush=True)
    outcome = trainer.run()
    if bar is not None:
        bar.close()
    return final_report(rd, trainer, outcome)


def start_status(rd: RunDir, trainer: Trainer, warnings: list[str], devices: dict) -> None:
    """Write the status of a run about to train (devices: distributed.describe), print warnings."""
    rd.write_status(
        **devices,
        state="running",
        message=f"running the first steps (the first record comes at step {trainer.cfg.log_every})"
        if not trainer.state.step
        else "",
        phase_started_at=time.time(),
        eta_s=budget_eta(trainer),  # known from a time budget; else once steps have a pace
        warnings=warnings,
        total_steps=trainer.total_steps,
        progress=trainer.progress(),
        step=trainer.state.step,
        best_bleu=trainer.state.best_bleu,
    )
    for warning in warnings:
        print(f"warning: {warning}", flush=True)


def final_report(rd: RunDir, trainer: Trainer, outcome: str) -> int:
    """Print the run's last line and return its exit code (DIVERGED_EXIT after divergence)."""
    if outcome == "diverged":
        print(f"error: {rd.read_status().get('message')}", file=sys.stderr, flush=True)
        return DIVERGED_EXIT
    if not trainer.val_data:
        best = "no validation split"
    elif not trainer.translates:
        best = f"best val loss {trainer.state.best_loss:.4f}"
    elif usable_bleu(trainer.state.best_bleu) is None:
        best = "not evaluated yet"
    else:
        best = f"best val BLEU {trainer.state.best_bleu:.2f}"
    print(
        f"{outcome} at step {trainer.state.step}; {best}; run directory {shown_path(rd.path)}",
        flush=True,
    )
    return 0


def _progress_bar(desc: str, trainer: Trainer):
    """A tqdm bar over the run's steps (out of its total, when a step limit implies one)."""
    from tqdm import tqdm

    return tqdm(total=trainer.total_steps, initial=trainer.state.step, desc=desc, unit="step")


def no_run_words(rd: RunDir) -> str:
    """The error of a resume that finds neither a checkpoint nor settings in ``rd``."""
    return (
        f"{shown_path(rd.path)} has no checkpoint (last.pt) and no settings (config.json or "
        "request.json) to resume or start again from."
    )


def resume_problem(out: str) -> str:
    """Why ``--resume`` finds no run in ``out`` ('' when it does): no such folder, or one
    without a checkpoint or settings (last.pt, config.json or the app's request.json) that
    no trainer holds (one starting it gives its own error: the run is being trained)."""
    rd = RunDir(out)
    if not rd.path.is_dir():
        return f"There is no run {shown_path(rd.path)} to resume: check its name, or start it."
    if any(p.is_file() for p in (rd.last, rd.config, rd.request)) or run_is_held(rd.path):
        return ""
    return no_run_words(rd)


def lock_run(out: str, world: World, resume: bool = False) -> int | None:
    """Rank 0 takes the run's trainer lock (an fd to keep open; None elsewhere); RunError on
    every process when it is taken, or when ``resume`` finds no run there (nothing created),
    so no process of a second trainer touches anything."""
    lock, problem = None, None
    if world.is_main:
        try:
            if resume and (missing := resume_problem(out)):
                raise RunError(missing)
            Path(out).mkdir(parents=True, exist_ok=True)
            lock = hold_run(out)
        except (RunError, OSError) as e:
            problem = e
    if not distributed.all_true(world, problem is None):
        raise problem or RunError("the first process could not lock the run directory")
    return lock


def record_failure(out: str, world: World, message: str, fresh: bool = False) -> None:
    """Write 'failed' and why into the run's status (rank 0; a run directory that exists); a
    ``fresh`` run (one process, its folder checked: ``new_run_problem``) failing unbegun goes."""
    if world.is_main and Path(out).is_dir() and fresh and not RunDir(out).metrics.is_file():
        RunDir(out).discard()  # a mistyped --data lists no failed run, and may be run again
    elif world.is_main and Path(out).is_dir():
        RunDir(out).write_status(state="failed", message=message)


def record_stop(out: str, world: World) -> None:
    """Write 'stopped' into the status of a run stopped before it trained (rank 0)."""
    if world.is_main and Path(out).is_dir():
        RunDir(out).write_status(state="stopped", message=EARLY_STOP, eta_s=None)


def memory_message() -> str:
    """What running out of memory means for a run, and what to do."""
    limit = memory_limit()
    cap = f" (each process may take {limit / 2**30:.1f} GB, set by {MEMORY_ENV})" if limit else ""
    return (
        f"The trainer ran out of memory{cap}. Use a smaller corpus or set max_pairs, or lower "
        "batch_size, max_len or max_vocab."
    )


def crash_message(e: Exception, world: World) -> str:
    """A crash in words; with several processes, where to look for the one that failed."""
    message = f"{type(e).__name__}: {e}"
    if world.distributed:
        message = (
            f"Training with {world.size} processes failed: one of them crashed or stopped "
            f"answering (train.log has every process's output). {message}"
        )
    return message


def run(args: argparse.Namespace) -> int:
    """Train (or resume) the run ``args`` names; errors reported as one readable line; exit code.

    While it trains, the process (rank 0 of a torchrun launch) holds the run directory's
    trainer lock, so a second trainer of the same run (two resumes at once) stops at once
    and touches nothing. A process of a torchrun launch ends here (distributed.exit_process).
    """
    try:
        world = distributed.world_from_env()
        distributed.start(world)
        lock = lock_run(args.out, world, args.resume)
    except (RunError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        code = train_run(args, world)
    except StoppedEarly:
        record_stop(args.out, world)
        print("stopped before training began", flush=True)
        code = 0
    except MemoryError:
        message = memory_message()
        record_failure(args.out, world, message)
        print(f"error: {message}", file=sys.stderr)
        code = 2
    except (DataError, ValueError, OSError) as e:
        record_failure(args.out, world, str(e), getattr(args, "fresh", False))
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except Exception as e:  # noqa: BLE001 - record any crash for the app, then exit 1
        record_failure(args.out, world, crash_message(e, world))
        traceback.print_exc()
        code = 1
    finally:
        if lock is not None:
            os.close(lock)
    if world.distributed:
        if code in (0, DIVERGED_EXIT):  # every process got here: leave the group together
            distributed.finish(world)
        distributed.exit_process(code)  # never returns
    return code
