"""Training end to end: learning, run files, checkpoints, resume, stop, CLIs, errors."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import subprocess
import sys

import pytest
import torch

from core.corpus.source import parse_pairs
from core.corpus.text import preprocess
from core.evaluate import main as evaluate_main
from core.model.checkpoints import CheckpointError, all_finite, read_checkpoint, save_checkpoint
from core.model.parts import DecodeSettings
from core.model.scores import corpus_bleu
from core.model.studio_loading import load_checkpoint
from core.model.studio_model import StudioModel
from core.model.transformer import Transformer
from core.runs.run_dir import RunDir
from core.training.config import TrainConfig
from core.training.settings import to_flags
from core.translate import main as translate_main
from tests.helpers import ROOT, TINY_ARGS, TINY_PRESET, TINY_RUN, train_tiny, wait_for


def train_losses(run) -> list[tuple[int, float]]:
    """(step, loss) of every training record of a run."""
    return [(r["step"], r["loss"]) for r in RunDir(run).read_metrics() if r["record"] == "train"]


def test_tiny_corpus_is_learned_and_translated_exactly(tiny_run, tiny_corpus):
    """The tiny corpus reaches near-zero loss and every sentence translates exactly."""
    assert train_losses(tiny_run)[-1][1] < 0.02
    m = StudioModel.load(tiny_run / "last.pt")
    pairs, _ = parse_pairs(tiny_corpus.read_text())
    outs, warnings = m.translate_lines([en for en, _ in pairs], DecodeSettings())
    assert outs == [preprocess(fr) for _, fr in pairs] and not warnings


def test_run_directory_contents(tiny_run):
    """config.json, metrics.jsonl, status.json, checkpoints and snapshots are written."""
    rd = RunDir(tiny_run)
    cfg = rd.read_config()
    assert cfg["model"]["d_model"] == 64 and cfg["data"]["split"] == "head"
    status = rd.read_status()
    assert status["state"] == "finished" and status["progress"] == 1.0
    assert status["step"] == 150 and status["device"].startswith("cpu")
    records = {r["record"] for r in rd.read_metrics()}
    assert records == {"train", "eval"}
    assert rd.last.is_file() and rd.best.is_file()
    assert rd.snapshot_steps() == [50, 100, 150]
    snap = rd.load_snapshot(150)
    probe = snap["probes"][0]
    assert probe["sentence"] == "go ."
    L, H = 2, 4
    S, T = len(probe["src_tokens"]), len(probe["output_tokens"])
    assert probe["cross"].shape == (L, H, T, S)
    assert probe["output_tokens"] == ["va", "!", "<eos>"]


def test_checkpoint_round_trip_gives_same_outputs(tiny_checkpoint, tmp_path):
    """save -> load rebuilds the model from its own config with identical outputs."""
    lm = load_checkpoint(tiny_checkpoint)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    before, _ = lm.model(src, tgt)
    save_checkpoint(tmp_path / "copy.pt", lm.model, lm.src_vocab, lm.tgt_vocab, step=7)
    again = load_checkpoint(tmp_path / "copy.pt")
    after, _ = again.model(src, tgt)
    assert torch.equal(before, after) and again.meta["step"] == 7
    save_checkpoint(tmp_path / "half.pt", lm.model, lm.src_vocab, lm.tgt_vocab, half=True)
    half, _ = load_checkpoint(tmp_path / "half.pt").model(src, tgt)
    assert torch.allclose(before, half, atol=0.05)
    assert (tmp_path / "half.pt").stat().st_size < 0.6 * (tmp_path / "copy.pt").stat().st_size


class Evil:
    """A pickle payload that would create a file if it were ever unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_bad_checkpoints_give_clear_errors_and_never_run_code(tiny_checkpoint, tmp_path):
    """Missing, truncated, random, foreign and malicious files raise CheckpointError."""
    with pytest.raises(CheckpointError, match="No such file"):
        read_checkpoint(tmp_path / "missing.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(tiny_checkpoint.read_bytes()[:2000])
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(5000))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save(
        {"format": "attention-studio/1", "x": Evil(str(marker))},
        evil,
        pickle_protocol=pickle.HIGHEST_PROTOCOL,
    )
    for path, pattern in [
        (truncated, "damaged"),
        (noise, "damaged"),
        (foreign, "not an Attention Studio"),
        (evil, "damaged"),
    ]:
        with pytest.raises(CheckpointError, match=pattern):
            load_checkpoint(path)
    assert not marker.exists()


