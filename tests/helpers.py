"""Test utilities: the one tiny configuration, tiny runs, page runners, servers, fake runs.

Fixtures (tests/conftest.py) are thin wrappers around these; tests import from here.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from core.training.settings import to_flags

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny.tsv"  # 30 hand-written sentence pairs
FRA_ENG = Path(os.environ.get("FRA_ENG_ZIP", ROOT.parent / "shared" / "data" / "fra-eng.zip"))
SHIPPED = ROOT / "checkpoints" / "fra-eng-small.pt"  # the model the app ships with
ARTIFACTS = ROOT / "tests" / "artifacts"  # screenshots saved by browser tests (gitignored)
CHROMIUM = "/usr/bin/chromium"

# ----------------------------------------------------------------------------- tiny config

TINY_PRESET = "d2l"  # the preset the tiny configuration overrides
TINY_BASE = {  # the tiny model on the tiny corpus: learns it in seconds on a CPU
    "data": {"source": str(TINY), "split": "head", "min_freq": 1},
    "model": {"d_model": 64, "num_heads": 4, "d_ff": 128, "dropout": 0.0},
    "train": {"lr": 0.003, "label_smoothing": 0.0, "seed": 0},
}


def tiny_config(**groups: dict) -> dict[str, dict]:
    """A fresh copy of TINY_BASE with ``groups`` ({"data"|"model"|"train": {...}}) applied."""
    config = copy.deepcopy(TINY_BASE)
    for group, values in groups.items():
        config[group].update(copy.deepcopy(values))
    return config


TINY_RUN = tiny_config(  # the command-line run: all 30 pairs, 150 epochs, then it finishes
    data={"num_train": 0},
    train={"epochs": 150, "eval_every": 50, "log_every": 10},
)
TINY_JOB = tiny_config(  # the app's job: 6 pairs held out for validation, trains until stopped
    data={"num_train": 24, "num_val": 6},
    train={
        "epochs": 100000,
        "eval_every": 4,
        "log_every": 2,
        "eval_sentences": 6,
        "probes": ["go ."],
    },
)
TINY_ARGS = ["--preset", TINY_PRESET, *to_flags(TINY_RUN), "--no-progress"]  # core.train flags


def form_values(config: dict[str, dict]) -> dict[str, object]:
    """The Train form's values of a configuration: {"group.field": value} (no data source).

    Lists become one item per line, as the form's text areas hold them.
    """
    return {
        f"{group}.{name}": "\n".join(value) if isinstance(value, list) else value
        for group, values in config.items()
        for name, value in values.items()
        if (group, name) != ("data", "source")
    }


def gold_files(folder: Path, pairs: str, gold: str) -> tuple[Path, Path]:
    """(pairs file, gold file) written in ``folder``: ``english ||| french`` lines and their
    Pharaoh links."""
    paths = folder / "pairs.txt", folder / "gold.txt"
    for path, text in zip(paths, (pairs, gold)):
        path.write_text(text, encoding="utf-8")
    return paths


def train_tiny(out: Path, *extra: str) -> int:
    """Train the tiny model into ``out`` with the project's own command; returns its code."""
    from core.train import main

    return main([*TINY_ARGS, "--out", str(out), *extra])


# ----------------------------------------------------------------------------- waiting


