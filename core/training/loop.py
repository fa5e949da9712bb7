"""The training loop: Adam with warm-up and decay, label smoothing, clipping, bf16 autocast.

The Trainer knows nothing of files or the UI: it reports through callbacks
("step", "eval", "end"). ``core.train`` connects it to a run directory. Under torchrun
each process holds a Trainer with its ``World`` (core.training.distributed); rank 0 alone evaluates.
Shape key: B batch, S source length, T target length, V target vocabulary.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.corpus.batches import batch_indices, encode_pairs, pad_batch, prefetched, rank_groups
from core.corpus.splits import Corpus
from core.corpus.supervision import alignment_targets, piece_links
from core.corpus.vocab import Vocab
from core.model.align_loss import AlignTarget
from core.model.bleu import NO_BLEU
from core.model.checkpoints import all_finite
from core.model.transformer import Transformer
from core.training import distributed
from core.training.config import TrainConfig, learning_rate
from core.training.devices import autocast_dtype, pick_device
from core.training.distributed import World
from core.training.evaluation import evaluation_record, is_best
from core.training.monitor import layer_norms
from core.training.random_streams import kept_random_streams, rng_state, set_rng_state


@dataclass
class TrainState:
    """Where training stands; saved in checkpoints so a run can resume."""

    step: int = 0  # optimiser steps taken
    epoch: int = 0  # completed epochs
    batch_in_epoch: int = 0  # batches of the current epoch already used
    elapsed: float = 0.0  # seconds of training so far (across resumes)
    best_bleu: float = NO_BLEU  # best validation BLEU seen
    tokens: int = 0  # target tokens trained on
    world_size: int = 1  # training processes (batch_in_epoch counts their global batches)
    best_loss: float = math.inf  # best validation loss seen (the best model of a run without BLEU)


Callback = Callable[["Trainer", dict], None]


class Trainer:
    """Trains a Transformer on a Corpus and reports through callbacks."""

    def __init__(
        self,
        model: Transformer,
        corpus: Corpus,
        cfg: TrainConfig,
        state: TrainState | None = None,
        world: World | None = None,
        alignments: dict | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """``alignments`` (word links by pair, core.corpus.supervision) are needed when
        ``cfg.align_weight`` is set: they train one cross-attention head to align. ``clock``
        measures training time (the time budget and tokens/s); a test may give its own."""
        cfg.validate()
        if cfg.align_weight and alignments is None:
            raise ValueError("align_weight is set, but no alignments of the training pairs")
        self.cfg, self.corpus, self.world, self.clock = cfg, corpus, world or World(), clock
        self.device = distributed.device_of(self.world, pick_device(cfg.device))
        self.model = model.to(self.device)
        self.objective = (  # the loss of a step: the model's own, or through DDP
            distributed.data_parallel(model, self.world, self.device)
            if self.world.distributed
            else model.loss_terms
        )
        fused = self.device.type in ("cpu", "cuda")  # one kernel per step instead of many
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9, fused=fused
        )
        self.state = state or TrainState(world_size=self.world.size)
        self.callbacks: dict[str, list[Callback]] = {"batch": [], "step": [], "eval": [], "end": []}
        self.stop_asked = False  # this process was asked to stop (a signal, the STOP file)
        self.stop_agreed = False  # all processes stop: stop_asked somewhere, at agree()
        self.train_data, self.val_data = (  # encoded once: kept in the corpus (and its cache)
            corpus.ids.get(name) or encode_pairs(split, corpus.src_vocab, corpus.tgt_vocab)
            for name, split in (("train", corpus.train), ("val", corpus.val))
        )
        self.train_links = (  # each training pair's piece links, or None (not supervised)
            piece_links(corpus.train.pairs, corpus.src_vocab, corpus.tgt_vocab, alignments)
            if cfg.align_weight
            else None
        )
        self.task = corpus.summary.get("task", "translation")  # what the pairs teach
        self.val_groups = corpus.val.groups()[: cfg.eval_sentences] if self.translates else []
        self.amp_dtype = autocast_dtype(self.device) if cfg.amp else None
        # A GPU run makes its next batches in a thread and reads the device once a step; on
        # the CPU a batch takes < 1 ms of a 100+ ms step and a read waits for nothing.
        self.prefetch = self.device.type == "cuda"
        self.one_sync = self.device.type == "cuda" and not self.world.distributed
        self.rng: dict | None = None  # random streams to continue (a resumed run), else seeded
        self.diverged: dict | None = None  # {"diverged_at": step, "diverged": what} once NaN/inf
        self.window: list[dict] = []  # step results since the last metrics record
        self.window_start = 0.0  # training seconds (state.elapsed) when the window began
        self.rank_rngs: list[dict] = []  # every process's random streams, for the checkpoint
        self.epoch_lengths: dict[tuple[int, int], int] = {}  # (epoch, processes): batches
        if self.state.world_size != self.world.size:  # resumed with another number
            done = distributed.regrouped(self.state, cfg.batch_size, self.world)
            if cfg.batch_tokens:  # the same share of the epoch
                old = self.epoch_length(self.state.epoch, self.state.world_size)
                done = round(self.state.batch_in_epoch / old * self.steps_per_epoch)
            self.state.batch_in_epoch, self.state.world_size = done, self.world.size

    @property
    def translates(self) -> bool:
        """Whether the run learns to translate and its model writes translations (BLEU,
        examples, probe maps at evaluations; ``decodes``: a masked language model fills
        masks instead); a run that does not translate (the induction and lm tasks, an
        encoder) is measured by its circuits (``core.training.circuits``)."""
        return self.task == "translation" and self.model.decodes

    def on(self, event: str, fn: Callback) -> None:
        """Register a callback for "batch" (after every step), "step" (every log_every
        steps, with the window's metrics), "eval" or "end"."""
        self.callbacks[event].append(fn)

    def emit(self, event: str, info: dict) -> None:
        """Call every callback of an event."""
        for fn in self.callbacks[event]:
            fn(self, info)

    @property
    def steps_per_epoch(self) -> int:
        """Optimiser steps in the current epoch (each takes batch_size pairs on every process,
        or batch_tokens padded tokens)."""
        if self.cfg.batch_tokens:
            return self.epoch_length(self.state.epoch, self.world.size)
        return math.ceil(len(self.train_data) / (self.cfg.batch_size * self.world.size))

    def epoch_length(self, epoch: int, processes: int) -> int:
        """Batches of an epoch cut by token budget for that many processes (counted once)."""
        if (epoch, processes) not in self.epoch_lengths:
            lengths = [max(len(s), len(t)) for s, t in self.train_data]
            groups = batch_indices(
                lengths,
                self.cfg.batch_size * processes,
                True,
                self.cfg.seed * 1000 + epoch,
                self.cfg.bucket,
                max_tokens=self.cfg.batch_tokens * processes,
            )
            self.epoch_lengths[(epoch, processes)] = len(groups)
        return self.epoch_lengths[(epoch, processes)]

    @property
    def total_steps(self) -> int | None:
        """Step limit implied by epochs / max_steps (None if only a time budget).

        Counted from where the epochs stand (steps per epoch change with the processes)."""
        limits = [self.cfg.max_steps] if self.cfg.max_steps else []
        if self.cfg.epochs:
            spe = self.steps_per_epoch
            left = (self.cfg.epochs - self.state.epoch) * spe - self.state.batch_in_epoch
            limits.append(self.state.step + left)
        return min(limits) if limits else None

    def progress(self) -> float:
        """Fraction of the run done, by steps or by time, whichever is further."""
        done = []
        if self.total_steps:
            done.append(self.state.step / self.total_steps)
        if self.cfg.time_budget:
            done.append(self.state.elapsed / self.cfg.time_budget)
        return min(1.0, max(done, default=0.0))

    def finished(self) -> bool:
        """True once a step, epoch or time limit is reached."""
        epochs_done = bool(self.cfg.epochs) and self.state.epoch >= self.cfg.epochs
        return epochs_done or self.progress() >= 1.0

    def train_step(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        tokens: int = 0,
        step_tokens: int = 0,
        align: AlignTarget | None = None,
    ) -> dict:
        """One optimiser step on a batch src (B, S), tgt (B, T + 1), not taken unless finite.

        With several processes, ``tokens`` of the step's ``step_tokens`` are here: the loss,
        weighted by that share times the processes, gives (DDP averaging) the gradient of one
        process on the whole step. With ``align`` the loss adds ``align_weight`` times the
        alignment loss of its head; "loss" reports the cross-entropy alone."""
        src = src.to(self.device, non_blocking=True)  # from pinned memory on a GPU
        tgt = tgt.to(self.device, non_blocking=True)
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # (B, T) each
        lr = learning_rate(self.state.step + 1, self.cfg, self.progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
        ):
            loss, align_loss = self.objective(
                src, tgt_in, tgt_out, self.cfg.label_smoothing, self.to_device(align)
            )
        total = loss + self.cfg.align_weight * align_loss if align is not None else loss
        self.optimizer.zero_grad(set_to_none=True)
        if self.one_sync:
            total.backward()
            return self.step_on_device(loss, tgt_out, lr, align_loss if align else None)
        if self.world.distributed:
            (total * (self.world.size * tokens / step_tokens)).backward()
            value = distributed.sums(self.world, [loss.item() * tokens])[0] / step_tokens
        else:
            total.backward()
            value, step_tokens = loss.item(), int((tgt_out != Vocab.pad_id).sum())
        out = self.step_on_host(value, step_tokens, lr)
        if align is not None:
            out["align_loss"] = align_loss.item()
        return out

    def step_on_host(self, value: float, step_tokens: int, lr: float) -> dict:
        """Clip (when needed) and take the Adam step if the loss and gradient are finite."""
        clip = self.cfg.grad_clip or float("inf")
        total_norm = torch.nn.utils.get_total_norm(self.grads())
        norm = float(total_norm)
        # as clip_grad_norm_, which scales by min(1, clip / (norm + 1e-6)): no pass for a 1
        if clip < norm + 1e-6:
            torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), clip, total_norm)
        finite = math.isfinite(value) and math.isfinite(norm)  # the same on every process
        if finite:  # a NaN/inf step would poison the weights and Adam's moments
            self.optimizer.step()
        return {"loss": value, "lr": lr, "grad_norm": norm, "tokens": step_tokens, "finite": finite}

    def step_on_device(
        self, loss: torch.Tensor, tgt_out: torch.Tensor, lr: float, align_loss=None
    ) -> dict:
        """The same step as ``step_on_host``, queued without waiting for the device.

        Clipping always scales by min(1, clip / (norm + 1e-6)) (by exactly 1 when the norm
        is under the limit, so the gradients are unchanged), and the fused Adam kernel skips
        the update on the device when the loss or the norm is not finite (``found_inf``, as
        under a GradScaler). The loss, the norm, the token count (and the alignment loss)
        come back in one read."""
        total_norm = torch.nn.utils.get_total_norm(self.grads())
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grads_with_norm_(
                self.model.parameters(), self.cfg.grad_clip, total_norm
            )
        found_inf = ~(torch.isfinite(loss.detach()) & torch.isfinite(total_norm))
        self.optimizer.found_inf = found_inf.float()
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf
        read = [loss.detach().float(), total_norm.float(), (tgt_out != Vocab.pad_id).sum().float()]
        if align_loss is not None:
            read.append(align_loss.detach().float())
        value, norm, count, *aligned = torch.stack(read).tolist()  # the step's one host read
        finite = math.isfinite(value) and math.isfinite(norm)
        out = {"loss": value, "lr": lr, "grad_norm": norm, "tokens": int(count), "finite": finite}
        return {**out, "align_loss": aligned[0]} if aligned else out

    def grads(self) -> list[torch.Tensor]:
        """The parameters' gradients (those that have one)."""
        return [p.grad for p in self.model.parameters() if p.grad is not None]

    def to_device(self, align: AlignTarget | None) -> AlignTarget | None:
        """The alignment target on the training device."""
        if align is None:
            return None
        target = align.target.to(self.device, non_blocking=True)
        return AlignTarget(align.layer, align.head, target, align.full_context)

    def run_evaluation(self) -> None:
        """Evaluate (rank 0), update the best BLEU, tell the callbacks; NaN/inf weights diverge."""
        if not all_finite(self.model.state_dict()):
            self.diverged = {"diverged_at": self.state.step, "diverged": "weights"}
            return
        self.rank_rngs = distributed.gather(self.world, rng_state())
        if not self.world.is_main:
            return
        with kept_random_streams():  # a resumed run draws the same numbers as an unbroken one
            info = evaluation_record(self)
        info["is_best"] = is_best(info, self.state)
        if info["is_best"]:
            self.state.best_bleu = info.get("val_bleu", NO_BLEU)
            self.state.best_loss = info.get("val_loss", math.inf)
        self.emit("eval", info)

    def epoch_batches(self):
        """This process's (src, tgt, tokens, step_tokens, align) of the epoch, after those used."""
        it = rank_groups(
            self.train_data,
            self.cfg.batch_size,
            seed=self.cfg.seed * 1000 + self.state.epoch,
            bucket=self.cfg.bucket,
            rank=self.world.rank,
            world_size=self.world.size,
            max_tokens=self.cfg.batch_tokens,
        )
        for i, (mine, here, total) in enumerate(it):
            if i >= self.state.batch_in_epoch:
                src = pad_batch([self.train_data[j][0] for j in mine])  # (b, S)
                tgt = pad_batch([self.train_data[j][1] for j in mine])  # (b, T + 1)
                yield src, tgt, here, total, self.align_target(mine, src, tgt)

    def pinned(self, batches):
        """The batches in page-locked memory on a GPU (copied there without a wait)."""
        for src, tgt, tokens, step_tokens, align in batches:
            if self.device.type == "cuda":
                src, tgt = src.pin_memory(), tgt.pin_memory()
            yield src, tgt, tokens, step_tokens, align

    def align_target(self, mine: list[int], src, tgt) -> AlignTarget | None:
        """The supervised head's target distributions for these pairs (None: no supervision)."""
        if self.train_links is None:
            return None
        links = [self.train_links[j] for j in mine]
        target = alignment_targets(links, src.size(1), tgt.size(1) - 1)  # (b, T, S)
        full = self.cfg.align_full_context
        return AlignTarget(self.cfg.align_layer, self.cfg.align_head, target, full)

    def start_random_streams(self) -> None:
        """Continue a resumed run's saved random streams, or seed them (each rank its own)."""
        if self.rng is not None:
            set_rng_state(self.rng)
            return
        seed = self.cfg.seed + self.state.step + self.world.rank * distributed.RANK_SEED
        torch.manual_seed(seed)
        random.seed(seed)

    def agree(self) -> None:
        """Each step, all processes take rank 0's time and stop if any was asked to."""
        self.stop_agreed, self.state.elapsed = distributed.agree(
            self.world, self.stop_asked, self.state.elapsed
        )

    def must_stop(self) -> bool:
        """True once a limit is reached, a stop was asked for, or training diverged."""
        return self.finished() or self.stop_agreed or self.diverged is not None

    def run(self) -> str:
        """Train until a limit, a stop request or divergence (a NaN/inf loss, gradient or weight).

        Returns "finished", "stopped" or "diverged".
        """
        self.start_random_streams()
        self.model.train()
        self.window, self.window_start = [], self.state.elapsed
        self.agree()
        while not self.must_stop():
            self.run_epoch()
        if self.diverged is None and self.state.step % self.cfg.eval_every:
            self.run_evaluation()
        outcome = "diverged" if self.diverged else "finished" if self.finished() else "stopped"
        self.rank_rngs = distributed.gather(self.world, rng_state())
        self.emit("end", {"outcome": outcome, "step": self.state.step, **(self.diverged or {})})
        return outcome

    def run_epoch(self) -> None:
        """Train on the rest of the current epoch, or until training must stop."""
        t_last = self.clock()
        batches = self.epoch_batches()
        if self.prefetch:  # made ahead by a thread (a GPU run)
            batches = prefetched(self.pinned(batches))
        for src, tgt, tokens, step_tokens, align in batches:
            out = self.train_step(src, tgt, tokens, step_tokens, align)
            if not out["finite"]:
                what = "gradient norm" if math.isfinite(out["loss"]) else "loss"
                self.diverged = {"diverged_at": self.state.step + 1, "diverged": what}
                return
            self.state.elapsed += self.clock() - t_last
            self.after_step(out)
            t_last = self.clock()  # records and evaluations are not training time
            self.agree()
            if self.must_stop():
                return
        self.state.epoch += 1
        self.state.batch_in_epoch = 0

    def after_step(self, out: dict) -> None:
        """Count a step taken; record metrics every log_every and evaluate every eval_every."""
        self.state.step += 1
        self.state.batch_in_epoch += 1
        self.state.tokens += out["tokens"]
        self.window.append(out)
        if self.callbacks["batch"]:
            self.emit("batch", {"step": self.state.step})
        if self.state.step % self.cfg.log_every == 0:
            self.emit("step", self._summarise(self.window, self.state.elapsed - self.window_start))
            self.window, self.window_start = [], self.state.elapsed
        if self.state.step % self.cfg.eval_every == 0:
            self.run_evaluation()

    def _summarise(self, window: list[dict], seconds: float) -> dict:
        """Mean metrics of the steps of a window that took ``seconds`` of training."""
        n = len(window)
        aligned = [r["align_loss"] for r in window if "align_loss" in r]
        return {
            **({"align_loss": sum(aligned) / len(aligned)} if aligned else {}),
            "step": self.state.step,
            "epoch": self.state.epoch + self.state.batch_in_epoch / max(self.steps_per_epoch, 1),
            "loss": sum(r["loss"] for r in window) / n,
            "lr": window[-1]["lr"],
            "grad_norm": sum(r["grad_norm"] for r in window) / n,
            "tokens_per_s": sum(r["tokens"] for r in window) / seconds if seconds > 0 else None,
            "layer_norms": layer_norms(self.model),  # weights, and the last step's gradients
            "elapsed": self.state.elapsed,
            "progress": self.progress(),
        }
