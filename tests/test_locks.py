"""Tests for core.runs.locks: the GPU slots are exclusive and die with their holder."""

from __future__ import annotations

import os
import subprocess

import pytest

from core.runs.locks import acquire_gpu_lock
from core.runs.run_dir import RunError


def test_gpu_lock_is_exclusive_and_released_with_its_holder(jobs_env):
    fd = acquire_gpu_lock("first", 1)
    with pytest.raises(RunError, match="GPU is busy: run first"):
        acquire_gpu_lock("second", 1)
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))  # as a trainer holds it
    os.close(fd)
    try:
        with pytest.raises(RunError, match="GPU is busy"):
            acquire_gpu_lock("second", 1)
    finally:
        holder.kill()
        holder.wait()
    os.close(acquire_gpu_lock("second", 1))  # a dead holder's lock is free again