def wait_for(predicate, timeout: float = 90.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def logged_step(run: Path) -> int:
    """The last step a run's trainer wrote to metrics.jsonl (0 before its first record)."""
    import json

    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    steps = [0]
    for line in lines:
        try:
            steps.append(int(json.loads(line).get("step", 0)))
        except (ValueError, AttributeError, TypeError):
            continue  # a half-written last line
    return max(steps)


def wait_for_logged_step(run: Path, step: int, timeout: float = 240.0) -> None:
    """Wait until the run's trainer logged ``step`` (on disk, not on a page); fail with the
    end of its train.log, so a trainer that failed or crawled says which."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if logged_step(run) >= step:
            return
        time.sleep(0.5)
    try:
        log = (run / "train.log").read_text(errors="replace")[-2000:]
    except OSError:
        log = "(no train.log)"
    pytest.fail(f"step {step} not logged in {timeout:.0f} s (at {logged_step(run)}); log:\n{log}")


# ----------------------------------------------------------------------------- pages (AppTest)


def run_app():
    """The whole app (studio.py, the script app.py serves), run once on its Home page; returns
    the AppTest."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "studio.py"), default_timeout=60)
    return at.run()


def run_page_script(page: str, query: dict | None = None):
    """Run a page script on its own once (with URL query parameters); return the AppTest."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / page), default_timeout=60)
    at.query_params.update(query or {})
    return at.run()


def failure_shot(page, name: str) -> None:
    """A full-page screenshot of a browser test that failed, in ARTIFACTS as ``name``.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@contextlib.contextmanager
def heavy_slot_held(wait_s: float = 0.3):
    """Another session holds the server's heavy-work slot; a page waits ``wait_s`` seconds in
    line, then says to come back. Yields the server's queue."""
    from pages.ui import heavy_work

    queue = heavy_work.heavy_queue()
    ticket = queue.join("session:another")
    assert ticket.started is not None, "the heavy slot was not free"
    before, heavy_work.MAX_WAIT_S = heavy_work.MAX_WAIT_S, wait_s
    try:
        yield queue
    finally:
        heavy_work.MAX_WAIT_S = before
        queue.leave(ticket)


def assert_clean(at) -> None:
    """No exception reached the page."""
    assert not at.exception, [e.message for e in at.exception]


def plain(markdown: str) -> str:
    """Markdown as it reads on the page: the backslash escapes and word joiners of
    pages.ui.text.md removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


# ----------------------------------------------------------------------------- model files


def setup_studio_dirs(root: Path, tiny_checkpoint: Path, tiny_run: Path) -> dict:
    """checkpoints/ holding the tiny model as the shipped one, runs/ holding the tiny run."""
    from core.runs.catalogue import SHIPPED_NAME

    ckpts, runs = root / "checkpoints", root / "runs"
    ckpts.mkdir()
    shutil.copy(tiny_checkpoint, ckpts / SHIPPED_NAME)
    shutil.copytree(tiny_run, runs / tiny_run.name)
    return {"checkpoints": ckpts, "runs": runs, "run": runs / tiny_run.name}


def empty_studio_dirs(root: Path, monkeypatch) -> dict:
    """Empty checkpoints/ and runs/ under ``root``, the app's folders for the test
    (ATTENTION_STUDIO_CHECKPOINTS / _RUNS point at them)."""
    dirs = {"checkpoints": root / "checkpoints", "runs": root / "runs"}
    for name, path in dirs.items():
        path.mkdir()
        monkeypatch.setenv(f"ATTENTION_STUDIO_{name.upper()}", str(path))
    return dirs


VAL_DATA = {  # tiny.tsv as a checkpoint records it (by name and SHA-1), 6 pairs for validation
    "source": "tiny.tsv",
    "source_sha1": hashlib.sha1(TINY.read_bytes()).hexdigest(),
    "split": "head",
    "num_train": 24,
    "num_val": 6,
    "min_freq": 1,
}


def with_validation_split(checkpoint: Path, path: Path) -> Path:
    """A copy of ``checkpoint`` whose data settings keep the last 6 pairs for validation."""
    from core.model.checkpoints import atomic_save, read_checkpoint

    ckpt = read_checkpoint(checkpoint)
    ckpt["data_config"] = dict(VAL_DATA)
    atomic_save(ckpt, path)
    return path


def make_wide_checkpoint(path: Path, tiny_checkpoint: Path) -> Path:
    """An untrained 6 + 6 block, 8-head model with the tiny vocabularies (for size tests)."""
    from core.model.checkpoints import save_checkpoint
    from core.model.config import ModelConfig
    from core.model.studio_loading import load_checkpoint
    from core.model.transformer import Transformer

    tiny = load_checkpoint(tiny_checkpoint)
    sizes = {"d_model": 64, "num_heads": 8, "num_encoder_layers": 6, "num_decoder_layers": 6}
    cfg = ModelConfig(len(tiny.src_vocab), len(tiny.tgt_vocab), d_ff=64, dropout=0.0, **sizes)
    torch.manual_seed(0)
    save_checkpoint(
        path,
        Transformer(cfg),
        tiny.src_vocab,
        tiny.tgt_vocab,
        data_config=tiny.meta["data_config"],
        state={"step": 0, "best_bleu": -1.0},
    )
    return path


# ----------------------------------------------------------------------------- runs by hand


def fake_trainer(run_path, ignore_sigterm: bool = False):
    """A process whose command line looks like ``python -m core.train --out RUN`` (sleeps).

    With ``ignore_sigterm`` it ignores SIGTERM, like a hung trainer.
    """
    code = "print('ready', flush=True); import time; time.sleep(60)"
    if ignore_sigterm:
        code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + code
    argv = [sys.executable, "-c", code, "-m", "core.train", "--out", str(run_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its signal handling is in place
    return proc


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def make_run(
    runs: Path, run_id: str, status: dict, job: dict | None = None, checkpoint: bool = False
):
    """A run directory written by hand: status.json, job.json and optionally last/best.pt."""
    from core.corpus.vocab import Vocab
    from core.model.checkpoints import save_checkpoint
    from core.model.config import ModelConfig
    from core.model.transformer import Transformer
    from core.runs.run_dir import RunDir, write_json

    rd = RunDir(Path(runs) / run_id)
    rd.create()
    rd.write_status(**status)
    write_json(
        rd.job, {"run_id": run_id, "created_at": time.time(), "launched_at": 0, **(job or {})}
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


def run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root`` (hidden lock and upload folders excluded)."""
    return [p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".")]


