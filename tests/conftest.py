"""Shared fixtures: a tiny hand-written corpus and a model trained on it in seconds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny.tsv"
FRA_ENG = Path(os.environ.get("FRA_ENG_ZIP", ROOT.parent / "shared" / "data" / "fra-eng.zip"))

TINY_ARGS = [
    "--data",
    str(TINY),
    "--preset",
    "d2l",
    "--split",
    "head",
    "--num-train",
    "0",
    "--min-freq",
    "1",
    "--d-model",
    "64",
    "--num-heads",
    "4",
    "--d-ff",
    "128",
    "--dropout",
    "0",
    "--lr",
    "0.003",
    "--label-smoothing",
    "0",
    "--epochs",
    "150",
    "--eval-every",
    "50",
    "--log-every",
    "10",
    "--no-progress",
    "--seed",
    "0",
]


def train_tiny(out: Path, *extra: str) -> int:
    """Train the tiny model into ``out`` with the project's own command; returns its code."""
    from core.train import main

    return main([*TINY_ARGS, "--out", str(out), *extra])


@pytest.fixture(scope="session")
def tiny_corpus() -> Path:
    """Path of the hand-written 30-pair corpus."""
    return TINY


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A finished run directory of the tiny model (trained once per session)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert train_tiny(out) == 0
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_run) -> Path:
    """The tiny model's last checkpoint."""
    return tiny_run / "last.pt"


@pytest.fixture(scope="session")
def fra_eng() -> Path:
    """The shared fra-eng.zip, or skip when it is absent."""
    if not FRA_ENG.is_file():
        pytest.skip(f"fra-eng.zip not found at {FRA_ENG} (set FRA_ENG_ZIP)")
    return FRA_ENG


