"""``python -m core.translate``: translate sentences with a checkpoint, a Hugging Face model
folder or (online) a hub id."""

from __future__ import annotations

import argparse
import sys

from core.attention.ablation import HeadSpecError, ablated, heads_of
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_model_flag,
    add_prompt_flag,
    run_command,
)
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.model.parts import ALPHA, ALPHAS, BEAM_SIZES, MAX_LEN, MAX_LENS, DecodeSettings


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, decoding flags, --input, --ablate and the sentence."""
    p = CommandParser(
        description="Translate English to French with a checkpoint, or with a Hugging Face "
        "encoder-decoder (a save_pretrained folder, or a hub id when online)."
    )
    add_model_flag(p)
    p.add_argument(
        "--target-lang",
        default="",
        help="a multilingual model's target language code (M2M100 __fr__, NLLB fra_Latn)",
    )
    beam, alpha, most = InRange(int, *BEAM_SIZES), InRange(float, *ALPHAS), InRange(int, *MAX_LENS)
    p.add_argument("--beam", type=beam, default=1, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=alpha, default=ALPHA, help="beam length penalty")
    p.add_argument("--max-len", type=most, default=MAX_LEN, help="longest output, in tokens")
    p.add_argument("--input", help="a text file with one sentence per line")
    p.add_argument(
        "--ablate",
        default="",
        metavar="KIND:LAYER:HEAD[,...]",
        help="remove these attention heads (kinds: encoder, decoder_self, cross; from 0)",
    )
    p.add_argument(
        "sentence",
        nargs="*",
        help='the sentence to translate; several quoted sentences ("i am cold ." "go .") '
        "are translated one per line, as --input's lines; unquoted words make one sentence",
    )
    add_prompt_flag(p)
    return p


def sentences_of(words: list[str]) -> list[str]:
    """The sentences of the command line: each argument one where any holds a space (they
    were quoted: ``"i am cold ." "go ."``), else all of them one (``i am cold .``)."""
    if any(len(w.split()) > 1 for w in words):
        return [w for w in words if w.strip()]
    return [" ".join(words)]


def run(args: argparse.Namespace) -> int:
    """Print one translation per line (warnings on stderr); 1 when none could be made."""
    if not args.input and not args.sentence:
        raise CommandError("give a sentence or --input FILE")
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt)
    heads = heads_of(args.ablate, lm.cfg, lm.head_kinds)
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            lines = f.read().splitlines()
    else:
        lines = sentences_of(args.sentence)
    settings = DecodeSettings(args.beam, args.alpha, args.max_len, target_lang=args.target_lang)
    with ablated(lm, heads):
        outs, warnings = lm.translate_lines(lines, settings)
    said = {w.split(":", 1)[0] for w in warnings}
    for i, out in enumerate(outs):
        if not out and f"line {i + 1}" not in said:
            warnings.append(f"line {i + 1}: the translation is empty (the model wrote its end "
                            "token first)")  # fmt: skip
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("\n".join(outs))
    return 0 if any(outs) or not lines else 1


def main(argv=None) -> int:
    """Translate one sentence, or one sentence per line of --input, printing one per line.

    ``--ablate`` removes attention heads first (see core.ablate).
    """
    errors = (CheckpointError, HeadSpecError, OSError, UnicodeDecodeError)
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