def test_same_seed_same_losses(tmp_path):
    """Two CPU runs with the same seed log the same losses."""
    args = (
        "--epochs",
        "0",
        "--max-steps",
        "12",
        "--dropout",
        "0.3",
        "--log-every",
        "2",
        "--eval-every",
        "100",
    )
    assert train_tiny(tmp_path / "a", *args) == 0
    assert train_tiny(tmp_path / "b", *args) == 0
    a, b = train_losses(tmp_path / "a"), train_losses(tmp_path / "b")
    assert len(a) == 6 and a == b
    assert train_tiny(tmp_path / "c", *args, "--seed", "1") == 0
    assert train_losses(tmp_path / "c") != a


@pytest.mark.parametrize("folder", ["missing", "empty", "only its failed status"])
def test_resuming_a_run_that_is_not_there_creates_nothing(tmp_path, capsys, folder):
    """--resume of a mistyped run (no folder, or one holding no run) is one line, exit 2, and
    leaves no folder, status or lock behind (the runs table would list it as failed)."""
    out = tmp_path / "typo"
    if folder != "missing":
        out.mkdir()
    if folder == "only its failed status":  # what the trainer used to leave of a typo
        RunDir(out).write_status(state="failed", message="no settings")
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    assert train_tiny(out, "--resume") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "to resume" in err, err
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before


def test_resume_continues_metrics(tmp_path):
    """A finished run resumed with a higher step limit continues its step count and files."""
    out = tmp_path / "run"
    assert train_tiny(out, "--epochs", "0", "--max-steps", "20", "--eval-every", "10") == 0
    from core.train import main

    assert main(["--out", str(out), "--resume", "--max-steps", "40", "--no-progress"]) == 0
    steps = [s for s, _ in train_losses(out)]
    assert steps == sorted(steps) and steps[0] == 10 and steps[-1] == 40
    assert len(steps) == len(set(steps))
    status = RunDir(out).read_status()
    assert status["state"] == "finished" and status["step"] == 40 and status["resumed"]
    assert RunDir(out).snapshot_steps() == [10, 20, 30, 40]
    before = (out / "config.json").read_bytes()  # flags a resume does not read: refused, not
    argv = ["--out", str(out), "--resume", "--d-model", "512", "--dropout", "0.3"]  # dropped
    assert main(argv) == 2 and (out / "config.json").read_bytes() == before


def test_a_new_run_into_a_finished_one_is_refused_and_changes_nothing(tmp_path, capsys):
    """Audit: the same command run twice trained a second run over the first (its
    checkpoints replaced, its metrics.jsonl both runs' records); --resume continues it."""
    out = tmp_path / "run"
    assert train_tiny(out, "--epochs", "0", "--max-steps", "10", "--eval-every", "10") == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert train_tiny(out, "--epochs", "0", "--max-steps", "10") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already holds a run" in err, err
    assert "--resume" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_new_run_whose_data_cannot_be_read_leaves_nothing(tmp_path, capsys):
    """Audit: --data /etc/passwd (or a typo) was refused in one line, but left the run's folder
    with a failed status, listed on Home, which the corrected command then found in its way."""
    out = tmp_path / "run"
    assert train_tiny(out, "--data", str(tmp_path / "nope.tsv")) == 2
    assert "Corpus file not found" in capsys.readouterr().err
    assert not out.exists()
    assert train_tiny(out, "--epochs", "0", "--max-steps", "1") == 0  # the command corrected


