"""What the app writes stays out of the checkout's changes: a model saved from the Train page
left untracked files in `git status`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import ROOT


def ignored(path: str) -> bool:
    """Whether git ignores ``path`` (relative to the repository root)."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True
    )
    return done.returncode == 0


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_saved_models_are_ignored_and_the_shipped_one_is_not():
    assert ignored("checkpoints/my-model.pt") and ignored("checkpoints/my-model.history")
    assert ignored("checkpoints/opus-mt-en-fr/config.json")  # a Hugging Face folder put there
    assert not ignored("checkpoints/fra-eng-small.pt")
    assert not ignored("checkpoints/fra-eng-small.history")
    assert ignored("runs/20261126-064141-d2l/last.pt")
