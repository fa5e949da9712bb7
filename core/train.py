"""``python -m core.train``: train a Transformer into a run directory.

The run directory receives config.json, metrics.jsonl, status.json, last.pt / best.pt
and attention snapshots. SIGTERM or a STOP file saves a checkpoint and exits as
"stopped"; ``--resume`` continues the run and its metrics.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from core.checkpoint import read_checkpoint, save_checkpoint
from core.data import DataConfig, DataError, Vocab, load_corpus
from core.model import ModelConfig, Transformer
from core.presets import PRESETS
from core.run_dir import RunDir
from core.settings import DERIVED, add_setting_flags, settings_from_args
from core.train_loop import TrainConfig, Trainer, TrainState, device_description


def build_parser() -> argparse.ArgumentParser:
    """--out, --preset, --resume, --no-progress and one flag per setting (core.settings)."""
    p = argparse.ArgumentParser(description="Train an English-French Transformer.")
    p.add_argument("--out", required=True, help="run directory to create (or resume)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_setting_flags(p)
    return p


class RunRecorder:
    """Connects a Trainer to a RunDir: metrics, status, checkpoints, snapshots, stop."""

    def __init__(self, rd: RunDir, trainer: Trainer, configs: dict, bar=None):
        self.rd, self.trainer, self.configs, self.bar = rd, trainer, configs, bar
        trainer.on("step", self.on_step)
        trainer.on("eval", self.on_eval)
        trainer.on("end", self.on_end)

    def eta(self) -> float | None:
        """Seconds left, extrapolated from progress so far."""
        p, t = self.trainer.progress(), self.trainer.state.elapsed
        return t * (1 - p) / p if p > 0 else None

    def on_step(self, trainer: Trainer, info: dict) -> None:
        """Record training metrics, refresh the status, honour a stop file."""
        self.rd.append_metrics({"record": "train", **info})
        self.rd.write_status(
            state="running",
            step=info["step"],
            progress=info["progress"],
            eta_s=self.eta(),
            epoch=info["epoch"],
        )
        if self.rd.stop_requested():
            trainer.stop_requested = True
        if self.bar is not None:
            self.bar.n = round(info["progress"] * 1000)
            self.bar.set_postfix(loss=f"{info['loss']:.3f}", step=info["step"])

    def save(self, path: Path, with_optimizer: bool) -> None:
        """Write a checkpoint with configs, vocabularies and (optionally) optimiser state."""
        t = self.trainer
        extra = (
            {"optimizer": t.optimizer.state_dict(), "rng": torch.get_rng_state()}
            if with_optimizer
            else {}
        )
        save_checkpoint(
            path,
            t.model,
            t.corpus.src_vocab,
            t.corpus.tgt_vocab,
            train_config=self.configs["train"],
            data_config=self.configs["data"],
            state=asdict(t.state),
            run=self.rd.name,
            **extra,
        )

    def on_eval(self, trainer: Trainer, info: dict) -> None:
        """Record validation metrics, save checkpoints and the probes' attention maps."""
        record = {"record": "eval", **info, "elapsed": trainer.state.elapsed}
        self.rd.append_metrics(record)
        self.save(self.rd.last, with_optimizer=True)
        if info.get("is_best"):
            self.save(self.rd.best, with_optimizer=False)
        self.rd.save_snapshot(trainer.state.step, trainer.probe_maps())
        self.rd.write_status(best_bleu=trainer.state.best_bleu, last_eval=info["step"])
        if self.rd.stop_requested():
            trainer.stop_requested = True

    def on_end(self, trainer: Trainer, info: dict) -> None:
        """Save the last checkpoint and the final state."""
        self.save(self.rd.last, with_optimizer=True)
        self.rd.stop_file.unlink(missing_ok=True)
        self.rd.write_status(
            state=info["outcome"],
            step=info["step"],
            progress=trainer.progress(),
            eta_s=0.0,
            finished_at=time.time(),
        )


