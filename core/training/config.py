"""How to train: ``TrainConfig`` (saved in every run and checkpoint), its problems, the
learning-rate schedule, the default probe sentences and what a resumed run may change."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.config_fields import too_large, type_problems
from core.corpus.text import D2L_TEST_PAIRS

D2L_PROBES = [source for source, _ in D2L_TEST_PAIRS]  # snapshot sentences by default
SCHEDULES = ("inverse_sqrt", "constant", "linear")  # TrainConfig.schedule
DEVICES = ("auto", "cpu", "cuda", "mps")  # TrainConfig.device
LIMITS = ("epochs", "max_steps", "time_budget")  # the limits a resumed run may change
RESUME_CHANGES = (*LIMITS, "lr", "warmup_steps", "grad_clip")  # all it may (after divergence)


def longer_limits(step: int, elapsed: float, steps: int = 0, minutes: float = 0.0) -> dict:
    """The limits that train a run standing at ``step`` after ``elapsed`` seconds of training
    ``steps`` more steps or ``minutes`` more minutes (one of them), its other limits lifted;
    ValueError naming what is wrong with the amount."""
    if bool(steps) == bool(minutes):
        raise ValueError("give more steps or more minutes (one of them)")
    amount, unit = (steps, "steps") if steps else (minutes, "minutes")
    if not (isinstance(amount, (int, float)) and 0 < amount < math.inf):
        raise ValueError(f"more {unit} must be a positive number (got {amount})")
    if steps and int(steps) != steps:
        raise ValueError(f"more steps must be a whole number (got {steps})")
    if steps:
        return {"epochs": 0, "max_steps": int(step) + int(steps), "time_budget": 0.0}
    return {"epochs": 0, "max_steps": 0, "time_budget": float(elapsed) + 60.0 * minutes}


@dataclass
class TrainConfig:
    """How to train; saved in every run directory and checkpoint."""

    epochs: int = 10  # passes over the training pairs (0 = no limit)
    max_steps: int = 0  # optimiser steps (0 = no limit)
    time_budget: float = 0.0  # s of training steps (0: none); start-up and evaluations not counted
    batch_size: int = 128  # sentence pairs per step and process (the step's: times processes)
    batch_tokens: int = 0  # padded tokens per step and process in place of batch_size (0: off)
    lr: float = 1e-3  # peak learning rate of Adam
    warmup_steps: int = 400  # linear warm-up length
    schedule: str = "inverse_sqrt"  # after warm-up: "inverse_sqrt", "constant" or "linear" (to 0)
    label_smoothing: float = 0.1  # as in the paper
    grad_clip: float = 1.0  # max gradient norm (0 = off)
    eval_every: int = 500  # steps between evaluations (and one at the end)
    eval_sentences: int = 300  # validation sentences translated for BLEU at each evaluation
    log_every: int = 20  # steps between metric records
    device: str = "auto"  # "auto" (CUDA, then MPS, then CPU), "cuda", "mps" or "cpu"
    amp: bool = True  # bf16 autocast on CUDA, and on CPUs with native bf16 (AVX512-BF16, AMX)
    seed: int = 0  # seeds parameters, dropout and batch order
    threads: int = 0  # CPU threads for torch (0 = torch's default)
    bucket: bool = True  # length-bucketed batches (False: random batches)
    probes: list[str] = field(default_factory=lambda: list(D2L_PROBES))  # snapshot sentences
    snapshot_models: int = 20  # models kept at snapshots (float16, 1 GB a run at most; 0 = none)
    align_weight: float = 0.0  # weight of the alignment loss on one head (Garg et al.; 0 = off)
    align_layer: int = 0  # decoder layer of the cross-attention head trained to align
    align_head: int = 0  # the head of that layer trained to align
    align_full_context: bool = False  # the head read with the whole target visible (Garg et al.)
    align_source: str = ""  # where the training pairs' alignments came from (core.train)

    def problems(self) -> list[str]:
        """Every reason these settings cannot train, each naming its field ([] when they can)."""
        return type_problems(self) or self.value_problems()

    def validate(self) -> None:
        """Raise ValueError with every one of ``problems()``."""
        if problems := self.problems():
            raise ValueError("Invalid training settings: " + "; ".join(problems))

    def value_problems(self) -> list[str]:
        """Why each field's value cannot train (fields of the right types only)."""
        problems = [
            f"{n} cannot be negative (got {getattr(self, n)})"
            for n in NOT_NEGATIVE
            if getattr(self, n) < 0
        ]
        problems += [
            f"{n} must be at least 1 (got {getattr(self, n)})"
            for n in AT_LEAST_ONE
            if getattr(self, n) < 1
        ]
        if not (self.epochs or self.max_steps or self.time_budget):
            problems.append("set a limit: epochs, max_steps or time_budget")
        if not math.isfinite(self.time_budget):
            problems.append(
                f"time_budget must be a finite number of seconds (got {self.time_budget})"
            )
        if not 0 <= self.align_weight < math.inf:
            problems.append(f"align_weight must be 0 (off) or positive (got {self.align_weight})")
        if not 0 < self.lr < math.inf:
            problems.append(f"lr must be positive and finite (got {self.lr})")
        if not 0 <= self.label_smoothing < 1:
            problems.append(f"label_smoothing must be in [0, 1) (got {self.label_smoothing})")
        if not self.grad_clip >= 0:
            problems.append(f"grad_clip must be 0 (off) or positive (got {self.grad_clip})")
        if self.threads < 0:
            problems.append(f"threads must be 0 (torch's default) or positive (got {self.threads})")
        if not 0 <= self.seed < 2**32:
            problems.append(f"seed must be between 0 and {2**32 - 1} (got {self.seed})")
        if self.schedule not in SCHEDULES:
            problems.append(f"unknown schedule '{self.schedule}'")
        if self.device not in DEVICES:
            problems.append(f"unknown device '{self.device}'")
        if len(self.align_source) > MAX_PROBE_CHARS:
            problems.append(f"align_source: at most {MAX_PROBE_CHARS} characters")
        return problems + too_large(self, TRAIN_UPPER) + self.probe_problems()

    def probe_problems(self) -> list[str]:
        """Why the probe sentences cannot be snapshotted at every evaluation."""
        problems = []
        if len(self.probes) > MAX_PROBES:
            problems.append(f"probes: at most {MAX_PROBES} sentences (got {len(self.probes)})")
        long = [p for p in self.probes if len(p) > MAX_PROBE_CHARS]
        if long:
            problems.append(
                f"probes: each at most {MAX_PROBE_CHARS} characters (one has {len(long[0])})"
            )
        return problems


