"""Fixtures only: thin wrappers around tests/helpers.py (tests import utilities from there)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from tests import helpers

# ----------------------------------------------------------------------------- workers

if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers share the cores: one thread each,
    import torch  # not two apiece fighting over two cores (the trainers they start choose

    torch.set_num_threads(1)  # their own)

# Trainers the tests start keep the tests' priority and a fixed thread count: niced, a live
# run's next point could come later than a test waits for it; a count that followed the
# other worker's load (core.runs.cpu_share) would make two runs of one test differ.
os.environ.setdefault("ATTENTION_STUDIO_TRAINER_NICE", "0")
os.environ.setdefault("ATTENTION_STUDIO_TRAINER_SHARE", "0")
# Every figure a test builds (and the app servers they start) is validated by Plotly, as the
# server does not (core.figures.plain): a property Plotly does not know fails here.
os.environ.setdefault("ATTENTION_STUDIO_CHECK_FIGURES", "1")

# ----------------------------------------------------------------------------- tiers

SLOW_PREFIXES = ("test_browser_", "test_app_")  # real browsers; whole pages run by AppTest
SLOW_FILES = {  # files whose every test starts processes or trains, or runs hundreds of cases
    "test_architecture.py",  # the commands as their own process
    "test_distributed.py",
    "test_faults.py",
    "test_processes.py",
    "test_properties.py",  # every parser of outside input, 100 to 500 generated inputs each
    "test_resume.py",  # trains a run twice, broken and unbroken
}
SLOW_FIXTURES = {  # a test asking for one of these starts a process, trains a run of its own
    "app_server",  # (the tiny run every test shares is trained once, quickly), runs a whole
    "chromium",
    "bpe_run",  # page (the folders AppTest needs) or reads fra-eng
    "browser_page",
    "fra_eng",
    "jobs_env",
    "kill_trainers",
    "shipped_model_dirs",
    "studio_dirs",
    "val_run",
    "reverse_run",  # the tiny model trained French→English
}


def pytest_collection_modifyitems(config, items) -> None:
    """The ``slow`` tier: by file (browsers, torchrun, subprocesses), by fixture (trainers the
    app launches, app servers, the real corpus) or by the test's own marker."""
    for item in items:
        name = item.path.name
        fixtures = set(getattr(item, "fixturenames", ()))
        if name.startswith(SLOW_PREFIXES) or name in SLOW_FILES or fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)


# ----------------------------------------------------------------------------- data folder


@pytest.fixture(autouse=True)
def data_folder(monkeypatch) -> Path:
    """The app's data folder (ATTENTION_STUDIO_DATA) is tests/data, which holds tiny.tsv.

    The app reads corpus files only there, in the download cache and in staged uploads;
    a test may point the variable elsewhere.
    """
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(helpers.TINY.parent))
    return helpers.TINY.parent


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch) -> None:
    """A command called in a test reads a quiet machine: on a busy one it would take one
    thread fewer and print a note on stderr (``core.cpu_load.command_threads``), so what a
    test sees would depend on the other processes' load. tests/test_cpu_share.py checks the
    policy itself, and that commands print its note."""
    import core.command_line

    monkeypatch.setattr(core.command_line, "command_threads", lambda env=None: None)


# ----------------------------------------------------------------------------- tiny model


@pytest.fixture(scope="session")
def tiny_corpus() -> Path:
    """Path of the hand-written 30-pair corpus."""
    return helpers.TINY


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A finished run directory of the tiny model (trained once per session)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert helpers.train_tiny(out) == 0
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_run) -> Path:
    """The tiny model's last checkpoint."""
    return tiny_run / "last.pt"


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint):
    """The tiny model, loaded once (a StudioModel; never mutate it)."""
    from core.model.studio_model import StudioModel

    return StudioModel.load(tiny_checkpoint)


@pytest.fixture(scope="session")
def val_checkpoint(tmp_path_factory, tiny_checkpoint) -> Path:
    """The tiny model, its data settings holding 6 validation pairs (the last of tiny.tsv)."""
    path = tmp_path_factory.mktemp("val") / "tiny-val.pt"
    return helpers.with_validation_split(tiny_checkpoint, path)


@pytest.fixture(scope="session")
def reverse_run(tmp_path_factory) -> Path:
    """The tiny model trained French→English by the project's own command (once)."""
    out = tmp_path_factory.mktemp("fr-en") / "run"
    assert helpers.train_tiny(out, "--direction", "fr-en") == 0
    return out


@pytest.fixture(scope="session")
def bpe_run(tmp_path_factory) -> Path:
    """A tiny run trained with --tokenizer bpe by the project's own command (once)."""
    out = tmp_path_factory.mktemp("bpe") / "run"
    assert helpers.train_tiny(out, "--tokenizer", "bpe", "--bpe-vocab", "120") == 0
    return out


@pytest.fixture(scope="session")
def val_run(tmp_path_factory) -> Path:
    """A tiny run with 6 validation pairs and a model kept at each of its 4 evaluations."""
    out = tmp_path_factory.mktemp("val-run") / "run"
    extra = ("--num-train", "24", "--num-val", "6", "--eval-sentences", "6", "--epochs", "160")
    assert helpers.train_tiny(out, *extra, "--eval-every", "40") == 0
    return out


@pytest.fixture(scope="session")
def home_translation(tiny_model):
    """(Translation, SentenceMaps) of the tiny model's greedy translation of "i'm home ."."""
    from core.attention.sentence_maps import SentenceMaps
    from core.model.checked_translation import DEFAULT_SENTENCE, translate_sentence

    t = translate_sentence(tiny_model, DEFAULT_SENTENCE)
    return t, SentenceMaps.from_translation(t)


