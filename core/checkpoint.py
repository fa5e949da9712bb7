"""Checkpoints as plain data: tensors plus JSON-able metadata, loaded with weights_only."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from core.data import Vocab
from core.model import ModelConfig, Transformer

FORMAT = "attention-studio/1"


class CheckpointError(Exception):
    """A checkpoint is missing, damaged or not ours; the message says which."""


@dataclass
class LoadedModel:
    """A model rebuilt from a checkpoint, with its vocabularies and metadata."""

    model: Transformer
    src_vocab: Vocab
    tgt_vocab: Vocab
    meta: dict = field(default_factory=dict)  # configs, step, metrics, ...


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file, then rename: never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(
    path, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, half: bool = False, **meta
) -> None:
    """Save weights, configs (as dicts), vocabularies (as lists) and ``meta``.

    ``half`` stores floating-point weights as float16 (a compact file for sharing).
    """
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    atomic_save(
        {
            "format": FORMAT,
            "model_config": asdict(model.cfg),
            "src_vocab": list(src_vocab.itos),
            "tgt_vocab": list(tgt_vocab.itos),
            "state_dict": state,
            **meta,
        },
        path,
    )


def read_checkpoint(path) -> dict:
    """The raw dict of a checkpoint, loaded safely (no code is ever unpickled)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"Checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file (struct.error, ...) is one case
        if isinstance(e, MemoryError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path} is not a readable Attention Studio checkpoint (damaged, truncated or "
            f"a foreign file): {first[:200]}"
        ) from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an Attention Studio checkpoint ({FORMAT}).")
    return ckpt


def load_checkpoint(path, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the model from the config saved in the checkpoint and load its weights."""
    ckpt = read_checkpoint(path)
    try:
        cfg = ModelConfig(**ckpt["model_config"])
        model = Transformer(cfg)
        state = {
            k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()
        }
        model.load_state_dict(state)
        vocabs = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} is inconsistent and cannot be loaded: {e}") from e
    model.to(device).eval()
    meta = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer", "rng")}
    return LoadedModel(model, vocabs[0], vocabs[1], meta)


def compact(src, dst, half: bool = True) -> Path:
    """Copy a checkpoint without optimiser state (and in float16), e.g. to ship or promote."""
    ckpt = read_checkpoint(src)
    ckpt.pop("optimizer", None)
    ckpt.pop("rng", None)
    if half:
        ckpt["state_dict"] = {
            k: v.half() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()
        }
    atomic_save(ckpt, Path(dst))
    return Path(dst)


def main(argv=None) -> int:
    """``python -m core.checkpoint SRC DST``: write a compact copy of a checkpoint."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description="Write a compact (float16, no optimiser) copy.")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--float32", action="store_true", help="keep float32 weights")
    args = p.parse_args(argv)
    try:
        out = compact(args.src, args.dst, half=not args.float32)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
