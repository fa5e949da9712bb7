"""``python -m core.ablate``: what removing each attention head costs, as JSON lines.

    python -m core.ablate --checkpoint PATH [--data SOURCE] [--sentences N] [--refresh]
                          [--target-lang CODE] [--precision auto|float32|bfloat16]

prints a baseline JSON line, then one per head with BLEU and loss when that head alone is
removed. PATH is a studio checkpoint or a Hugging Face model folder (a hub id when online),
measured on fra-eng's validation sentences as the studio splits it by default, in bfloat16
where the CPU runs it natively unless ``--precision float32``. The library
is ``core.attention.ablation`` (removing heads) and ``core.attention.importance`` (measuring
them), the same functions the Attention page calls.

    python -m core.ablate --checkpoint PATH --heads KIND:LAYER:HEAD,... [--sequence TEXT]

scores a token-sequence model (trained here on the induction task) as Remove heads does: two
JSON lines, its sequence's forced pass with and without the heads
(``core.attention.task_sequence.sequence_removed``).
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.head_measures import PRECISIONS
from core.attention.importance import SAMPLE_SIZES, SENTENCES, importance_for
from core.attention.task_sequence import sequence_removed
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_prompt_flag,
    run_command,
    terminal_progress,
)
from core.corpus.source import DataError
from core.model.checkpoints import CheckpointError
from core.model.opened import model_path, open_model
from core.model.parts import TranslationError
from core.training.devices import pick_device


def json_lines(result) -> list[str]:
    """A baseline line, then one line per head (kind, layer, head, BLEU, loss, changes; a
    language model's: the loss alone, its baseline BLEU null)."""
    agree = result.agreement()
    base = {"baseline": True, "measured": result.measured, "bleu": result.bleu}
    base |= {"loss": result.loss, "sentences": result.sentences, "pairs": result.pairs}
    base |= {"heads": len(result.heads), "spearman_loss": agree["loss"]}
    base |= {"spearman_bleu": agree["bleu"]} if "bleu" in agree else {}
    base |= {"seconds": round(result.seconds, 2), "cached": result.cached}
    base |= {"precision": result.precision}
    return [json.dumps(base)] + [json.dumps(row) for row in result.heads]


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, --data, --sentences, --refresh … and --heads, --sequence."""
    p = CommandParser(
        description="BLEU and loss on validation sentences with each attention head removed."
    )
    p.add_argument(
        "--checkpoint", required=True, help="a studio checkpoint (.pt), a model folder or hub id"
    )
    p.add_argument(
        "--data", default=None, help="corpus path or 'fra-eng' (default: the checkpoint's own data)"
    )
    sentences = InRange(int, *SAMPLE_SIZES)
    p.add_argument("--sentences", type=sentences, default=SENTENCES, help="the first N validation")
    p.add_argument("--refresh", action="store_true", help="recompute, ignoring a cached result")
    p.add_argument("--target-lang", default="", help="a multilingual model's target language")
    precision = "a Hugging Face model's passes (auto: bfloat16 where the CPU runs it natively)"
    p.add_argument("--precision", choices=PRECISIONS, default="auto", help=precision)
    device = "where the model runs (auto: CUDA, then Apple MPS, then the CPU; the pages: CPU)"
    p.add_argument("--device", default="cpu", choices=("cpu", "auto", "cuda", "mps"), help=device)
    heads = "KIND:LAYER:HEAD,...: a token-sequence model's sequence scored without these heads"
    p.add_argument("--heads", default="", help=heads)
    p.add_argument("--sequence", default="", help="with --heads: the tokens (default: its task's)")
    add_prompt_flag(p)
    return p


def run(args: argparse.Namespace) -> list[str]:
    """Head importance of the checkpoint (or its sequence without ``--heads``), as JSON
    lines."""
    try:
        device = pick_device(args.device)
    except ValueError as e:
        raise CommandError(str(e)) from e
    lm = open_model(args.checkpoint, device, hub=True, prompt=args.prompt, section="ablation")
    if args.heads.strip():
        try:  # a token-sequence model's sequence without the heads (HeadSpecError: a ValueError)
            return [json.dumps(r) for r in sequence_removed(lm, args.heads, args.sequence)]
        except (ValueError, TranslationError) as e:
            raise CommandError(str(e)) from e
    if problem := lm.supports("importance"):  # it reads no validation sentence
        raise CommandError(problem)
    path = model_path(args.checkpoint)
    result = importance_for(
        lm,
        path,
        args.sentences,
        args.data,
        terminal_progress(),
        args.refresh,
        args.target_lang or None,
        args.precision,
    )
    return json_lines(result)


def main(argv=None) -> int:
    """Print head importance of a checkpoint as JSON lines."""
    return run_command(build_parser(), run, (CheckpointError, DataError), argv)


if __name__ == "__main__":
    sys.exit(main())