def kill_trainers(root: Path) -> None:
    """SIGKILL every live trainer of the runs under ``root`` (test clean-up)."""
    from core.runs import processes
    from core.runs.run_dir import RunDir, read_json

    for path in run_dirs(root) if Path(root).is_dir() else []:
        job = read_json(RunDir(path).job, {}) or {}
        pid = job.get("pid")
        if processes.signal_trainer(pid, path, job.get("identity"), signal.SIGKILL):
            child = processes._CHILDREN.pop(pid, None)
            if child is not None:
                child.wait(timeout=10)


# ----------------------------------------------------------------------------- app server


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_address() -> str | None:
    """One of this machine's own addresses that is not loopback (the one its default route
    leaves from; nothing is sent), or None where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith(("127.", "0.")) else address


def start_server(
    runs: Path, script: str = "app.py", env: dict | None = None, uvicorn_host: str | None = None
):
    """Start ``streamlit run SCRIPT`` on a free loopback port; return (process, base URL).

    ``env``: more environment variables of the server (e.g. how it knows its users).
    ``uvicorn_host``: serve ``app:app`` with ``uvicorn --host HOST`` instead, as an operator
    may (Streamlit's ``server.address`` then still reads 127.0.0.1). Skips when Chromium or
    Playwright is missing; CI installs both.
    """
    if not shutil.which("chromium") and not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    port = free_port()
    env = {
        **os.environ,
        "ATTENTION_STUDIO_RUNS": str(runs),
        "ATTENTION_STUDIO_DATA": str(TINY.parent),
        "ATTENTION_STUDIO_POLL_SECONDS": "1",  # live runs polled every second, not every 5
        **(env or {}),
    }
    with open(runs / "server.log", "w") as log:
        command = [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            script,
            f"--server.port={port}",  # the rest comes from .streamlit/config.toml
        ]
        if uvicorn_host is not None:
            command = [sys.executable, "-m", "uvicorn", "app:app", "--host", uvicorn_host]
            command += ["--port", str(port)]
        proc = subprocess.Popen(
            command,
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
    """Terminate a server started by start_server (its whole process group).

    A server still running a page script when SIGTERM comes may take longer than 20 s to
    exit on a slow, loaded machine (seen once in CI on a 2-core AMD EPYC, after the test's
    own checks had passed): then the group is killed."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def open_new_run(page) -> None:
    """Open the Train page's "New run" form (it starts folded where the page shows a run)."""
    summary = page.locator("details > summary", has_text="New run").first
    summary.wait_for(timeout=60_000)
    if not summary.evaluate("s => s.parentElement.open"):
        summary.click()


def assert_no_browser_exception(page) -> None:
    """No Python exception box on a page in the browser."""
    assert page.locator('[data-testid="stException"]').count() == 0


def launch_chromium(playwright):
    """Headless Debian Chromium through Playwright (never downloads a browser)."""
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )


# ----------------------------------------------------------------------------- models in memory


