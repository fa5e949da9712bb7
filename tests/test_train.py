"""Training end to end: learning, run files, checkpoints, resume, stop, CLIs, errors."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys

import pytest
import torch

from core.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from core.data import parse_pairs, preprocess
from core.evaluate import corpus_bleu
from core.evaluate import main as evaluate_main
from core.run_dir import RunDir
from core.train_loop import TrainConfig, learning_rate
from core.translate import main as translate_main
from core.translate import translate_lines
from tests.helpers import ROOT, TINY_ARGS, train_tiny, wait_for


def train_losses(run) -> list[tuple[int, float]]:
    """(step, loss) of every training record of a run."""
    return [(r["step"], r["loss"]) for r in RunDir(run).read_metrics() if r["record"] == "train"]


def test_tiny_corpus_is_learned_and_translated_exactly(tiny_run, tiny_corpus):
    """The tiny corpus reaches near-zero loss and every sentence translates exactly."""
    assert train_losses(tiny_run)[-1][1] < 0.02
    lm = load_checkpoint(tiny_run / "last.pt")
    pairs, _ = parse_pairs(tiny_corpus.read_text())
    outs, warnings = translate_lines(lm, [en for en, _ in pairs])
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
    with pytest.raises(CheckpointError, match="not found"):
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
    ],
)
def test_cli_refuses_bad_settings(tmp_path, capsys, extra, message):
    """Bad data or settings end with a one-line error and a failed status."""
    assert train_tiny(tmp_path / "bad", *extra) == 2
    assert message in capsys.readouterr().err
    assert RunDir(tmp_path / "bad").read_status()["state"] == "failed"


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


def test_multi_reference_bleu():
    """A hypothesis matching any one of several references scores 100."""
    refs = [[["il", "fait", "très", "froid", "."], ["j'ai", "vraiment", "très", "froid", "."]]]
    assert corpus_bleu([["j'ai", "vraiment", "très", "froid", "."]], refs) == pytest.approx(100.0)
    assert corpus_bleu([["il", "fait", "très", "froid", "."]], refs) == pytest.approx(100.0)
    assert corpus_bleu([["bonjour", "."]], refs) < 50


def test_warmup_then_decay():
    """The learning rate rises linearly to its peak, then decays as 1/sqrt(step)."""
    cfg = TrainConfig(lr=1e-3, warmup_steps=100)
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(400, cfg) == pytest.approx(5e-4)
    cfg.schedule = "constant"
    assert learning_rate(400, cfg) == pytest.approx(1e-3)


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
