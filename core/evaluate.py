"""Validation loss, multi-reference BLEU and the ``python -m core.evaluate`` command."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import sacrebleu
import torch
import torch.nn.functional as F

from core.data import UNK, DataError, Split, Vocab, batches, encode_pairs, load_splits
from core.decode import translate_batch
from core.model import Transformer


def corpus_bleu(hypotheses: list[list[str]], references: list[list[list[str]]]) -> float:
    """sacrebleu corpus BLEU of token lists against any number of references each."""
    width = max((len(r) for r in references), default=0)
    streams = [[" ".join(r[j]) if j < len(r) else None for r in references] for j in range(width)]
    hyps = [" ".join(h) for h in hypotheses]
    return float(sacrebleu.corpus_bleu(hyps, streams, force=True).score) if hyps else 0.0


@torch.no_grad()
def evaluate_loss(
    model: Transformer, encoded, batch_size: int = 256, max_batches: int = 0, amp_dtype=None
) -> float:
    """Mean per-token cross-entropy (no label smoothing) over encoded pairs."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i, (src, tgt) in enumerate(batches(encoded, batch_size, shuffle=False)):
        if max_batches and i >= max_batches:
            break
        src, tgt = src.to(device), tgt.to(device)  # (B, S), (B, T + 1)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits, _ = model(src, tgt[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(
            logits.float().flatten(0, 1),
            tgt[:, 1:].flatten(),
            ignore_index=Vocab.pad_id,
            reduction="sum",
        )
        total += loss.item()
        count += int((tgt[:, 1:] != Vocab.pad_id).sum())
    model.train(was_training)
    return total / max(count, 1)


def evaluate_split(
    model,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    split: Split,
    max_sentences: int = 0,
    batch_size: int = 256,
) -> dict:
    """BLEU (all references), <unk> share of the output, loss and translation speed.

    The loss is per target token: per word, or per piece for a subword vocabulary.
    """
    groups = split.groups()
    if max_sentences:
        groups = groups[:max_sentences]
    start = time.perf_counter()
    hyps = translate_batch(model, src_vocab, tgt_vocab, [g[0] for g in groups], batch_size)
    seconds = time.perf_counter() - start
    loss = evaluate_loss(model, encode_pairs(split, src_vocab, tgt_vocab), batch_size)
    words = [w for h in hyps for w in h]
    return {
        "bleu": corpus_bleu(hyps, [g[1] for g in groups]),
        "unk_share": sum(w == UNK for w in words) / max(len(words), 1),  # of output words
        "loss": loss,
        "sentences": len(groups),
        "sentences_per_s": len(groups) / max(seconds, 1e-9),
    }


def main(argv=None) -> int:
    """Evaluate a checkpoint on the test split of a corpus; print JSON."""
    from core.checkpoint import CheckpointError, data_config_of, load_checkpoint

    p = argparse.ArgumentParser(description="Evaluate a checkpoint: BLEU, loss, speed.")
    p.add_argument("--checkpoint", required=True)
    p.add_argument(
        "--data", default=None, help="corpus path or 'fra-eng' (default: the checkpoint's own data)"
    )
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--max-sentences", type=int, default=0, help="0 = the whole split")
    args = p.parse_args(argv)
    try:
        lm = load_checkpoint(args.checkpoint)
        cfg = data_config_of(lm.meta)
        if args.data:
            cfg.source = args.data
        elif cfg.source != "fra-eng" and not Path(cfg.source).is_file():
            raise DataError(
                f"This checkpoint was trained on {cfg.source}, which is not here: "
                "pass its path with --data."
            )
        split = getattr(load_splits(cfg), args.split)
        if not split.pairs:
            raise DataError(f"The {args.split} split of {cfg.source} is empty.")
        result = evaluate_split(lm.model, lm.src_vocab, lm.tgt_vocab, split, args.max_sentences)
    except (CheckpointError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"checkpoint": args.checkpoint, "split": args.split, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
