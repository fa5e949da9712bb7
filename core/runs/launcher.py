"""A run's N training processes on this machine, their rendezvous bound to loopback.

``python -m core.train --processes N ...`` (what the app launches for a multi-process run)
makes this process the agent: it opens the rendezvous store on 127.0.0.1 only and starts
N copies of ``python -m core.train`` (each in a session of its own), told their place as
torchrun would tell them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). torchrun
itself (``torch.distributed.run --standalone``) opens its store on every interface, where
any host that reaches the machine could write keys; its Gloo and NCCL sockets follow the
host name's address. Here the collectives are bound to the loopback interface too.
Several machines: run torchrun yourself (docs/training.md, "Training with several processes").

The agent passes SIGTERM on to every worker; when one worker fails, the others are stopped
(SIGTERM, then SIGKILL after ``GRACE_S``) and the agent exits with the failed worker's code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import torch.distributed as dist

GRACE_S = 30.0  # workers still running this long after being asked to stop are killed
POLL_S = 0.1  # how often the agent looks at its workers
LOOPBACK = "127.0.0.1"


def loopback_interface() -> str:
    """The name of this machine's loopback interface ("lo" on Linux, "lo0" on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n.startswith("lo")), "lo")


def worker_env(processes: int, port: int, rank: int, env=None) -> dict[str, str]:
    """The environment of worker ``rank``: its place, the store's address, loopback sockets."""
    env = dict(os.environ if env is None else env)
    interface = loopback_interface()
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(processes),
        LOCAL_WORLD_SIZE=str(processes),
        GROUP_RANK="0",
        MASTER_ADDR=LOOPBACK,
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",  # connect to the agent's store, never open one
        TORCHELASTIC_RESTART_COUNT="0",
        GLOO_SOCKET_IFNAME=interface,
        NCCL_SOCKET_IFNAME=interface,
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: one thread each unless told
    return env


def loopback_store(processes: int) -> tuple[dist.TCPStore, socket.socket]:
    """The rendezvous store, listening on 127.0.0.1 only, and its socket (keep it open).

    TCPStore binds every interface whatever host it is given; handed a socket already
    bound to loopback (``master_listen_fd``) it listens on that one.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    sock.listen(128)
    store = dist.TCPStore(
        LOOPBACK,
        sock.getsockname()[1],
        world_size=processes,
        is_master=True,
        wait_for_workers=False,
        master_listen_fd=sock.fileno(),
    )
    return store, sock


def without_processes(argv: list[str]) -> list[str]:
    """The command line of a worker: the agent's, less its ``--processes`` flag."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            out.append(arg)
    return out


def launch(argv: list[str], processes: int) -> int:
    """Run ``python -m core.train ARGV`` as ``processes`` workers; the first failure's code."""
    store, sock = loopback_store(processes)
    port = sock.getsockname()[1]
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "core.train", *without_processes(argv)],
            env=worker_env(processes, port, rank),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        for rank in range(processes)
    ]
    asked: list[float] = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(time.time()))
    try:
        return supervise(workers, asked)
    finally:
        del store  # it owns the listening socket (master_listen_fd) and closes it
        sock.detach()  # so never close that fd again (EBADF, or someone else's fd)


def supervise(workers: list[subprocess.Popen], asked: list[float]) -> int:
    """Wait for the workers; pass a stop on; stop them all when one fails; the exit code."""
    stopping_since, failure = None, 0
    while True:
        codes = [w.poll() for w in workers]
        failure = failure or next((c for c in codes if c), 0)  # the first to fail, kept
        if all(c is not None for c in codes):
            return failure if failure >= 0 else 128 - failure  # killed by a signal: 128 + it
        if (asked or failure) and stopping_since is None:
            stopping_since = time.time()
            _signal_all(workers, signal.SIGTERM)
        if stopping_since is not None and time.time() - stopping_since > GRACE_S:
            _signal_all(workers, signal.SIGKILL)
        time.sleep(POLL_S)


def _signal_all(workers: list[subprocess.Popen], sig: int) -> None:
    """Send ``sig`` to every worker still running."""
    for w in workers:
        if w.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, sig)
