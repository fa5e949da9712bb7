"""A trainer's record in its run directory: metrics, status, checkpoints and snapshots.

``RunRecorder`` connects a ``Trainer`` (which reports through callbacks only) to a
``RunDir``; ``core.runs.training_run`` builds both.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from core.model.checkpoints import portable_data_config, save_checkpoint
from core.model.trainee import export_folder
from core.places import run_corpus_files
from core.runs import budget, quota, run_bytes
from core.runs.run_dir import RunDir, read_json
from core.runs.system import ProcessMeter, trim_heap
from core.training.evaluation import snapshot_probes
from core.training.loop import Trainer
from core.training.random_streams import rng_state


class RunEta:
    """Seconds left of a run, from the wall-clock pace of this process: progress made since
    its first step over the time that took, evaluations and checkpoints included. A resumed
    run starts its own count (its earlier steps were done by another process: the trainer's
    elapsed time of this process alone over all the progress read "ETA 0 s"); before any
    progress, None. ``clock`` is injectable (tests never depend on the machine's speed)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.start: tuple[float, float] | None = None  # (time, progress) at the first step

    def __call__(self, progress: float, fallback: float | None = None) -> float | None:
        """Seconds left at ``progress`` (0..1); ``fallback`` until this process has a pace."""
        now = self.clock()
        if self.start is None:
            self.start = (now, progress)
            return fallback
        t0, p0 = self.start
        if progress >= 1.0:
            return 0.0
        if progress <= p0 or now <= t0:
            return fallback
        return (1.0 - progress) * (now - t0) / (progress - p0)


def budget_eta(trainer: Trainer) -> float | None:
    """Seconds of training left of the run's time budget when the budget is what ends it
    (None without one, or when its step limit ends it sooner): an ETA known from the first
    step, before any pace is (evaluations come on top)."""
    budget = trainer.cfg.time_budget
    if not budget:
        return None
    total = trainer.total_steps
    if total and trainer.state.step / total > trainer.state.elapsed / budget:
        return None  # the steps run out first: only a pace can tell when
    return max(0.0, budget - trainer.state.elapsed)


class RunRecorder:
    """Connects a Trainer to a RunDir: metrics, status, checkpoints, snapshots, stop."""

    def __init__(self, rd: RunDir, trainer: Trainer, configs: dict, bar=None):
        self.rd, self.trainer, self.configs, self.bar = rd, trainer, configs, bar
        path = trainer.corpus.summary.get("path")
        self.data_config = portable_data_config(configs["data"], path)  # no machine path
        self.saved_step: int | None = None  # step of the last.pt on disk (None: none yet)
        self.meter = ProcessMeter()  # what the process costs, sampled at each record
        self.parameters = sum(p.numel() for p in trainer.model.parameters())
        self.keep_snapshots = run_bytes.snapshots_to_keep(configs)  # thinned evenly past it
        self.keep_models = run_bytes.models_to_keep(
            trainer.cfg.snapshot_models, self.parameters, configs["model"]
        )
        self.allowed = run_allowance(rd, configs)  # the most disk the run may take
        self.stride = max(1, int(rd.read_status().get("metrics_stride") or 1))  # records kept
        self.records = 0  # training records seen (every ``stride``-th is written)
        self.pace = RunEta()  # seconds left, evaluations included, resume or not
        trainer.on("step", self.on_step)
        trainer.on("eval", self.on_eval)
        trainer.on("end", self.on_end)

    def eta(self) -> float | None:
        """Seconds left at this process's pace (``RunEta``), or of the time budget before
        the pace is known (``budget_eta``)."""
        return self.pace(self.trainer.progress(), budget_eta(self.trainer))

    def on_step(self, trainer: Trainer, info: dict) -> None:
        """Record training metrics, refresh the status, honour a stop file."""
        trim_heap()  # the free heap back to the system, before memory is sampled
        system = self.meter.sample()  # CPU %, resident memory (GPU memory on CUDA)
        self.records += 1
        if self.records % self.stride == 0 and self.rd.append_metrics(
            {"record": "train", **info, **system, "time": time.time()}
        ):  # thinned past budget.METRICS_BYTES: from now on, half as many records
            self.stride *= 2
        self.rd.write_status(
            metrics_stride=self.stride,
            state="running",
            message="",
            step=info["step"],
            progress=info["progress"],
            eta_s=self.eta(),
            epoch=info["epoch"],
        )
        if self.rd.stop_requested():
            trainer.stop_asked = True
        if self.bar is not None:
            self.bar.n = info["step"]
            self.bar.set_postfix(loss=f"{info['loss']:.3f}")

    def save(self, path: Path, with_optimizer: bool, half: bool = False) -> None:
        """Write a checkpoint with configs, vocabularies and (optionally) optimiser state.

        With the optimiser go the random streams, so a resumed run draws what this one would.
        ``half`` stores the weights in float16 (the snapshot models).
        """
        t = self.trainer
        rng = rng_state()
        if t.world.distributed:  # each process's streams, for a resume with as many
            rng["ranks"] = t.rank_rngs
        extra = {"optimizer": t.optimizer.state_dict(), "rng": rng} if with_optimizer else {}
        save_checkpoint(
            path,
            t.model,
            t.corpus.src_vocab,
            t.corpus.tgt_vocab,
            train_config=self.configs["train"],
            data_config=self.data_config,
            state=asdict(t.state),
            run=self.rd.name,
            half=half,
            **extra,
        )
        if path == self.rd.last:
            self.saved_step = t.state.step
        if path in (self.rd.last, self.rd.best) and t.model.cfg.arch != "encoder-decoder":
            # what other tools open: a save_pretrained folder beside the training state
            folder = self.rd.folder_of(path)
            export_folder(t.model, t.corpus.tgt_vocab, folder, t.task, self.data_config)

    def on_eval(self, trainer: Trainer, info: dict) -> None:
        """Record validation metrics, save checkpoints and the probes' attention maps."""
        record = {"record": "eval", **info, "elapsed": trainer.state.elapsed, "time": time.time()}
        self.rd.append_metrics(record)
        # best.pt and the snapshot before last.pt: a resume from last.pt redoes what follows it
        if info.get("is_best"):
            self.save(self.rd.best, with_optimizer=False)
        self.keep_snapshot(trainer)
        if self.keep_models and self.fits(budget.KEPT_BYTES_PER_PARAM * self.parameters):
            self.save(self.rd.snapshot_model(trainer.state.step), with_optimizer=False, half=True)
            self.rd.thin_snapshot_models(self.keep_models)
        self.save(self.rd.last, with_optimizer=True)
        self.rd.write_status(best_bleu=trainer.state.best_bleu, last_eval=info["step"])
        if self.rd.stop_requested():
            trainer.stop_asked = True

    def fits(self, more: int) -> bool:
        """Whether ``more`` bytes keep the run within its allowance (``run_allowance``)."""
        return quota.folder_bytes(self.rd.path) + more <= self.allowed

    def keep_snapshot(self, trainer: Trainer) -> None:
        """Write the probes' maps at this step, unless they pass budget.SNAPSHOT_BYTES or the
        run's allowance (then a warning in the status says so), and thin the snapshots."""
        probes = snapshot_probes(trainer)
        if not probes and not trainer.translates:  # an encoder that reads none of its probes
            return
        size = budget.sizeof(probes)
        if size > budget.SNAPSHOT_BYTES or not self.fits(size) or not self.keep_snapshots:
            limit = budget.size_words(budget.SNAPSHOT_BYTES)
            self.warn(
                "Attention snapshots not kept",
                f"Attention snapshots not kept (the first at step {trainer.state.step}): one "
                f"would take {budget.size_words(size)}; each may take {limit}, and the whole "
                f"run {budget.size_words(self.allowed)}.",
            )
            return
        self.rd.save_snapshot(trainer.state.step, probes, self.keep_snapshots)

    def warn(self, head: str, message: str) -> None:
        """Add a warning to the run's status, once per ``head`` (its first words)."""
        warnings = list(self.rd.read_status().get("warnings") or [])
        if not any(str(w).startswith(head) for w in warnings):
            self.rd.write_status(warnings=[*warnings, message][-8:])

    def on_end(self, trainer: Trainer, info: dict) -> None:
        """Save the last checkpoint (never after divergence) and the final state."""
        message = ""
        if info["outcome"] == "diverged":
            message = divergence_message(info, self.saved_step)
        else:
            self.save(self.rd.last, with_optimizer=True)
        self.rd.stop_file.unlink(missing_ok=True)
        if self.bar is not None:
            self.bar.n = info["step"]
            self.bar.refresh()
        self.rd.write_status(
            state=info["outcome"],
            step=info["step"],
            progress=trainer.progress(),
            eta_s=0.0,
            finished_at=time.time(),
            message=message,
            diverged_at=info.get("diverged_at"),
        )


def run_allowance(rd: RunDir, settings: dict) -> int:
    """The most disk a run may take: the budget the app recorded when it launched the run
    (job.json), else the budget of its settings with its corpus copy."""
    recorded = (read_json(rd.job, {}) or {}).get("budget_bytes")
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    corpus = sum(p.stat().st_size for p in run_corpus_files(rd.path))
    return run_bytes.run_budget(settings, corpus).total


def divergence_message(info: dict, saved_step: int | None) -> str:
    """What happened when training diverged, what is kept and what to do, in one line."""
    head = (
        f"Training diverged at step {info['diverged_at']}: the {info['diverged']} became NaN/inf."
    )
    if saved_step is None:
        return (
            f"{head} No checkpoint was saved before it; lower lr or raise warmup_steps "
            "and start again."
        )
    return (
        f"{head} The last finite checkpoint (step {saved_step}) is kept; lower lr or raise "
        "warmup_steps, then resume or start again."
    )
