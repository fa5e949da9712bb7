"""Several training processes (torchrun): ranks, the process group, DDP, agreement.

``python -m core.train --processes N`` (``core.runs.launcher``, one machine) or ``torchrun
--nproc-per-node N -m core.train ...`` starts N copies of the trainer, each told its place
by the environment (RANK, WORLD_SIZE, LOCAL_RANK). Without either
(WORLD_SIZE unset or 1) ``World`` is rank 0 of 1 and every helper here does nothing, so
the single-process path is unchanged. Collectives of a few numbers go over Gloo on the
CPU; the gradients of a CUDA model over NCCL (DistributedDataParallel picks it).
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist
from torch import nn

TIMEOUT_S = 600.0  # longest a process waits for the others (rank 0's evaluations included)
RANK_SEED = 1_000_003  # a rank's dropout stream is seeded with seed + step + rank * this


class DistributedError(ValueError):
    """The training processes cannot work together; the message says why and what to do."""


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (alone: rank 0 of 1)."""

    rank: int = 0  # 0 .. size - 1; rank 0 writes the run's files
    size: int = 1  # number of training processes (torchrun's WORLD_SIZE)
    local_rank: int = 0  # index on this machine (picks the GPU)

    @property
    def is_main(self) -> bool:
        """True for the process that writes files, evaluates and decides the time budget."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when there are several processes."""
        return self.size > 1


def world_from_env(env=None) -> World:
    """The World torchrun describes in the environment (rank 0 of 1 without it)."""
    env = os.environ if env is None else env
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        rank, local = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
    except ValueError as e:
        raise DistributedError(
            f"torchrun's RANK, WORLD_SIZE or LOCAL_RANK is not a number: {e}"
        ) from None
    if size < 1 or not 0 <= rank < size:
        raise DistributedError(f"rank {rank} of {size} processes is impossible")
    return World(rank, size, local)


def backend() -> str:
    """NCCL for CUDA tensors where a GPU exists, Gloo for CPU tensors (always)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def start(world: World, timeout_s: float = TIMEOUT_S) -> None:
    """Join the process group (no-op alone). A dead peer makes the others' next collective
    raise at once, a hung one after ``timeout_s``: no process waits for ever."""
    if world.distributed and not dist.is_initialized():
        dist.init_process_group(
            backend(), timeout=datetime.timedelta(seconds=timeout_s), init_method="env://"
        )


def finish(world: World) -> None:
    """Leave the process group after a clean end (a failed run just exits)."""
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End this torchrun process at once with ``code``, without Python's teardown.

    DistributedDataParallel keeps the Gloo process group, and so its worker threads, alive
    past destroy_process_group (torch 2.13). A worker still letting go of the last
    collective's tensors then needs the GIL while the interpreter is being torn down, and
    the process aborts ("terminate called without an active exception", SIGABRT: 3 of 30
    launches here). Every file a run writes is closed by now; only the standard streams are
    not.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def device_of(world: World, device: torch.device) -> torch.device:
    """The device this rank trains on: its own GPU (LOCAL_RANK) when training on CUDA."""
    if not world.distributed or device.type != "cuda":
        return device
    if world.local_rank >= torch.cuda.device_count():
        raise DistributedError(
            f"process {world.local_rank} of this machine has no GPU of its own: "
            f"{torch.cuda.device_count()} GPU(s) here; start at most that many processes "
            "per node (--nproc-per-node)"
        )
    torch.cuda.set_device(world.local_rank)
    return torch.device("cuda", world.local_rank)


def all_true(world: World, ok: bool) -> bool:
    """True on every process when ``ok`` is true on all of them."""
    if not world.distributed:
        return ok
    flag = torch.tensor([0.0 if ok else 1.0], dtype=torch.float64)
    dist.all_reduce(flag)
    return float(flag) == 0.0


def sums(world: World, values: list[float]) -> list[float]:
    """Each value summed over the processes (float64 on the CPU; a NaN anywhere stays NaN)."""
    if not world.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def agree(world: World, stop: bool, elapsed: float) -> tuple[bool, float]:
    """(whether any process asked to stop, rank 0's training seconds), the same everywhere."""
    if not world.distributed:
        return stop, elapsed
    stopping, seconds = sums(world, [float(stop), elapsed if world.is_main else 0.0])
    return stopping > 0, seconds


def gather(world: World, obj) -> list:
    """Every process's ``obj`` in rank order (a picklable value; alone: [obj])."""
    if not world.distributed:
        return [obj]
    out = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def from_main(world: World, obj):
    """Rank 0's ``obj`` on every process (a picklable value; alone: ``obj`` itself)."""
    if not world.distributed:
        return obj
    box = [obj if world.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(world: World) -> None:
    """Wait until every process gets here."""
    if world.distributed:
        dist.barrier()


@contextlib.contextmanager
def local_first(world: World) -> Iterator[None]:
    """Run a block on each machine's first process before the others (one download each)."""
    if world.local_rank != 0:
        barrier(world)
    yield
    if world.local_rank == 0:
        barrier(world)


class TransformerLoss(nn.Module):
    """The model's training loss as a forward pass, so DistributedDataParallel can wrap it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src, tgt_in, tgt_out, label_smoothing: float, align=None):
        """(mean cross-entropy over this rank's real target tokens, alignment loss): the
        model's ``loss_terms``."""
        return self.model.loss_terms(src, tgt_in, tgt_out, label_smoothing, align)


def data_parallel(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    """The model's loss wrapped in DistributedDataParallel (gradients averaged over ranks).

    The wrapper owns no weights: the optimiser, checkpoints and decoding use ``model``.
    DDP copies rank 0's weights to every rank when it is built.
    """
    from torch.nn.parallel import DistributedDataParallel

    # the positional encodings never change: no copy of them before each step
    # (torch 2.13 renamed broadcast_buffers; older builds, e.g. on a GPU machine, have the old)
    renamed = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    no_sync = {"forward_sync_buffers" if renamed else "broadcast_buffers": False}
    return DistributedDataParallel(
        TransformerLoss(model),
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=True,  # no second copy of the gradients
        **no_sync,
    )


def regrouped(state, batch_size: int, world: World) -> int:
    """batch_in_epoch for ``world`` of a run saved by ``state.world_size`` processes mid-epoch.

    As many pairs are skipped as were used; the rest of that epoch is cut into other batches.
    """
    used = state.batch_in_epoch * batch_size * state.world_size
    return round(used / (batch_size * world.size))


def describe(world: World, device: str, devices: list[str]) -> dict:
    """status.json fields of a run: world size, the devices of all ranks, one summary line."""
    if not world.distributed:
        return {"world_size": 1, "devices": [device], "device": device}
    same = len(set(devices)) == 1
    summary = f"{devices[0]} × {world.size} processes" if same else " + ".join(devices)
    return {"world_size": world.size, "devices": devices, "device": summary}
