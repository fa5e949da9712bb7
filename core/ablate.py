"""``python -m core.ablate``: what removing each attention head costs, as JSON lines.

    python -m core.ablate --checkpoint PATH [--data SOURCE] [--sentences N] [--refresh]
                          [--target-lang CODE] [--precision auto|float32|bfloat16]

prints a baseline JSON line (with ``pruning``, the pruning curve the page draws), then one per
head with BLEU and loss when that head alone is removed. PATH is a studio checkpoint or a
Hugging Face model folder (a hub id when online), measured on fra-eng's validation sentences
as the studio splits it by default, in bfloat16 where the CPU runs it natively unless
``--precision float32``. The library is ``core.attention.ablation`` (removing heads) and
``core.attention.importance`` (measuring them), the same functions the Attention page calls.

    python -m core.ablate --checkpoint PATH --heads KIND:LAYER:HEAD,... [--sequence TEXT]
    python -m core.ablate --checkpoint PATH --heads ... --sentence TEXT [--beam N] [--max-len N]

print what Remove heads shows, two JSON lines without and with the heads
(``core.attention.task_sequence.heads_removed``): a token-sequence model's forced pass over
its sequence (trained here on the induction task), or a translation's text and
log-probability (the second line with its change).
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.head_measures import PRECISIONS
from core.attention.importance import SAMPLE_SIZES, SENTENCES, importance_for
from core.attention.task_sequence import heads_removed
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_decode_flags,
    add_prompt_flag,
    decode_settings,
    run_command,
    terminal_progress,
    usable_target_lang,
)
from core.corpus.source import DataError
from core.model import parts
from core.model.checkpoints import CheckpointError
from core.model.opened import model_path, open_model
from core.training.devices import pick_device


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, --data, --sentences, --refresh … and --heads, --sequence, --sentence."""
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
    first = "the first N validation sentences (default: %(default)s)"
    p.add_argument("--sentences", type=sentences, default=SENTENCES, help=first)
    p.add_argument("--refresh", action="store_true", help="recompute, ignoring a cached result")
    precision = "a Hugging Face model's passes (auto: bfloat16 where the CPU runs it natively)"
    p.add_argument("--precision", choices=PRECISIONS, default="auto", help=precision)
    device = "where the model runs (auto: CUDA, then Apple MPS, then the CPU; the pages: CPU)"
    p.add_argument("--device", default="cpu", choices=("cpu", "auto", "cuda", "mps"), help=device)
    heads = "KIND:LAYER:HEAD,...: a token sequence, or --sentence, read with and without them"
    p.add_argument("--heads", default="", help=heads)
    p.add_argument("--sequence", default="", help="with --heads: the tokens (default: its task's)")
    p.add_argument("--sentence", default="", help="with --heads: the sentence to translate")
    add_decode_flags(p, parts.GREEDY, (parts.BEAM_SIZES, parts.ALPHAS, parts.MAX_LENS))
    add_prompt_flag(p)
    return p


def run(args: argparse.Namespace) -> list[str]:
    """Head importance of the checkpoint (with ``--heads``: its sequence, or ``--sentence``
    translated, without and with them), as JSON lines."""
    if args.sentence.strip() and not args.heads.strip():
        raise CommandError("--sentence is translated with and without --heads: give --heads.")
    try:
        device = pick_device(args.device)
    except ValueError as e:
        raise CommandError(str(e)) from e
    lm = open_model(args.checkpoint, device, hub=True, prompt=args.prompt, section="ablation")
    if args.heads.strip():
        settings = decode_settings(args, parts.GREEDY, lm)  # the page's, its prompt too
        try:  # HeadSpecError and TranslationError are ValueErrors
            rows = heads_removed(lm, args.heads, args.sentence, args.sequence, settings)
        except ValueError as e:
            raise CommandError(str(e)) from e
        return [json.dumps(row, ensure_ascii=False) for row in rows]
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
        usable_target_lang(args.target_lang, lm),
        args.precision,
    )
    return [json.dumps(row) for row in result.json_rows()]


def main(argv=None) -> int:
    """Print head importance of a checkpoint as JSON lines."""
    return run_command(build_parser(), run, (CheckpointError, DataError), argv)


if __name__ == "__main__":
    sys.exit(main())
