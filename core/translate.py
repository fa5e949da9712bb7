"""``python -m core.translate``: translate sentences with a checkpoint, a Hugging Face model
folder or (online) a hub id; plain text, or (``--json``, ``--target``, ``--d2l-check``) JSON
lines of what the Translate page shows, from the same library functions."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from core import command_line as cli
from core.attention.ablation import HeadSpecError, ablated, heads_of
from core.command_line import run_command
from core.model import checked_translation as checked
from core.model.checkpoints import CheckpointError
from core.model.d2l_check import d2l_check, d2l_problem
from core.model.opened import open_model
from core.model.parts import ALPHAS, BEAM_SIZES, GREEDY, MAX_LENS

SENTENCE_HELP = (
    'the sentence to translate; several quoted sentences ("i am cold ." "go .") are '
    "translated one per line, as --input's lines; unquoted words make one sentence"
)
PAGE_FLAGS = {  # the Translate page's figures, as JSON lines (core.model.checked_translation)
    "--json": dict(action="store_true", help="per sentence: text, log_prob, steps, top candidates"),
    "--target": dict(metavar="TEXT", help="rate TEXT as a translation of the one sentence"),
    "--d2l-check": dict(
        action="store_true", help="the d2l chapter's check, in the model's direction: BLEU and rows"
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, decoding flags, --input, --ablate, the page's figures and the sentence."""
    p = cli.CommandParser(
        description="Translate English to French with a checkpoint, or with a Hugging Face "
        "encoder-decoder (a save_pretrained folder, or a hub id when online)."
    )
    cli.add_model_flag(p)
    cli.add_decode_flags(p, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))
    p.add_argument("--input", help="a text file with one sentence per line")
    p.add_argument(
        "--ablate",
        default="",
        metavar="KIND:LAYER:HEAD[,...]",
        help="remove these attention heads (kinds: encoder, decoder_self, cross; from 0)",
    )
    page = p.add_argument_group("the Translate page's figures, printed as JSON lines")
    for flag, how in PAGE_FLAGS.items():
        page.add_argument(flag, **how)
    p.add_argument("sentence", nargs="*", help=SENTENCE_HELP)
    cli.add_prompt_flag(p)
    return p


def sentences_of(words: list[str]) -> list[str]:
    """The sentences of the command line: each argument one where any holds a space (they
    were quoted: ``"i am cold ." "go ."``), else all of them one (``i am cold .``)."""
    if any(len(w.split()) > 1 for w in words):
        return [w for w in words if w.strip()]
    return [" ".join(words)]


def lines_of(args: argparse.Namespace) -> list[str]:
    """The sentences to translate (--input's lines, or the command line's); CommandError when
    the flags ask for none (a blank sentence too, but beside --target: a token-sequence
    model's), or for ones --target or --d2l-check do not take."""
    if args.d2l_check == bool(args.input or args.sentence):
        raise cli.CommandError("give a sentence or --input FILE, or --d2l-check alone")
    blank = not any(map(str.strip, sentences_of(args.sentence)))  # --target's model may read ''
    if args.sentence and blank and not args.input and args.target is None:
        raise cli.CommandError("the sentence is empty: give one to translate, or --input FILE")
    one = not args.input and len(sentences_of(args.sentence)) == 1
    if args.target is not None and not (one and args.target.strip()):
        raise cli.CommandError("--target rates a translation (not blank) of exactly one sentence")
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            return f.read().splitlines()
    return sentences_of(args.sentence) if args.sentence else []


def run(args: argparse.Namespace) -> int:
    """Print one translation per line (warnings on stderr), or the JSON lines of --json,
    --target or --d2l-check (``translation_records``, ``rated_target``, ``d2l_check``, as the
    Translate page shows them); 1 when no translation could be made."""
    lines = lines_of(args)
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt)
    heads = heads_of(args.ablate, lm.cfg, lm.head_kinds)
    settings = cli.decode_settings(args, GREEDY, lm)  # the page's, its prompt too
    if args.d2l_check and (problem := d2l_problem(lm)):
        raise cli.CommandError(problem)
    if args.target is None and lm.supports("sentence"):  # it continues no sentence
        raise cli.CommandError(checked.SEQUENCE_ONLY)
    with ablated(lm, heads):
        if args.d2l_check:
            records = [asdict(d2l_check(lm, settings))]
        elif args.target is not None:
            records = [checked.rated_target(lm, lines[0], args.target, settings)]
        elif args.json:
            records = checked.translation_records(lm, lines, settings)
        else:
            outs, warnings = checked.lines_translated(lm, lines, settings)
            said = "".join(f"warning: {w}\n" for w in warnings)
            print(cli.terminal_safe(said), end="", file=sys.stderr)
            print("\n".join(cli.terminal_safe(out) for out in outs))
            return 0 if any(outs) or not lines else 1
    said = (cli.terminal_safe(json.dumps(r, ensure_ascii=False)) for r in records)
    print("".join(f"{line}\n" for line in said), end="")
    return 0 if not records or any("error" not in r for r in records) else 1


def main(argv=None) -> int:
    """Translate sentences (see the module's docstring); ``--ablate`` removes heads first."""
    errors = (CheckpointError, HeadSpecError, OSError, UnicodeDecodeError)
    return run_command(build_parser(), run, (*errors, checked.TranslationError), argv)


if __name__ == "__main__":
    sys.exit(main())