def run_page_script(page: str, query: dict | None = None):
    """Run a page script on its own once (with URL query parameters); return the AppTest."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / page), default_timeout=60)
    at.query_params.update(query or {})
    return at.run()


def assert_clean(at) -> None:
    """No exception reached the page."""
    assert not at.exception, [e.message for e in at.exception]


def fake_trainer(run_path):
    """A process whose command line looks like ``python -m core.train --out RUN`` (sleeps)."""
    import subprocess
    import sys

    code = "import time; time.sleep(60)"
    argv = [sys.executable, "-c", code, "-m", "core.train", "--out", str(run_path)]
    return subprocess.Popen(argv)


def _free_port() -> int:
    """A free TCP port on the loopback interface."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(runs: Path):
    """Start ``streamlit run app.py`` on a free loopback port; return (process, base URL).

    Skips when Chromium or Playwright is missing; CI installs both.
    """
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request

    if not shutil.which("chromium") and not Path("/usr/bin/chromium").exists():
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    port = _free_port()
    env = {**os.environ, "ATTENTION_STUDIO_RUNS": str(runs)}
    with open(runs / "server.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless=true",
                "--server.address=127.0.0.1",
                f"--server.port={port}",
                "--server.fileWatcherType=none",
                "--browser.gatherUsageStats=false",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    pytest.fail("streamlit did not start: " + (runs / "server.log").read_text()[-2000:])


def stop_server(proc) -> None:
    """Terminate a server started by start_server (its whole process group)."""
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """One app server for the browser tests; runs go to a temporary directory."""
    runs = tmp_path_factory.mktemp("browser-runs")
    proc, url = start_server(runs)
    yield {"url": url, "runs": runs}
    stop_server(proc)


@pytest.fixture
def browser_page(app_server):
    """A Playwright page in headless Debian Chromium (never downloads a browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield page
        browser.close()


ARTIFACTS = ROOT / "tests" / "artifacts"  # screenshots saved by browser tests (gitignored)


# ---------------------------------------------------------------- Translate / Attention pages


@pytest.fixture
def studio_dirs(tmp_path, tiny_checkpoint, tiny_run, monkeypatch) -> dict:
    """Checkpoints holding the tiny model as ``fra-eng-small.pt`` and runs holding the tiny run.

    ATTENTION_STUDIO_CHECKPOINTS and ATTENTION_STUDIO_RUNS point at them for the test.
    """
    import shutil

    ckpts, runs = tmp_path / "checkpoints", tmp_path / "runs"
    ckpts.mkdir()
    shutil.copy(tiny_checkpoint, ckpts / "fra-eng-small.pt")
    shutil.copytree(tiny_run, runs / tiny_run.name)
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(ckpts))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(runs))
    return {"checkpoints": ckpts, "runs": runs, "run": runs / tiny_run.name}


@pytest.fixture(scope="session")
def wide_checkpoint(tmp_path_factory, tiny_checkpoint) -> Path:
    """An untrained 6 + 6 block, 8-head model with the tiny vocabularies (for size tests)."""
    import torch

    from core.checkpoint import load_checkpoint, save_checkpoint
    from core.model import ModelConfig, Transformer

    tiny = load_checkpoint(tiny_checkpoint)
    cfg = ModelConfig(
        len(tiny.src_vocab),
        len(tiny.tgt_vocab),
        d_model=64,
        num_heads=8,
        num_encoder_layers=6,
        num_decoder_layers=6,
        d_ff=64,
        dropout=0.0,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("wide") / "wide-6x8.pt"
    save_checkpoint(
        path,
        Transformer(cfg),
        tiny.src_vocab,
        tiny.tgt_vocab,
        data_config=tiny.meta["data_config"],
        state={"step": 0, "best_bleu": -1.0},
    )
    return path


# ----------------------------------------------------------------------------- jobs (Train page)

TINY_SETTINGS = {  # TINY_ARGS as core.jobs overrides, with 6 pairs held out for validation
    "data": {"source": str(TINY), "split": "head", "num_train": 24, "num_val": 6, "min_freq": 1},
    "model": {"d_model": 64, "num_heads": 4, "d_ff": 128, "dropout": 0.0},
    "train": {
        "lr": 0.003,
        "label_smoothing": 0.0,
        "epochs": 100000,
        "eval_every": 4,
        "log_every": 2,
        "seed": 0,
        "eval_sentences": 6,
        "probes": ["go ."],
    },
}


@pytest.fixture
def tiny_settings() -> dict:
    """Overrides of the d2l preset that train the tiny model until stopped (a fresh copy)."""
    import copy

    return copy.deepcopy(TINY_SETTINGS)


def _kill_trainers(root: Path) -> None:
    """SIGKILL every live trainer of the runs under ``root`` (test clean-up)."""
    import signal

    from core import jobs

    for path in Path(root).iterdir() if Path(root).is_dir() else []:
        pid = (jobs.read_json(path / jobs.JOB_FILE, {}) or {}).get("pid")
        if path.is_dir() and jobs.is_trainer(pid, path):
            os.kill(pid, signal.SIGKILL)
            child = jobs._CHILDREN.pop(pid, None)
            if child is not None:
                child.wait(timeout=10)


@pytest.fixture
def jobs_env(tmp_path, monkeypatch):
    """Runs and checkpoints in a temporary directory; live trainers are killed afterwards."""
    runs, ckpts = tmp_path / "runs", tmp_path / "checkpoints"
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(runs))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(ckpts))
    monkeypatch.setenv("ATTENTION_STUDIO_MAX_CPU_JOBS", "1")
    yield {"runs": runs, "checkpoints": ckpts}
    _kill_trainers(runs)


@pytest.fixture
def kill_trainers():
    """kill_trainers(runs_dir): SIGKILL the live trainers of the runs there (clean-up)."""
    return _kill_trainers


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _make_run(
    runs: Path, run_id: str, status: dict, job: dict | None = None, checkpoint: bool = False
):
    """A run directory written by hand: status.json, job.json and optionally last/best.pt."""
    import time

    from core import jobs
    from core.checkpoint import save_checkpoint
    from core.data import Vocab
    from core.model import ModelConfig, Transformer
    from core.runs import RunDir

    rd = RunDir(Path(runs) / run_id)
    rd.create()
    rd.write_status(**status)
    jobs.write_json(
        rd.path / jobs.JOB_FILE,
        {"run_id": run_id, "created_at": time.time(), "launched_at": 0, **(job or {})},
    )
    if checkpoint:
        cfg = ModelConfig(src_vocab_size=6, tgt_vocab_size=6, d_model=8, num_heads=2, d_ff=16)
        vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "go", "va"])
        rd.write_config({"data": {}, "model": {}, "train": {}})
        for path in (rd.last, rd.best):
            save_checkpoint(
                path,
                Transformer(cfg),
                vocab,
                vocab,
                run=run_id,
                state={"step": 7, "best_bleu": 12.5},
                optimizer={"state": {}},
            )
    return rd


@pytest.fixture
def make_run():
    """make_run(runs_root, run_id, status, job=None, checkpoint=False) -> RunDir, by hand."""
    return _make_run


@pytest.fixture
def dead_pid():
    """dead_pid() -> the pid of a process that has already exited."""
    return _dead_pid