@torch.no_grad()
def greedy_decode_uncached(model, src: torch.Tensor, max_len: int) -> torch.Tensor:
    """Greedy decoding that re-runs the whole decoder each step (the reference for the cache)."""
    from core.corpus.vocab import Vocab

    memory, src_mask, _ = model.encode(src)
    ys = torch.full((src.size(0), 1), Vocab.bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        logits, _, _ = model.decoder(ys, memory, src_mask, model.tgt_mask(ys))  # (B, t, V)
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if (ys[:, 1:] == Vocab.eos_id).any(1).all():
            break
    return ys[:, 1:]


WORDS_EN = ["i", "am", "cold", "you", "are", "tall", "."]
WORDS_FR = ["je", "suis", "froid", "tu", "es", "grand", "."]


def random_model():
    """(model, src vocab, tgt vocab): an untrained model (random weights vary the outputs)."""
    from core.corpus.vocab import SPECIALS, Vocab
    from core.model.transformer import Transformer

    torch.manual_seed(0)
    vocab = len(SPECIALS) + 7
    cfg = toy_model_config(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, d_ff=64, dropout=0.1
    )
    return Transformer(cfg).eval(), Vocab(SPECIALS + WORDS_EN), Vocab(SPECIALS + WORDS_FR)


def toy_model_config(**kw):
    """A small ModelConfig for fast layer tests (16 wide, 4 heads, 2 + 2 blocks)."""
    from core.model.config import ModelConfig

    base = dict(
        src_vocab_size=23,
        tgt_vocab_size=19,
        d_model=16,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
    )
    return ModelConfig(**{**base, **kw})


def padded_batch(vocab: int, lengths: list[int], width: int, seed: int = 0) -> torch.Tensor:
    """Random ids (B, width) in 4..vocab-1, <pad>=0 after each length."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (len(lengths), width), generator=g)
    for i, n in enumerate(lengths):
        ids[i, n:] = 0
    return ids


def model_and_batch(norm_first: bool):
    """(model, src, tgt): a seeded toy model in eval mode (3 decoder blocks), a padded batch."""
    from core.model.transformer import Transformer

    torch.manual_seed(3)
    model = Transformer(toy_model_config(norm_first=norm_first, num_decoder_layers=3)).eval()
    src = padded_batch(23, [7, 4, 2], 7)
    tgt = padded_batch(19, [6, 6, 3], 6, seed=1)
    tgt[:, 0] = 1  # <bos>
    return model, src, tgt


# ----------------------------------------------------------------------------- the one interface


def studio_adapter(model):
    """A toy Transformer behind the one interface (``StudioModel``), with word vocabularies of
    its sizes (its passes never read words)."""
    from core.corpus.vocab import SPECIALS, Vocab
    from core.model.studio_model import StudioModel

    def vocab(size: int) -> Vocab:
        return Vocab(SPECIALS + [f"w{i}" for i in range(size - len(SPECIALS))])

    return StudioModel(model, vocab(model.cfg.src_vocab_size), vocab(model.cfg.tgt_vocab_size))


def encoder_matrix_at(m, x):
    """Value zeroing's matrix (S, S) of encoder layer 0 when it reads x (1, S, D): a hook on
    the layer's input site puts x in every copy of the batch, in the recorded pass and in the
    zeroed ones (a source of S real tokens: nothing masked)."""
    from core.attribution import value_zeroing

    S = x.size(1)
    src = torch.tensor([[*range(4, 4 + S - 1), 2]])  # (1, S), <eos> last
    tgt_in = torch.tensor([[1]])  # (1, 1) <bos>
    with m.hooks([("encoder.0.in", lambda h, name: x.expand_as(h))]), torch.no_grad():
        p = m.record(src, tgt_in)
        assert torch.equal(p.encoder_inputs[0], x)  # the premise: the layer read x
        return value_zeroing.encoder_matrix(m, p, 0)


SUBJECTS = [("i am", "je suis"), ("you are", "tu es"), ("he is", "il est"), ("we are", "nous")]
ADJECTIVES = [("cold", "froid"), ("hot", "chaud"), ("tired", "fatigué"), ("tall", "grand")]


def word_pairs(n: int = 16) -> list[tuple[list[str], list[str]]]:
    """``n`` English-French pairs of the tiny models' words, of two lengths."""
    out = []
    for s_en, s_fr in SUBJECTS:
        for a_en, a_fr in ADJECTIVES:
            tail = ["."] if len(out) % 2 else ["home", "."]
            out.append(([*s_en.split(), a_en, *tail], [*s_fr.split(), a_fr, *tail]))
    return out[:n]


def fra_eng_like(tmp_path, n: int = 400) -> Path:
    """A fra.txt-in-a-zip corpus of the tiny Hugging Face models' words, standing in for
    fra-eng."""
    import zipfile

    lines = []
    for i in range(n):
        (s_en, s_fr), (a_en, a_fr) = SUBJECTS[i % 4], ADJECTIVES[(i // 4) % 4]
        lines.append(f"{s_en} {a_en} {'home ' * (i // 16)}.\t{s_fr} {a_fr} .\tCC-BY")
    path = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fra.txt", "\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- trainee loss passes


def trainee_batch(padded: bool, vocab_size: int = 40):
    """(src (4, 7), tgt_in (4, 6), tgt_out (4, 6)) of seeded random tokens for a trainee's
    ``loss_terms``: rows of several lengths, or all full."""
    from core.corpus.vocab import Vocab

    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab_size, (4, 7), generator=g)  # (4, 7)
    tgt = torch.randint(4, vocab_size, (4, 7), generator=g)  # (4, 7) = <bos> .. <eos>
    tgt[:, 0] = Vocab.bos_id
    if padded:
        for row, (s, t) in enumerate([(7, 7), (3, 5), (5, 2), (1, 4)]):
            src[row, s:] = Vocab.pad_id
            tgt[row, t:] = Vocab.pad_id
    return src, tgt[:, :-1], tgt[:, 1:]


def loss_and_grads(model: torch.nn.Module, compute) -> tuple[float, list[torch.Tensor]]:
    """(the loss, every parameter's gradient — zeros where none flowed) of one backward pass
    of ``compute()``."""
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    return loss.item(), [
        p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
    ]