def prepare(rd: RunDir, configs: dict, resume: bool):
    """Build the corpus, model and trainer (restored from last.pt when resuming)."""
    data_cfg = DataConfig(**configs["data"])
    rd.write_status(message="loading the corpus")
    corpus = load_corpus(data_cfg, progress=_download_bar(rd))
    ckpt = read_checkpoint(rd.last) if resume else None
    if ckpt is not None:
        corpus.src_vocab, corpus.tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab),
        tgt_vocab_size=len(corpus.tgt_vocab),
        **configs["model"],
    )
    train_cfg = TrainConfig(**configs["train"])
    if train_cfg.threads:
        torch.set_num_threads(train_cfg.threads)
    torch.manual_seed(train_cfg.seed)
    model = Transformer(model_cfg)
    state = None
    if ckpt is not None:
        model.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}
        )
        state = TrainState(**ckpt["state"])
    trainer = Trainer(model, corpus, train_cfg, state)
    if ckpt is not None and "optimizer" in ckpt:
        trainer.optimizer.load_state_dict(ckpt["optimizer"])
    configs["model"] = asdict(model_cfg)
    configs["summary"] = corpus.summary
    return trainer


def _download_bar(rd: RunDir):
    """A progress callback for the corpus download: a tqdm bar and the run's status."""
    from tqdm import tqdm

    bar, last = {}, [0.0]

    def update(done: int, total: int | None) -> None:
        if "b" not in bar:
            bar["b"] = tqdm(total=total, unit="B", unit_scale=True, desc="fra-eng.zip")
        bar["b"].update(done - bar["b"].n)
        if time.time() - last[0] > 0.5 or done == total:
            last[0] = time.time()
            size = f" / {total / 1e6:.1f}" if total else ""
            rd.write_status(
                message=f"downloading fra-eng.zip: {done / 1e6:.1f}{size} MB",
                download=done / total if total else None,
            )

    return update


def load_run_configs(rd: RunDir, args: argparse.Namespace) -> dict:
    """The saved configs of a run to resume, with new limits from the flags."""
    saved = rd.read_config()
    if not saved or not rd.last.is_file():
        raise DataError(f"{rd.path} has no config.json and last.pt to resume from.")
    configs = {k: saved[k] for k in ("data", "model", "train")}
    for key in ("epochs", "max_steps", "time_budget"):
        if f"train.{key}" in vars(args):
            configs["train"][key] = getattr(args, f"train.{key}")
    configs["model"] = {k: v for k, v in configs["model"].items() if k not in DERIVED}
    return configs


def train_run(args: argparse.Namespace) -> int:
    """Run (or resume) training in args.out; returns the process exit code."""
    rd = RunDir(args.out)
    configs = load_run_configs(rd, args) if args.resume else settings_from_args(args)
    rd.create()
    if args.resume:  # a stale STOP from an earlier stop must not end the resumed run
        rd.stop_file.unlink(missing_ok=True)
    early_stop = []  # SIGTERM while the corpus loads: stop as soon as training can save
    signal.signal(signal.SIGTERM, lambda *_: early_stop.append(True))
    rd.write_status(
        state="starting", pid=os.getpid(), started_at=time.time(), resumed=args.resume, message=""
    )
    trainer = prepare(rd, configs, args.resume)
    rd.write_config(configs)
    rd.write_status(
        state="running",
        message="",
        device=device_description(trainer.device),
        total_steps=trainer.total_steps,
        progress=trainer.progress(),
        step=trainer.state.step,
    )
    signal.signal(signal.SIGTERM, lambda *_: setattr(trainer, "stop_requested", True))
    trainer.stop_requested = bool(early_stop) or rd.stop_requested()
    bar = None if args.no_progress else _progress_bar(args.out)
    RunRecorder(rd, trainer, configs, bar)
    print(f"training on {device_description(trainer.device)}: {configs['summary']}", flush=True)
    outcome = trainer.run()
    if bar is not None:
        bar.close()
    print(
        f"{outcome} at step {trainer.state.step}; best val BLEU "
        f"{trainer.state.best_bleu:.2f}; run directory {rd.path}",
        flush=True,
    )
    return 0


def _progress_bar(desc: str):
    """A tqdm bar over per-mille of the run, with ETA."""
    from tqdm import tqdm

    return tqdm(
        total=1000,
        desc=desc,
        bar_format="{l_bar}{bar}| {n_fmt}/1000 [{elapsed}<{remaining}{postfix}]",
    )


def main(argv=None) -> int:
    """Entry point: parse flags, train, report errors as one readable line."""
    args = build_parser().parse_args(argv)
    try:
        return train_run(args)
    except (DataError, ValueError, OSError) as e:
        RunDir(args.out).write_status(state="failed", message=str(e)) if Path(
            args.out
        ).is_dir() else None
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - record any crash for the app, then re-raise
        if Path(args.out).is_dir():
            RunDir(args.out).write_status(state="failed", message=f"{type(e).__name__}: {e}")
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