def test_a_run_stopped_before_its_first_step_is_started_again(tmp_path):
    """Review: a new run stopped before its first step left its status alone; the same command
    then said "add --resume", and --resume had nothing to resume: it is started afresh."""
    out = tmp_path / "run"
    RunDir(out).create()
    RunDir(out).write_status(state="stopped", message="stopped before training began")
    RunDir(out).request_stop()  # an old STOP: it would end the new run at once
    assert train_tiny(out, "--epochs", "0", "--max-steps", "2") == 0
    assert RunDir(out).read_status()["state"] == "finished"


@pytest.mark.parametrize("out", ["", "a file", "a folder of other files"])
def test_a_new_run_needs_a_new_or_empty_folder(tmp_path, capsys, monkeypatch, out):
    """Audit: --out '' trained into the current folder (the checkout's root); a file or a
    folder of the user's own files would have taken the run's files among them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a file").write_text("mine")
    (tmp_path / "a folder of other files").mkdir()
    (tmp_path / "a folder of other files" / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    from core.train import main

    assert main([*TINY_ARGS, "--out", out]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    (tmp_path / "empty").mkdir()
    assert train_tiny(tmp_path / "empty", "--epochs", "0", "--max-steps", "1") == 0  # fine


def start_cli(out, *extra):
    """Start ``python -m core.train`` on the tiny corpus as its own process."""
    return subprocess.Popen(
        [sys.executable, "-m", "core.train", *TINY_ARGS, "--out", str(out), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_step(out, proc, step=5, timeout=60.0):
    """Wait until the run has logged ``step`` steps (its process must stay alive)."""

    def reached() -> bool:
        assert proc.poll() is None, proc.stdout.read().decode()
        return (RunDir(out).read_status().get("step") or 0) >= step

    wait_for(reached, timeout, f"the run to reach step {step}")


@pytest.mark.slow  # a trainer process, stopped
@pytest.mark.parametrize("how", ["sigterm", "stop-file"])
def test_stop_leaves_a_resumable_run(tmp_path, how):
    """SIGTERM or a STOP file saves last.pt and exits as 'stopped'; resume finishes it."""
    out = tmp_path / "run"
    proc = start_cli(out, "--epochs", "100000", "--log-every", "1", "--eval-every", "1000")
    wait_for_step(out, proc)
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        RunDir(out).request_stop()
    assert proc.wait(timeout=60) == 0
    status = RunDir(out).read_status()
    assert status["state"] == "stopped"
    stopped_at = read_checkpoint(out / "last.pt")["state"]["step"]
    assert stopped_at == status["step"] >= 5
    from core.train import main

    assert (
        main(
            [
                "--out",
                str(out),
                "--resume",
                "--epochs",
                "0",
                "--max-steps",
                str(stopped_at + 5),
                "--no-progress",
            ]
        )
        == 0
    )
    assert RunDir(out).read_status()["state"] == "finished"
    assert train_losses(out)[-1][0] == stopped_at + 5


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--data", "/nonexistent/pairs.tsv"], "not found"),
        (["--d-model", "30", "--num-heads", "4"], "divisible"),
        (["--num-encoder-layers", "0"], "num_encoder_layers"),
        (["--batch-size", "0"], "batch_size"),
        (["--max-positions", "10"], "max_positions (10)"),
        (["--grad-clip", "-1"], "grad_clip must be 0 (off) or positive (got -1.0)"),
    ],
)
def test_cli_refuses_bad_settings(tmp_path, capsys, extra, message):
    """Bad data or settings end with a one-line error and leave no run directory: settings as
    the Train page refuses them, before one is made; data the trainer reads, its folder
    removed (a new run that never began: the corrected command may run again)."""
    assert train_tiny(tmp_path / "bad", *extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_translate_cli_keeps_line_order(tiny_checkpoint, tmp_path, capsys):
    """--input translates one line per line, in order; bad lines stay empty with a warning."""
    inp = tmp_path / "in.txt"
    inp.write_text("I'm home.\n\nGo.\nqwerty\nShe is tall.\n")
    assert translate_main(["--checkpoint", str(tiny_checkpoint), "--input", str(inp)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == ["je suis chez moi .", "", "va !", "", "elle est grande ."]
    assert "line 2" in out.err and "line 4" in out.err
    assert translate_main(["--checkpoint", str(tiny_checkpoint), "--beam", "3", "Go."]) == 0
    assert capsys.readouterr().out.strip() == "va !"


def test_evaluate_cli_prints_json(tiny_checkpoint, tiny_corpus, capsys):
    """evaluate prints BLEU, loss and sentences/s as JSON."""
    code = evaluate_main(
        ["--checkpoint", str(tiny_checkpoint), "--data", str(tiny_corpus), "--split", "train"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bleu"] > 99 and result["loss"] < 0.05 and result["sentences_per_s"] > 0
    assert evaluate_main(["--checkpoint", str(tiny_checkpoint), "--data", "/nope.tsv"]) == 2
    capsys.readouterr()
    assert evaluate_main(["--checkpoint", str(tiny_checkpoint)]) == 2  # the file is named only
    assert "trained on tiny.tsv, which is not here" in capsys.readouterr().err


@pytest.mark.parametrize("sha1", ["d2l's", "repacked", "this machine's copy's", "another file's"])
def test_evaluate_reads_a_recorded_fra_eng_zip_as_the_fra_eng_corpus(
    tiny_checkpoint, tiny_corpus, tmp_path, monkeypatch, capsys, sha1
):
    """A model that records its corpus as fra-eng.zip with a fra-eng archive's SHA-1 (the
    shipped decoder) is evaluated on the corpus ``--data fra-eng`` reads; another file of
    that name still asks for --data."""
    import zipfile

    from core.corpus import source

    copy = tmp_path / "copy.zip"  # the fra-eng copy here: the tiny pairs in a zip
    with zipfile.ZipFile(copy, "w") as zf:
        zf.writestr("fra-eng/fra.txt", tiny_corpus.read_text())
    monkeypatch.setenv(source.FRA_ENG_ENV, str(copy))
    recorded = {
        "d2l's": source.FRA_ENG_SHA1,
        "repacked": source.FRA_ENG_SHA1S[1],
        "this machine's copy's": source.sha1_of(copy),
        "another file's": "0" * 40,
    }[sha1]
    ckpt = torch.load(tiny_checkpoint, map_location="cpu", weights_only=True)
    ckpt["data_config"] = {**ckpt["data_config"], "source": "fra-eng.zip", "source_sha1": recorded}
    torch.save(ckpt, tmp_path / "model.pt")
    code = evaluate_main(["--checkpoint", str(tmp_path / "model.pt"), "--split", "train"])
    out, err = capsys.readouterr()
    if sha1 == "another file's":
        assert code == 2 and "trained on fra-eng.zip, which is not here" in err
    else:
        assert code == 0, err
        assert json.loads(out)["bleu"] > 99  # the tiny pairs it learned: the copy was read
    from core.model.checkpoints import trained_data  # the pages' reader of the same record

    if sha1 == "another file's":
        with pytest.raises(source.DataError):
            trained_data(ckpt, command=False)
    else:
        assert trained_data(ckpt, command=False).source in ("fra-eng", str(copy))  # that copy


def test_a_setting_flags_help_names_its_default_and_allowed_values():
    """flag_help (core.train's setting flags): the field's comment, its default, its choices
    or its limit, in words argparse shows as they are (a % escaped)."""
    from core.config_fields import flag_help

    words = flag_help("share held out (5% is plenty)", 0.02, 1.0, preset="small")
    assert words % {} == "share held out (5% is plenty); default: 0.02 (small preset); at most 1.0"
    assert flag_help("how", "bpe", None, ("word", "bpe")) == "how; default: bpe; one of word, bpe"
    assert flag_help("probes", ["go .", "hi ."]) == "probes; default: go .; hi ."


@pytest.mark.parametrize(
    "flag, group, field", [("--lr", "train", "lr"), ("--max-steps", "train", "max_steps"),
                           ("--d-model", "model", "d_model"), ("--arch", "model", "arch"),
                           ("--task", "data", "task"), ("--tokenizer", "data", "tokenizer"),
                           ("--direction", "data", "direction")],
)  # fmt: skip
def test_train_help_gives_each_settings_default_and_allowed_values(flag, group, field):
    """--help names each setting flag's default (the small preset's, --preset's own default)
    and its choices or its limit, read from the tables the launch check uses."""
    from core.train import build_parser
    from core.training.settings import CHOICES, UPPERS, defaults

    action = next(a for a in build_parser()._actions if flag in a.option_strings)
    words = action.help % {}  # as argparse shows it
    assert f"default: {defaults('small')[group][field]}" in words
    if field in CHOICES:
        assert f"one of {', '.join(CHOICES[field])}" in words
    else:
        assert f"at most {UPPERS[group][field]:,}" in words


def test_multi_reference_bleu():
    """A hypothesis matching any one of several references scores 100."""
    refs = [[["il", "fait", "très", "froid", "."], ["j'ai", "vraiment", "très", "froid", "."]]]
    assert corpus_bleu([["j'ai", "vraiment", "très", "froid", "."]], refs) == pytest.approx(100.0)
    assert corpus_bleu([["il", "fait", "très", "froid", "."]], refs) == pytest.approx(100.0)
    assert corpus_bleu([["bonjour", "."]], refs) < 50


def test_compact_copy_drops_optimizer_and_halves(tiny_checkpoint, tmp_path, capsys):
    """python -m core.checkpoint SRC DST writes a float16 copy without optimiser state."""
    from core.checkpoint import main as checkpoint_main

    dst = tmp_path / "small.pt"
    assert checkpoint_main([str(tiny_checkpoint), str(dst)]) == 0
    raw = read_checkpoint(dst)
    assert "optimizer" not in raw and raw["state_dict"]["decoder.dense.weight"].dtype == (
        torch.float16
    )
    assert load_checkpoint(dst).meta["state"]["step"] == 150
    assert checkpoint_main([str(tmp_path / "nope.pt"), str(dst)]) == 2


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("grad_clip", -1.0, "grad_clip must be 0 (off) or positive (got -1.0)"),
        ("grad_clip", math.nan, "grad_clip must be 0 (off) or positive"),
        ("eval_sentences", 0, "eval_sentences must be at least 1 (got 0)"),
        ("eval_every", 0, "eval_every must be at least 1 (got 0)"),
        ("log_every", 0, "log_every must be at least 1 (got 0)"),
        ("epochs", -1, "epochs cannot be negative (got -1)"),
        ("max_steps", -5, "max_steps cannot be negative (got -5)"),
        ("time_budget", -60.0, "time_budget cannot be negative (got -60.0)"),
        ("time_budget", math.inf, "time_budget must be a finite number of seconds"),
        ("warmup_steps", -1, "warmup_steps cannot be negative (got -1)"),
        ("threads", -2, "threads must be 0 (torch's default) or positive (got -2)"),
        ("batch_size", 0, "batch_size must be at least 1 (got 0)"),
        ("lr", 0.0, "lr must be positive and finite (got 0.0)"),
        ("lr", math.nan, "lr must be positive and finite (got nan)"),
        ("lr", math.inf, "lr must be positive and finite (got inf)"),
        ("label_smoothing", 1.0, "label_smoothing must be in [0, 1) (got 1.0)"),
        ("label_smoothing", -0.1, "label_smoothing must be in [0, 1) (got -0.1)"),
        ("seed", -1, "seed must be between 0 and 4294967295 (got -1)"),
        ("lr", "fast", "lr must be a number (got 'fast')"),
        ("batch_size", 3.5, "batch_size must be a whole number (got 3.5)"),
        ("amp", "yes", "amp must be true or false (got 'yes')"),
        ("probes", "go .", "probes must be a list of sentences"),
    ],
)
def test_each_bad_training_field_is_named(field, value, reason):
    """Every training setting is checked, and the reason names the field and its value."""
    with pytest.raises(ValueError) as e:
        TrainConfig(**{"epochs": 1, field: value}).validate()
    assert reason in str(e.value)


def test_every_negative_limit_is_named_separately():
    """Negative epochs, max_steps, time_budget and warm-up each get their own reason."""
    cfg = TrainConfig(epochs=-1, max_steps=-1, time_budget=-1.0, warmup_steps=-1)
    with pytest.raises(ValueError) as e:
        cfg.validate()
    for name in ("epochs", "max_steps", "time_budget", "warmup_steps"):
        assert f"{name} cannot be negative" in str(e.value)


# ----------------------------------------------------------------------------- divergence


def nan_loss_at(monkeypatch, step: int) -> None:
    """Make the model's training loss NaN at optimiser step ``step`` (1-based) of this process."""
    calls, real_terms = [0], Transformer.loss_terms

    def loss_terms(self, *args, **kwargs):
        calls[0] += 1
        value, align = real_terms(self, *args, **kwargs)
        return (value * math.nan if calls[0] == step else value), align

    monkeypatch.setattr(Transformer, "loss_terms", loss_terms)


DIVERGING = ("--epochs", "0", "--max-steps", "30", "--eval-every", "5", "--log-every", "1")


def test_nan_loss_ends_the_run_as_diverged_keeping_the_last_finite_checkpoint(
    tmp_path, monkeypatch, capsys
):
    """A NaN loss at step 13 stops the run; last.pt stays the finite one of step 10."""
    nan_loss_at(monkeypatch, 13)
    out = tmp_path / "run"
    assert train_tiny(out, *DIVERGING) == 3
    message = (
        "Training diverged at step 13: the loss became NaN/inf. The last finite checkpoint "
        "(step 10) is kept; lower lr or raise warmup_steps, then resume or start again."
    )
    assert capsys.readouterr().err.strip() == f"error: {message}"
    status = RunDir(out).read_status()
    assert status["state"] == "diverged" and status["message"] == message
    assert status["diverged_at"] == 13 and status["step"] == 12
    last = read_checkpoint(out / "last.pt")
    assert last["state"]["step"] == 10 and all_finite(last["state_dict"])
    assert all_finite(read_checkpoint(out / "best.pt")["state_dict"])
    load_checkpoint(out / "last.pt")
    steps = [r["step"] for r in RunDir(out).read_metrics() if r["record"] == "train"]
    assert steps == list(range(1, 13))  # no NaN record
    monkeypatch.undo()
    from core.train import main

    resumed = ["--out", str(out), "--resume", "--lr", "0.001", "--no-progress"]
    assert main(resumed) == 0  # a lower lr may be set when resuming
    assert RunDir(out).read_status()["state"] == "finished"
    assert read_checkpoint(out / "last.pt")["train_config"]["lr"] == 0.001


def test_huge_lr_diverges_before_any_checkpoint(tmp_path, capsys):
    """lr 1e6 blows the weights up at once; nothing non-finite is ever saved."""
    out = tmp_path / "run"
    code = train_tiny(out, "--lr", "1e6", "--warmup-steps", "0", *DIVERGING)
    assert code == 3
    assert "No checkpoint was saved before it" in capsys.readouterr().err
    status = RunDir(out).read_status()
    assert status["state"] == "diverged" and "Training diverged at step" in status["message"]
    assert not (out / "last.pt").exists() and not (out / "best.pt").exists()


def test_a_non_finite_evaluation_is_never_best(tmp_path, monkeypatch):
    """A NaN validation loss is recorded but never counts as best (not even the first)."""
    monkeypatch.setattr("core.training.evaluation.evaluate_loss", lambda *a, **k: math.nan)
    out = tmp_path / "run"
    extra = ("--num-train", "24", "--num-val", "6", "--epochs", "0", "--max-steps", "10")
    assert train_tiny(out, *extra, "--eval-every", "5") == 0
    evals = [r for r in RunDir(out).read_metrics() if r["record"] == "eval"]
    assert [r["step"] for r in evals] == [5, 10] and not any(r["is_best"] for r in evals)
    assert not (out / "best.pt").exists() and (out / "last.pt").is_file()


def test_weights_that_are_not_finite_are_never_saved(tmp_path, tiny_model):
    """all_finite spots NaN and inf; save_checkpoint refuses such weights."""
    state = {"w": torch.ones(3), "ids": torch.tensor([1, 2])}
    assert all_finite(state)
    for bad in (math.nan, math.inf):
        assert not all_finite({**state, "w": torch.tensor([1.0, bad]).half()})
    model = Transformer(tiny_model.model.cfg)
    with torch.no_grad():
        next(model.parameters())[0] = math.nan
    with pytest.raises(CheckpointError, match="NaN or inf"):
        save_checkpoint(tmp_path / "bad.pt", model, tiny_model.src_vocab, tiny_model.tgt_vocab)
    assert not (tmp_path / "bad.pt").exists()


# ----------------------------------------------------------------------------- small corpora


def test_mostly_unknown_words_are_warned_about(tmp_path, capsys):
    """A corpus whose words are seen once each trains on <unk>: status and output say so."""
    corpus = tmp_path / "rare.tsv"
    corpus.write_text("".join(f"Word{i} alpha{i}.\tMot{i} beta{i}.\n" for i in range(20)))
    out = tmp_path / "run"
    extra = ("--data", str(corpus), "--min-freq", "2", "--epochs", "0", "--max-steps", "2")
    assert train_tiny(out, *extra) == 0
    warning = (
        "67% of the training source tokens are <unk> (vocabulary of 1 word at min_freq 2): "
        "lower --min-freq (the form's min_freq) or use more data."
    )
    warnings = RunDir(out).read_status()["warnings"]
    assert warnings == [warning, warning.replace("source", "target")]
    assert f"warning: {warning}" in capsys.readouterr().out


def test_final_line_and_progress_bar(tmp_path, capsys, tiny_run):
    """No validation split is said in words; the progress bar counts steps."""
    assert RunDir(tiny_run).read_status()["warnings"] == []
    argv = ["--preset", TINY_PRESET, *to_flags(TINY_RUN), "--epochs", "0", "--max-steps", "12"]
    from core.train import main

    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr()
    assert "finished at step 12; no validation split;" in out.out
    assert "BLEU" not in out.out
    assert "12/12" in out.err and "/1000" not in out.err


@pytest.mark.parametrize(
    ("saved_world", "batch_in_epoch", "total_steps"),
    [(1, 2, 24), (2, 2, 22)],  # 3 epochs of 8 steps; 2 steps of 2 processes = 4 steps of 1
)
def test_a_run_resumed_with_fewer_processes_keeps_its_place(
    tiny_corpus, saved_world, batch_in_epoch, total_steps
):
    """Mid-epoch, the pairs already used are skipped; the epochs still end the run."""
    from core.corpus.config import DataConfig
    from core.corpus.splits import load_corpus
    from core.model.config import ModelConfig
    from core.training.loop import Trainer, TrainState

    corpus = load_corpus(
        DataConfig(source=str(tiny_corpus), split="head", min_freq=1, num_train=29, num_val=1)
    )
    model = Transformer(ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16))
    state = TrainState(step=10, epoch=1, batch_in_epoch=batch_in_epoch, world_size=saved_world)
    trainer = Trainer(model, corpus, TrainConfig(batch_size=4, epochs=3, device="cpu"), state)
    assert trainer.steps_per_epoch == 8  # 29 pairs in batches of 4
    assert trainer.state.batch_in_epoch == 2 * saved_world and trainer.state.world_size == 1
    assert trainer.total_steps == total_steps
