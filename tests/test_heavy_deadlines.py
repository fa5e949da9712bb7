"""Every heavy job the server runs in its one slot stops at its time limit (issue 64).

The rule: every loop inside the heavy slot checks its deadline (``core.measure.progress``).
Each heavy core function the pages run there is run here on a tiny model twice: whole, and
under ``time_limit`` with a clock that jumps past the deadline once its first check has
passed. The second run must raise TimeLimit having done far less of the work than the whole
run (work counted in calls of the model's modules: a pass of a two-layer model is dozens),
whatever the machine's speed: no test here sleeps or reads the real time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch

from core.alignment import grid, head_aer, other_readers
from core.alignment.gold import GoldLinks
from core.attention import (
    head_measures,
    importance,
    patching,
    path_patching,
    projector,
    trajectories,
)
from core.attention.attribution_patching import attribution_patch
from core.attention.trajectory_numbers import teacher_forced_rows, validation_means
from core.attribution.faithfulness import faithfulness
from core.corpus.splits import Split
from core.corpus.text import tokenize
from core.measure.progress import TimeLimit, time_limit
from core.measure.sample import sample_of
from core.model import batched
from tests import helpers

STOPPED_SHARE = 1 / 3  # the most of a whole run's work a stopped run may have done


class JumpingClock:
    """A clock at 0 until the first check has passed, then far past any deadline."""

    def __init__(self):
        self.reads = 0  # the first read is ``time_limit`` starting, the second the first check

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= 2 else 1e9


@contextlib.contextmanager
def module_calls():
    """[calls of any torch module while inside] (one list, updated in place)."""
    calls = [0]

    def count(module, args, output):
        calls[0] += 1

    handle = torch.nn.modules.module.register_module_forward_hook(count)
    try:
        yield calls
    finally:
        handle.remove()


def tiny_pairs(n: int = 30) -> list[tuple[list[str], list[str]]]:
    """``n`` pairs of tests/data/tiny.tsv as word lists, in turn; past its 30, each source
    with a number of its own (a sample is of unique sources)."""
    lines = [line.split("\t")[:2] for line in helpers.TINY.read_text("utf-8").splitlines()]
    pairs = [(tokenize(src), tokenize(tgt)) for src, tgt in lines]
    return [(pairs[i % 30][0] + ([str(i)] if i >= 30 else []), pairs[i % 30][1]) for i in range(n)]


def gold_set(n: int) -> tuple[list, list[GoldLinks]]:
    """``n`` pairs of the tiny models' words, each word linked to the word at its place."""
    pairs = (helpers.word_pairs() * (n // 16 + 1))[:n]
    return pairs, [GoldLinks({(i, i) for i in range(min(map(len, p)))}) for p in pairs]


@pytest.fixture(scope="module")
def reverse_model():
    """An untrained studio model of the other direction (French→English), to symmetrise."""
    from core.model.studio_model import StudioModel

    model, en, fr = helpers.random_model()
    return StudioModel(model, fr, en, {"data_config": {"direction": "fr-en"}})


@pytest.fixture
def jobs(tiny_model, tiny_run, lm_loaded, reverse_model, monkeypatch) -> dict[str, Callable]:
    """{name: the heavy job, run on a tiny model}: every core function the pages run in the
    server's heavy slot (``pages.ui.heavy_work``)."""
    gpt2 = lm_loaded["gpt2"]
    many, few = gold_set(320), gold_set(48)
    sample = sample_of(tiny_model, Split(tiny_pairs()), 30)
    small = sample_of(tiny_model, Split(helpers.word_pairs()), 16)
    lm_sample = sample_of(gpt2, Split(helpers.word_pairs()), 16)
    rows = teacher_forced_rows(tiny_model, sample_of(tiny_model, Split(tiny_pairs(330)), 330))
    for module in (batched, head_measures):  # greedy passes of 8 rows: many, not one or two
        monkeypatch.setattr(module, "decode_rows", lambda cfg: 8)
    monkeypatch.setattr(patching, "ROWS", 1)  # a pass per component
    monkeypatch.setattr(path_patching, "ROWS", 1)  # ... per sender
    for module in (projector, trajectories):  # the sentences without the corpus's split
        monkeypatch.setattr(
            module,
            "validation_sample",
            lambda lm, cfg, n, *rest: sample_of(lm, Split(tiny_pairs(n)), n),
        )
    monkeypatch.setattr(trajectories, "read_cached", lambda *a: None)  # measured each time
    monkeypatch.setattr(trajectories, "write_cached", lambda *a: None)
    return {
        "alignment grid": lambda: grid.alignment_grid(tiny_model, *many),
        "alignment grid, decoder-only": lambda: grid.alignment_grid(gpt2, *many),
        "other readers: attribution": lambda: other_readers.other_readers(
            tiny_model, *few, ("alti",)
        ),
        "other readers: states": lambda: other_readers.other_readers(tiny_model, *many, (), True),
        "other readers: both directions": lambda: other_readers.other_readers(
            tiny_model, *many, (), False, reverse_model
        ),
        "faithfulness": lambda: faithfulness(tiny_model, sample, ("attention", "alti")),
        "head importance": lambda: importance.head_importance(tiny_model, small),
        "head importance, decoder-only": lambda: importance.head_importance(gpt2, lm_sample),
        "activation patching": lambda: patching.patch(
            tiny_model, "the cat sees the dog .", "the dog sees the cat ."
        ),
        "attribution patching": lambda: attribution_patch(
            tiny_model, "the cat sees the dog .", "the dog sees the cat ."
        ),
        "path patching": lambda: path_patching.path_patch(
            tiny_model, "the cat sees the dog .", "the dog sees the cat .", "logits"
        ),
        "projector": lambda: projector.project(
            tiny_model, "decoder", sentences=300, reads="translation"
        ),
        "over training": lambda: head_aer.head_trajectories(tiny_run),
        "validation numbers at a step": lambda: validation_means(tiny_model, rows),
        "source share at a step": lambda: head_aer.source_share(tiny_model, rows[:48]),
    }


JOBS = [
    "alignment grid",
    "alignment grid, decoder-only",
    "other readers: attribution",
    "other readers: states",
    "other readers: both directions",
    "faithfulness",
    "head importance",
    "head importance, decoder-only",
    "activation patching",
    "attribution patching",
    "path patching",
    "projector",
    "over training",
    "validation numbers at a step",
    "source share at a step",
]


@pytest.mark.parametrize("name", JOBS)
def test_a_heavy_job_stops_soon_after_its_time_limit(jobs, name):
    """Past the limit, the job raises TimeLimit at its next check, its work far from done."""
    assert set(jobs) == set(JOBS)
    job = jobs[name]
    with module_calls() as whole:
        job()
    assert whole[0] > 0
    limited = time_limit(1, clock=JumpingClock())
    with module_calls() as stopped, limited, pytest.raises(TimeLimit, match="stopped after 1 s"):
        job()
    assert stopped[0] <= STOPPED_SHARE * whole[0], (stopped[0], whole[0])


def test_rebuilding_the_validation_split_stops_at_the_limit(tmp_path):
    """A heavy job's sample rebuilds the split from the corpus (up to 1,000,000 pairs read
    and tokenized before its first pass): that reading checks the deadline every
    TICK_EVERY pairs, and stops past it having read about that many."""
    from core.corpus.config import DataConfig
    from core.corpus.splits import TICK_EVERY, load_splits
    from core.measure.sample import validation_sample

    corpus = tmp_path / "pairs.tsv"
    n = 3 * TICK_EVERY
    corpus.write_text("".join(f"word {i} .\tmot {i} .\n" for i in range(n)), encoding="utf-8")
    cfg = DataConfig(source=str(corpus))
    ticks = []
    assert load_splits(cfg, tick=lambda: ticks.append(1)).summary["pairs_read"] == n
    assert len(ticks) == n // TICK_EVERY
    read = []

    def counting(*args, **kwargs):
        read.append(1)
        return tokenize(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("core.corpus.splits.tokenize", counting)
        with time_limit(1, clock=JumpingClock()), pytest.raises(TimeLimit):
            validation_sample(None, cfg, 5)
    # the first check passes (JumpingClock), the second stops before its pair is tokenized
    assert len(read) == 2 * (2 * TICK_EVERY - 1)  # a source and a target each, of 3 * TICK_EVERY


def test_the_projection_is_not_begun_past_the_limit(tiny_model, monkeypatch):
    """Time spent reading the representations (past their last check) stops the job before
    UMAP's fit begins (its neighbour search checks nothing; its layout's epochs do)."""
    late = []

    def clock() -> float:
        return 1e9 if late else 0.0

    reading = projector.representations

    def slow_reading(*args, **kwargs):
        out = reading(*args, **kwargs)
        late.append(True)  # the limit passed after the reading's last check
        return out

    def fit(*_):
        pytest.fail("the fit began past the limit")

    monkeypatch.setattr(projector, "representations", slow_reading)
    monkeypatch.setattr(projector, "umap_coords", fit)
    monkeypatch.setattr(  # the sentences without the corpus's split, as in ``jobs``
        projector,
        "validation_sample",
        lambda lm, cfg, n, *rest: sample_of(lm, Split(tiny_pairs(n)), n),
    )
    with time_limit(1, clock=clock), pytest.raises(TimeLimit):
        projector.project(tiny_model, "encoder", method="umap", sentences=4)