@pytest.fixture(scope="session")
def wide_checkpoint(tmp_path_factory, tiny_checkpoint) -> Path:
    """An untrained 6 + 6 block, 8-head model with the tiny vocabularies (for size tests)."""
    path = tmp_path_factory.mktemp("wide") / "wide-6x8.pt"
    return helpers.make_wide_checkpoint(path, tiny_checkpoint)


@pytest.fixture
def tiny_settings() -> dict:
    """The tiny job's settings (overrides of the d2l preset, trains until stopped), a copy."""
    return copy.deepcopy(helpers.TINY_JOB)


@pytest.fixture(scope="session")
def fra_eng() -> Path:
    """The shared fra-eng.zip, or skip when it is absent."""
    if not helpers.FRA_ENG.is_file():
        pytest.skip(f"fra-eng.zip not found at {helpers.FRA_ENG} (set FRA_ENG_ZIP)")
    return helpers.FRA_ENG


# ----------------------------------------------------------------------------- models in memory


@pytest.fixture(scope="module")
def random_model():
    """(model, src vocab, tgt vocab) of an untrained model."""
    return helpers.random_model()


@pytest.fixture(params=[False, True], ids=["post-LN", "pre-LN"])
def model_and_batch(request):
    """A seeded toy model in eval mode and a padded batch (post-LN and pre-LN)."""
    return helpers.model_and_batch(norm_first=request.param)


# ----------------------------------------------------------------------------- directories


@pytest.fixture
def studio_dirs(tmp_path, tiny_checkpoint, tiny_run, monkeypatch) -> dict:
    """Checkpoints holding the tiny model as ``fra-eng-small.pt`` and runs holding the tiny run.

    ATTENTION_STUDIO_CHECKPOINTS and ATTENTION_STUDIO_RUNS point at them for the test.
    """
    dirs = helpers.setup_studio_dirs(tmp_path, tiny_checkpoint, tiny_run)
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(dirs["checkpoints"]))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(dirs["runs"]))
    return dirs


@pytest.fixture
def jobs_env(tmp_path, monkeypatch):
    """Runs and checkpoints in a temporary directory; live trainers are killed afterwards."""
    runs, ckpts = tmp_path / "runs", tmp_path / "checkpoints"
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(runs))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(ckpts))
    monkeypatch.setenv("ATTENTION_STUDIO_MAX_CPU_JOBS", "1")
    yield {"runs": runs, "checkpoints": ckpts}
    helpers.kill_trainers(runs)


@pytest.fixture
def kill_trainers():
    """kill_trainers(runs_dir): SIGKILL the live trainers of the runs there (clean-up)."""
    return helpers.kill_trainers


@pytest.fixture
def make_run():
    """make_run(runs_root, run_id, status, job=None, checkpoint=False) -> RunDir, by hand."""
    return helpers.make_run


@pytest.fixture
def dead_pid():
    """dead_pid() -> the pid of a process that has already exited."""
    return helpers.dead_pid


# ----------------------------------------------------------------------------- browser


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """One app server for the browser tests; runs go to a temporary directory."""
    runs = tmp_path_factory.mktemp("browser-runs")
    # its trainers keep the tests' priority: niced below the other worker's tests, a live
    # run's next point could take longer than the browser test waits for it
    proc, url = helpers.start_server(runs, env={"ATTENTION_STUDIO_TRAINER_NICE": "0"})
    yield {"url": url, "runs": runs}
    helpers.stop_server(proc)


@pytest.fixture(scope="session")
def chromium():
    """Headless Debian Chromium through Playwright, started once for the whole session (never
    downloads a browser); each test opens its own context in it (``browser_page``)."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = helpers.launch_chromium(p)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(app_server, chromium):
    """A Playwright page of its own (a fresh context: no cookies or storage of another test)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    # every wait without its own timeout gets settle's 90 s, not Playwright's 30: with two
    # workers on two cores a rerun after a click took longer than 30 s now and then
    context.set_default_timeout(90_000)
    yield context.new_page()
    context.close()


@pytest.fixture
def shipped_model_dirs(monkeypatch, tmp_path):
    """The app sees only the shipped checkpoint (skips where it was not trained yet)."""
    if not helpers.SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(helpers.SHIPPED.parent))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path))


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory) -> dict:
    """{family: folder} of tiny random Hugging Face encoder-decoders (tests/hf_tiny.py),
    built offline once per session."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from tests.hf_tiny import CONFORMANCE, save_marian_spm, save_tiny

    root = tmp_path_factory.mktemp("hf")
    folders = {family: save_tiny(root / family, family) for family in CONFORMANCE}
    return folders | {"marian-spm": save_marian_spm(root / "marian-spm")}


@pytest.fixture(scope="session")
def lm_models(tmp_path_factory) -> dict:
    """{family: folder} of tiny random decoder-only models and masked language models
    (tests/lm_tiny.py), built offline once per session."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES, save_tiny_encoder, save_tiny_lm

    root = tmp_path_factory.mktemp("lm")
    folders = {family: save_tiny_lm(root / family, family) for family in LM_FAMILIES}
    return folders | {f: save_tiny_encoder(root / f, f) for f in ENCODER_FAMILIES}


@pytest.fixture(scope="session")
def lm_loaded(lm_models) -> dict:
    """{family: PromptedModel} of the tiny language models, loaded once per session."""
    from core.model.lm_loading import load

    return {family: load(folder) for family, folder in lm_models.items()}


@pytest.fixture(scope="session")
def hf_loaded(hf_models) -> dict:
    """{family: HFModel} of the tiny models, loaded once per session (never changed)."""
    from core.model.hf_model import load

    return {family: load(folder) for family, folder in hf_models.items()}
