"""``python -m core.evaluate``: BLEU, loss and speed of a checkpoint on a split, as JSON.

A model not trained here (a Hugging Face folder or hub id) is evaluated on the same split of
fra-eng (or of ``--data``) as the studio splits it by default: the shipped model's own test
sentences. The library is ``TranslationModel.evaluate`` (``core.model.scores`` for the
studio's own models).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.command_line import (
    CommandParser,
    InRange,
    add_prompt_flag,
    run_command,
    usable_target_lang,
)
from core.corpus.source import MAX_PAIRS, DataError, named_source
from core.corpus.splits import load_splits
from core.model.checkpoints import CheckpointError, data_config_of
from core.model.opened import open_model


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, --data, --split and --max-sentences."""
    p = CommandParser(description="Evaluate a checkpoint: BLEU, loss, speed.")
    p.add_argument("--checkpoint", required=True)
    p.add_argument(
        "--data", default=None, help="corpus path or 'fra-eng' (default: the checkpoint's own data)"
    )
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    sentences = InRange(int, 0, MAX_PAIRS)  # 0 = the whole split
    p.add_argument("--max-sentences", type=sentences, default=0, help="0 = the whole split")
    p.add_argument("--target-lang", default="", help="a multilingual model's target language")
    add_prompt_flag(p)
    return p


def run(args: argparse.Namespace) -> list[str]:
    """BLEU, loss and speed of the checkpoint on the split, as one JSON object."""
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="evaluate")
    cfg = data_config_of(lm.meta)  # the default settings for a model not trained here
    recorded = lm.meta.get("data_config") or {}
    cfg.source = args.data or named_source(cfg.source, recorded.get("source_sha1"))
    if not args.data and cfg.source != "fra-eng" and not Path(cfg.source).is_file():
        raise DataError(
            f"This checkpoint was trained on {cfg.source}, which is not here: "
            "pass its path with --data."
        )
    split = getattr(load_splits(cfg), args.split)
    if not split.pairs:
        raise DataError(f"The {args.split} split of {cfg.source} is empty.")
    result = lm.evaluate(split, args.max_sentences, usable_target_lang(args.target_lang, lm))
    return [json.dumps({"checkpoint": args.checkpoint, "split": args.split, **result}, indent=2)]


def main(argv=None) -> int:
    """Evaluate a checkpoint on the test split of a corpus; print JSON."""
    return run_command(build_parser(), run, (CheckpointError, DataError), argv)


if __name__ == "__main__":
    sys.exit(main())