MAX_PROBES = 8  # probe sentences snapshotted at each evaluation
MAX_PROBE_CHARS = 200  # characters of one probe sentence
TRAIN_UPPER = {  # the most each field may be (a large lr diverges, clearly; past these: typos)
    "lr": 1e6,
    "grad_clip": 1e6,
    "align_weight": 1e6,
    "epochs": 1_000_000,
    "max_steps": 10**9,
    "time_budget": 30 * 24 * 3600.0,  # seconds: 30 days
    "batch_size": 65_536,
    "batch_tokens": 10_000_000,
    "warmup_steps": 10**9,
    "eval_every": 10**9,
    "eval_sentences": 100_000,
    "log_every": 10**9,
    "threads": 1024,
    "align_layer": 1024,
    "align_head": 1024,
    "snapshot_models": 64,  # as many as the attention snapshots a run keeps
}
NOT_NEGATIVE = (
    "epochs",
    "max_steps",
    "time_budget",
    "warmup_steps",
    "batch_tokens",
    "align_layer",
    "align_head",
    "snapshot_models",
)  # TrainConfig fields: 0 or more
AT_LEAST_ONE = ("batch_size", "eval_every", "log_every", "eval_sentences")  # 1 or more


def learning_rate(step: int, cfg: TrainConfig, progress: float = 0.0) -> float:
    """Peak lr after linear warm-up, then constant, decaying as 1/sqrt(step), or "linear".

    "linear" decays to zero at the run's end: the peak times 1 - ``progress``, the fraction
    of the run done before this step (by steps or by time budget, whichever is further;
    ``Trainer.progress``), as in budgeted training (Li et al. 2020), never above the ramp."""
    step = max(step, 1)
    warm = min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    if cfg.schedule == "linear":  # the lower of the warm-up ramp and the decay: continuous
        return cfg.lr * min(warm, 1.0 - min(max(progress, 0.0), 1.0))
    if warm < 1.0:
        return cfg.lr * warm
    if cfg.schedule == "constant":
        return cfg.lr
    return cfg.lr * math.sqrt(max(cfg.warmup_steps, 1) / step)
