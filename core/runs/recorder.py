"""A trainer's record in its run directory: metrics, status, checkpoints and snapshots.

``RunRecorder`` connects a ``Trainer`` (which reports through callbacks only) to a
``RunDir``; ``core.runs.training_run`` builds both.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from core.model.checkpoints import portable_data_config, save_checkpoint
from core.runs.run_dir import RunDir
from core.runs.system import ProcessMeter, trim_heap
from core.training.loop import Trainer
from core.training.random_streams import rng_state


class RunRecorder:
    """Connects a Trainer to a RunDir: metrics, status, checkpoints, snapshots, stop."""

    def __init__(self, rd: RunDir, trainer: Trainer, configs: dict, bar=None):
        self.rd, self.trainer, self.configs, self.bar = rd, trainer, configs, bar
        path = trainer.corpus.summary.get("path")
        self.data_config = portable_data_config(configs["data"], path)  # no machine path
        self.saved_step: int | None = None  # step of the last.pt on disk (None: none yet)
        self.meter = ProcessMeter()  # what the process costs, sampled at each record
        trainer.on("step", self.on_step)
        trainer.on("eval", self.on_eval)
        trainer.on("end", self.on_end)

    def eta(self) -> float | None:
        """Seconds left, extrapolated from progress so far."""
        p, t = self.trainer.progress(), self.trainer.state.elapsed
        return t * (1 - p) / p if p > 0 else None

    def on_step(self, trainer: Trainer, info: dict) -> None:
        """Record training metrics, refresh the status, honour a stop file."""
        trim_heap()  # the free heap back to the system, before memory is sampled
        system = self.meter.sample()  # CPU %, resident memory (GPU memory on CUDA)
        self.rd.append_metrics({"record": "train", **info, **system, "time": time.time()})
        self.rd.write_status(
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

    def on_eval(self, trainer: Trainer, info: dict) -> None:
        """Record validation metrics, save checkpoints and the probes' attention maps."""
        record = {"record": "eval", **info, "elapsed": trainer.state.elapsed, "time": time.time()}
        self.rd.append_metrics(record)
        # best.pt and the snapshot before last.pt: a resume from last.pt redoes what follows it
        if info.get("is_best"):
            self.save(self.rd.best, with_optimizer=False)
        self.rd.save_snapshot(trainer.state.step, trainer.probe_maps())
        if keep := models_to_keep(
            trainer.cfg.snapshot_models, trainer.model
        ):  # heads over training
            self.save(self.rd.snapshot_model(trainer.state.step), with_optimizer=False, half=True)
            self.rd.thin_snapshot_models(keep)
        self.save(self.rd.last, with_optimizer=True)
        self.rd.write_status(best_bleu=trainer.state.best_bleu, last_eval=info["step"])
        if self.rd.stop_requested():
            trainer.stop_asked = True

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


KEPT_MODELS_BYTES = 2**30  # the most disk a run's kept snapshot models take (float16)


def models_to_keep(asked: int, model) -> int:
    """How many snapshot models a run keeps: ``asked`` (``TrainConfig.snapshot_models``), fewer
    when that many float16 copies would pass KEPT_MODELS_BYTES (at least one when asked)."""
    if not asked:
        return 0
    size = 2 * sum(p.numel() for p in model.parameters())  # bytes in float16
    return min(asked, max(1, KEPT_MODELS_BYTES // max(size, 1)))


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
