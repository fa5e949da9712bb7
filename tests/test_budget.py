"""core.runs.budget: every artifact a browser can cause, estimated before it exists and held to
its limit where it is written (issue 31, items 1, 5 and 8).

The property tests build tiny models of any accepted shape and check the estimates against
the bytes the trainer's own code writes; the rest reproduces each finding of the audit.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.corpus.vocab import SPECIALS, Vocab
from core.model.checkpoints import atomic_save
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.runs import budget, disk_cache, history, quota, run_bytes, run_dir
from core.runs.run_dir import RunDir
from core.training.evaluation import snapshot_probes
from core.training.settings import merged_settings
from tests.helpers import TINY_RUN

WORDS = ["go", ".", "i", "lost", "!", "he's", "calm", "home", "a", "very", "long", "word,"]
AUDIT = {  # issue 31, item 1: the settings that gave a 1.29 GB snapshot for a 7 MB model
    "model": {
        "d_model": 64,
        "num_heads": 64,
        "num_encoder_layers": 24,
        "num_decoder_layers": 24,
    },
    "train": {"eval_every": 1, "probes": ["!" * 200] * 8},
}


def probe_snapshot(settings_: dict, vocab: Vocab, seed: int = 0) -> list[dict]:
    """The probe maps the trainer writes at an evaluation (``evaluation.snapshot_probes``)."""
    m = settings_["model"]
    cfg = ModelConfig(len(vocab), len(vocab), dropout=0.0, **m)
    torch.manual_seed(seed)
    model = Transformer(cfg)
    trainer = SimpleNamespace(
        cfg=SimpleNamespace(probes=settings_["train"]["probes"]),
        model=model,
        corpus=SimpleNamespace(src_vocab=vocab, tgt_vocab=vocab, summary={}),
        translates=True,
    )
    return snapshot_probes(trainer)


SHAPES = st.fixed_dictionaries(
    {
        "num_heads": st.sampled_from([1, 2, 4]),
        "num_encoder_layers": st.integers(1, 3),
        "num_decoder_layers": st.integers(1, 3),
        "max_positions": st.integers(3, 40),
        "d_ff": st.just(8),
    }
)
PROBES = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join), max_size=3
)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shape=SHAPES, probes=PROBES, seed=st.integers(0, 3))
def test_any_accepted_probe_settings_stay_within_their_estimate(
    tmp_path_factory, shape, probes, seed
):
    """Whatever shape and probes are accepted, the snapshot the trainer writes is no larger
    than run_bytes.snapshot_bytes says (and so within SNAPSHOT_BYTES)."""
    vocab = Vocab([*SPECIALS, *WORDS[:8]])  # some probe words are unknown: <unk>
    model = {**shape, "d_model": 4 * shape["num_heads"]}
    wanted = {
        "model": model,
        "data": {"tokenizer": "word", "max_vocab": len(vocab)},
        "train": {"probes": probes},
    }
    assert run_bytes.run_problems(wanted) == []  # tiny: always accepted
    path = tmp_path_factory.mktemp("snap") / "step_00000001.pt"
    probe_maps = probe_snapshot(wanted, vocab, seed)
    atomic_save({"step": 1, "probes": probe_maps}, path)
    assert path.stat().st_size <= run_bytes.snapshot_bytes(wanted) + 2048  # the zip's own header
    assert budget.sizeof(probe_maps) <= run_bytes.snapshot_bytes(wanted) + 64  # the list itself


def test_the_audits_probe_settings_are_refused_before_launch():
    from core.runs.capacity import launch_problems

    cfg = merged_settings("d2l", AUDIT)
    assert run_bytes.snapshot_bytes(cfg) > 10**9  # what it would have written at every step
    problems = launch_problems("d2l", AUDIT, 1)
    assert any(p.startswith("probes: their attention maps would take") for p in problems)
    assert "use fewer or shorter probe sentences" in problems[-1]


def test_the_trainer_refuses_them_too(tmp_path, capsys):
    """The command refuses them as the Train page does, before a run directory is made."""
    from core.train import main
    from core.training.settings import to_flags

    code = main(["--preset", "d2l", *to_flags(AUDIT), "--out", str(tmp_path / "r")])
    assert code == 2
    assert "their attention maps would take" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("preset, kept", [("d2l", 64), ("small", 64), ("base", 31)])
def test_the_presets_keep_their_snapshots_and_fit_a_class_server(preset, kept):
    cfg = merged_settings(preset)
    assert run_bytes.run_problems(cfg) == []
    plan = run_bytes.run_budget(cfg)
    assert plan.snapshots_kept == kept  # base: 6 + 6 layers of 8 heads, 1 MB a snapshot
    assert plan.total < 4 * budget.GB
    assert "checkpoints" in plan.words()


def test_a_finished_run_holds_less_than_its_budget(tiny_run):
    """The tiny run the test session trained, measured against the budget of its settings."""
    cfg = json.loads((tiny_run / "config.json").read_text())
    plan = run_bytes.run_budget(cfg)  # the command line read tiny.tsv in place: no copy
    assert quota.folder_bytes(tiny_run) <= plan.total
    assert len(RunDir(tiny_run).snapshot_steps()) <= plan.snapshots_kept
    assert TINY_RUN["train"]["eval_every"] == 50  # the run evaluated and snapshotted


def test_snapshots_and_kept_models_fit_their_byte_budgets():
    big = {"num_heads": 64, "num_encoder_layers": 24, "num_decoder_layers": 24}
    cfg = merged_settings("d2l", {"model": {"d_model": 64, **big}})
    keep = run_bytes.snapshots_to_keep(cfg)
    assert keep * run_bytes.snapshot_bytes(cfg) <= budget.SNAPSHOTS_BYTES
    assert keep * run_bytes.rows_per_step(cfg["model"]) <= budget.TRAJECTORY_ROWS // 2
    assert run_bytes.models_to_keep(20, budget.KEPT_MODELS_BYTES, big) == 0  # none, not one
    assert run_bytes.models_to_keep(20, 1000, big) * run_bytes.rows_per_step(big) <= (
        budget.TRAJECTORY_ROWS // 2
    )


def test_the_recorder_writes_no_snapshot_past_the_limit(tmp_path, monkeypatch):
    """Checked where it is written: a snapshot past SNAPSHOT_BYTES is not kept, and the run's
    status says so (once)."""
    from core.runs.recorder import RunRecorder

    rd = RunDir(tmp_path / "run")
    rd.create()
    probes = [{"sentence": "go .", "encoder": torch.zeros(2, 4, 10, 10, dtype=torch.float16)}]
    recorder = SimpleNamespace(
        rd=rd, allowed=10**9, keep_snapshots=64, fits=lambda more: True, warn=None
    )
    recorder.warn = lambda head, message: RunRecorder.warn(recorder, head, message)
    monkeypatch.setattr("core.runs.recorder.snapshot_probes", lambda trainer: probes)
    trainer = SimpleNamespace(state=SimpleNamespace(step=5))
    RunRecorder.keep_snapshot(recorder, trainer)
    assert rd.snapshot_steps() == [5]
    monkeypatch.setattr(budget, "SNAPSHOT_BYTES", 1000)
    trainer.state.step = 6
    RunRecorder.keep_snapshot(recorder, trainer)
    trainer.state.step = 7
    RunRecorder.keep_snapshot(recorder, trainer)
    assert rd.snapshot_steps() == [5]
    warnings = rd.read_status()["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("Attention snapshots not kept (the first")


def test_an_oversized_snapshot_file_is_never_read_whole(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.create()
    rd.save_snapshot(1, [])
    with open(rd.snapshot_path(2), "wb") as f:  # written before the limits: a sparse giant
        f.truncate(budget.SNAPSHOT_BYTES + 2 * 2**20)
    assert rd.load_snapshot(1)["step"] == 1
    with pytest.raises(ValueError, match="too large to read"):
        rd.load_snapshot(2)


def test_trajectories_hash_a_snapshot_without_reading_it_whole(tmp_path, monkeypatch):
    from pathlib import Path

    from core.attention import trajectories

    rd = RunDir(tmp_path / "run")
    rd.create()
    rd.save_snapshot(3, [])

    def whole(self):
        raise AssertionError(f"{self} read whole")

    monkeypatch.setattr(Path, "read_bytes", whole)
    assert trajectories._snapshot_digest(rd.path, 3).endswith(":3")


def test_trajectories_read_only_the_steps_whose_rows_fit(tmp_path, monkeypatch):
    from core.attention import trajectories

    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path))  # its disk cache

    rd = RunDir(tmp_path / "run")
    rd.create()
    maps = {k: torch.rand(2, 4, 3, 3) for k in ("encoder", "decoder_self", "cross")}
    probe = {"sentence": "go .", "src_tokens": ["go", ".", "<eos>"]} | maps
    probe |= {"output_tokens": ["va", "!", "<eos>"], "decoder_inputs": ["<bos>", "va", "!"]}
    for step in range(1, 11):
        rd.save_snapshot(step, [probe])
    monkeypatch.setattr(budget, "TRAJECTORY_ROWS", 2 * 24 * 4)  # 4 steps of 4 x (2 + 4) heads
    t = trajectories.trajectories(rd.path, validation="off")
    assert len(t.steps) <= 4 and t.steps[0] == 1 and t.steps[-1] == 10
    assert len(t.records) == len(t.steps) * 24
    assert any("spread evenly" in n for n in t.notes)


# ----------------------------------------------------------------------------- metrics


def test_metrics_are_thinned_past_their_cap_keeping_first_last_and_evaluations(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(run_dir, "METRICS_BYTES", 20_000)
    rd = RunDir(tmp_path / "run")
    rd.create()
    thinned = 0
    for step in range(1, 2001):
        record = {"record": "train", "step": step, "loss": 1.0 / step}
        thinned += rd.append_metrics(record)
        if step % 100 == 0:
            rd.append_metrics({"record": "eval", "step": step, "val_bleu": step / 100})
        assert rd.metrics.stat().st_size <= 20_000 + 200
    records = rd.read_metrics()
    train = [r["step"] for r in records if r["record"] == "train"]
    assert thinned > 2 and train[0] == 1 and train[-1] == 2000
    assert [r["step"] for r in records if r["record"] == "eval"] == list(range(100, 2001, 100))


def test_a_live_metrics_file_is_parsed_once_and_then_only_its_new_lines(tmp_path, monkeypatch):
    rd = RunDir(tmp_path / "run")
    rd.create()
    for step in range(1, 101):
        rd.append_metrics({"record": "train", "step": step})
    parsed = []
    real = run_dir._parse_from
    monkeypatch.setattr(run_dir, "_parse_from", lambda p, o: parsed.append(o) or real(p, o))
    assert len(rd.read_metrics()) == 100
    assert len(rd.read_metrics()) == 100 and len(parsed) <= 1  # unchanged: not read again
    rd.append_metrics({"record": "train", "step": 101})
    assert rd.read_metrics()[-1]["step"] == 101
    assert parsed[-1] > 0  # from where the last read ended
    rd.rewind(50)  # rewritten: read whole
    assert [r["step"] for r in rd.read_metrics()] == list(range(1, 51))


def test_the_recorder_writes_half_as_many_records_after_a_thinning():
    from core.runs.recorder import RunRecorder

    written = []
    rd = SimpleNamespace(
        append_metrics=lambda record: written.append(record["step"]) or len(written) == 3,
        write_status=lambda **fields: fields,
        stop_requested=lambda: False,
    )
    meter = SimpleNamespace(sample=lambda: {})
    recorder = SimpleNamespace(rd=rd, stride=1, records=0, meter=meter, bar=None, eta=lambda: 0)
    trainer = SimpleNamespace(stop_asked=False)
    for step in range(1, 11):
        info = {"step": step, "progress": step / 10, "epoch": 0, "loss": 1.0}
        RunRecorder.on_step(recorder, trainer, info)
    assert written == [1, 2, 3, 4, 6, 8, 10] and recorder.stride == 2


def test_the_metrics_csv_is_made_on_the_click_not_on_every_rerun(studio_dirs, monkeypatch):
    from core.runs import exports
    from tests.helpers import assert_clean, run_page_script

    calls = []
    monkeypatch.setattr(exports, "metrics_csv", lambda rd: calls.append(rd) or b"")
    at = run_page_script("train.py", {"run": studio_dirs["run"].name})
    assert_clean(at)
    assert calls == []


# ----------------------------------------------------------------------------- history files


def test_a_history_file_is_written_within_its_limit(tmp_path, monkeypatch):
    """Found by the audit: the 20 MB limit was checked on reading only (a 3.1 GB file)."""
    monkeypatch.setattr(history, "MAX_BYTES", 60_000)
    rd = RunDir(tmp_path / "run")
    rd.create()
    probe = {"sentence": "go .", "encoder": torch.rand(2, 4, 12, 12)}
    for step in range(1, 41):
        rd.save_snapshot(step, [probe])
        rd.append_metrics({"record": "train", "step": step, "loss": 1.0})
    dest = history.write_history(rd.path, tmp_path / "model.pt")
    assert dest.stat().st_size <= 60_000
    steps = history.HistoryFile(dest).snapshot_steps()
    assert 2 <= len(steps) < 40 and steps[0] == 1 and steps[-1] == 40
    with pytest.raises(ValueError, match="would pass"):
        history.add_section(dest, "extra", {"numbers": list(range(20_000))})
    assert history.HistoryFile(dest).section("extra") is None  # the file as it was


# ----------------------------------------------------------------------------- disk caches


def test_the_disk_caches_stay_within_their_bytes_least_recently_used_going_first(tmp_path):
    import os
    import time

    folder = tmp_path / ".attribution"
    for i in range(10):
        disk_cache.write_cached(folder, f"k{i}", {"x": "y" * 1000}, limit=5_500)
        os.utime(folder / f"k{i}.json", (time.time() - 100 + i, time.time() - 100 + i))
        if i == 3:
            assert disk_cache.read_cached(folder, "k0") is not None  # used: kept longer
    kept = sorted(p.stem for p in folder.glob("*.json"))
    assert sum(p.stat().st_size for p in folder.glob("*.json")) <= 5_500
    assert "k9" in kept and "k0" in kept and "k1" not in kept


def test_a_failed_or_killed_cache_write_leaves_no_file_behind(tmp_path, monkeypatch):
    """A write that fails (a full disk) removes its partial temporary file; one a killed
    process left (older than STALE_SECONDS) goes at the next write, a fresh one stays."""
    import os

    folder = tmp_path / ".trajectories"
    folder.mkdir()
    stale, fresh = folder / "old.json.1.2.tmp", folder / "new.json.3.4.tmp"
    for tmp in (stale, fresh):
        tmp.write_text("{partial", encoding="utf-8")
    old = stale.stat().st_mtime - disk_cache.STALE_SECONDS - 1
    os.utime(stale, (old, old))

    def full_disk(*_):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(disk_cache.os, "replace", full_disk)
        disk_cache.write_cached(folder, "k", {"x": 1})
    assert sorted(p.name for p in folder.iterdir()) == sorted([stale.name, fresh.name])
    disk_cache.write_cached(folder, "k", {"x": 1})
    assert sorted(p.name for p in folder.iterdir()) == sorted(["k.json", fresh.name])
    assert disk_cache.read_cached(folder, "k") == {"x": 1}


def test_sizes_are_measured_in_bytes_held():
    arrays = {"a": torch.zeros(1000), "b": [torch.zeros(10, dtype=torch.float16)] * 3}
    assert 4000 + 20 <= budget.sizeof(arrays) < 4000 + 20 + 2000  # the shared one counted once
    assert budget.size_words(3 * budget.MB) == "3.0 MB"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    shape=SHAPES,
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=20),
    max_len=st.integers(1, 60),
    seed=st.integers(0, 3),
)
def test_any_translation_is_within_its_estimate(shape, words, max_len, seed):
    """A translation with every map, of any tiny model shape, sentence and output length,
    holds no more than budget.translation_bytes says before it is made."""
    from core.model.checked_translation import translate_sentence
    from core.model.parts import DecodeSettings, TranslationError, source_len
    from core.model.studio_model import StudioModel

    vocab = Vocab([*SPECIALS, *WORDS])
    model = {**shape, "d_model": 4 * shape["num_heads"]}
    cfg = ModelConfig(len(vocab), len(vocab), dropout=0.0, **model)
    torch.manual_seed(seed)
    lm = StudioModel(Transformer(cfg).eval(), vocab, vocab)
    try:
        t = translate_sentence(lm, " ".join(words), DecodeSettings(max_len=max_len))
    except TranslationError:
        return
    src = source_len(words, "word", shape["max_positions"])
    assert budget.sizeof(t) <= budget.translation_bytes(model, src, max_len)


# ----------------------------------------------------------------------------- opening a model

FOLDER_CONFIGS = {  # a Hugging Face folder of each family, its config.json alone
    "marian": {"model_type": "marian", "is_encoder_decoder": True},
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
    "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"]},
}


def open_places(tmp_path, monkeypatch) -> tuple[dict, object]:
    """({"studio": a checkpoint's path, family: a model folder}, count): ``count(n)`` makes
    every one of them a model of n parameters (its headers are not read)."""
    place = {"studio": str(tmp_path / "model.pt")}
    (tmp_path / "model.pt").write_bytes(b"")
    for family, config in FOLDER_CONFIGS.items():
        (tmp_path / family).mkdir()
        (tmp_path / family / "config.json").write_text(json.dumps(config))
        place[family] = str(tmp_path / family)
    parameters = [0]
    monkeypatch.setattr("core.model.opened.parameters_of", lambda path: parameters[0])
    return place, lambda n: parameters.__setitem__(0, n)


TOO_LARGE = (  # budget.model_problem's words for a studio checkpoint one parameter too large
    "This model has 67 M parameters (256.0 MB in memory); the server opens models up to 256.0 MB. "
    "Use it from the command line (python -m core.translate, core.attribute, ...)."
)


def test_the_server_opens_a_checkpoint_and_a_folder_each_within_its_limit(tmp_path, monkeypatch):
    """A studio checkpoint's float32 weights within MODEL_BYTES, an encoder-decoder folder's
    within HF_MODEL_BYTES; one parameter more is refused in one line."""
    place, count = open_places(tmp_path, monkeypatch)
    count(budget.MODEL_BYTES // 4)
    assert budget.open_problem(place["studio"]) is None
    count(budget.MODEL_BYTES // 4 + 1)
    assert budget.open_problem(place["studio"]) == TOO_LARGE
    assert budget.open_problem(place["marian"]) is None
    count(budget.HF_MODEL_BYTES // 4 + 1)
    assert "the server opens models up to 640.0 MB" in budget.open_problem(place["marian"])


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_language_model_is_opened_in_bfloat16_where_only_that_fits(tmp_path, monkeypatch, family):
    """A decoder-only or masked model past HF_MODEL_BYTES in float32 is opened in bfloat16
    where the processor computes it natively, refused in one line where not, or where even
    bfloat16 passes the limit."""
    place, count = open_places(tmp_path, monkeypatch)
    native = [True]
    monkeypatch.setattr("core.model.lm_loading.native_bfloat16", lambda device: native[0])
    count(budget.HF_MODEL_BYTES // 4 + 1)
    assert budget.open_problem(place[family]) is None
    native[0] = False
    assert "no native bfloat16" in budget.open_problem(place[family])
    native[0] = True
    count(budget.HF_MODEL_BYTES // 2 + 1)
    assert "this server opens models of at most" in budget.open_problem(place[family])


def test_a_model_whose_headers_cannot_be_read_is_left_for_loading_to_name(tmp_path, monkeypatch):
    from core.model.checkpoints import CheckpointError
    from core.model.hf_folder import HFModelError

    place, _ = open_places(tmp_path, monkeypatch)

    def unreadable(error):
        def parameters_of(path):
            raise error

        return parameters_of

    monkeypatch.setattr("core.model.opened.parameters_of", unreadable(CheckpointError("no")))
    assert budget.open_problem(place["studio"]) is None
    monkeypatch.setattr("core.model.opened.parameters_of", unreadable(HFModelError("No way.")))
    assert budget.open_problem(place["marian"]) == "No way."
