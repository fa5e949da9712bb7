"""``python -m core.logit_attribution``: direct logit attribution of one output step, as JSON
lines.

    python -m core.logit_attribution --checkpoint CK --source "i am cold ."
        [--target "je suis froid ." | --prefix "je"] [--answer W [--wrong W2]] [--step T]
        [--beam N] [--alpha A] [--max-len M] [--target-lang C] [--accumulated | --per-layer]
        [--prompt T]

Prints one JSON line per term (``kind``: embed, head, attention bias, mlp, norm bias or output
bias; ``layer``, ``head``, ``attention``, ``sublayer`` where they apply; ``value``), or with
``--accumulated`` the stream after the embeddings and after each layer, or with
``--per-layer`` each layer's sum; then a summary line (``answer``, ``wrong``, ``step``,
``reads``, ``position``, ``logit``: the model's own logit (difference), ``sum``: the terms').
The step is one of the translation the Attention page explains with the same settings
(default: its last): the model's own, decoded with ``--beam``, ``--alpha``, ``--max-len`` and
``--target-lang``, or ``--target``, a translation teacher-forced instead (the page's typed
translation). ``--prefix``: target words teacher-forced as ``--target``, the step after them
by default (an empty prefix: the first step of the model's own). ``--answer`` defaults to the
word the step wrote, as the page's answer box does (after a prefix, which the page has not:
the model's likeliest word there). The library is ``core.attention.logit_attribution``, the
function the Attention page's "Direct logit attribution" section calls, on the translation it
gets from ``translate_sentence``, as the page does.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.logit_attribution import LogitAttributionError, logit_attribution
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_decode_flags,
    add_model_flag,
    add_prompt_flag,
    decode_settings,
    run_command,
)
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.model.parts import ALPHAS, BEAM_SIZES, GREEDY, MAX_LENS, TranslationError


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Direct logit attribution of one output step.")
    add_model_flag(p)
    p.add_argument("--source", required=True, help="the source sentence")
    forced = p.add_mutually_exclusive_group()
    forced.add_argument(
        "--target",
        default="",
        help="a translation to explain instead of the model's own, teacher-forced (the "
        "Attention page's typed translation; --beam, --alpha and --max-len then change nothing)",
    )
    forced.add_argument(
        "--prefix",
        default=None,
        help="target words before the step, teacher-forced as --target; the step: the one "
        'after them ("": the first)',
    )
    p.add_argument(
        "--answer",
        default="",
        help="the word whose logit is taken apart (default: the one written; after --prefix: "
        "the likeliest)",
    )
    p.add_argument("--wrong", default="", help="a word whose logit is subtracted")
    p.add_argument("--step", type=InRange.index(), default=None, help="the output step")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--accumulated", action="store_true", help="the stream after each layer")
    view.add_argument("--per-layer", action="store_true", help="each layer's sum")
    add_decode_flags(p, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))
    add_prompt_flag(p)
    return p


def run(args) -> list[str]:
    """The lines to print: one per term (or layer), then the summary."""
    if not args.source.strip():
        raise CommandError("give a source sentence (--source)")
    if args.wrong and not args.answer:
        raise CommandError("--wrong needs --answer: the logit difference of two words")
    m = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="logit_attribution")
    forced = args.target if args.prefix is None else args.prefix
    t = translate_sentence(m, args.source, decode_settings(args, GREEDY, m), forced)
    step = args.step
    if args.prefix is not None and not args.prefix.strip() and step is None:
        step = 0  # an empty prefix: the first step, nothing before it
    answer = args.answer or None
    if answer is None and args.prefix is not None and t.topk:  # the likeliest after the prefix
        answer = t.topk[len(t.out_ids) - 1 if step is None else step][0][0]
    a = logit_attribution(m, t, step, answer, args.wrong or None)
    view = "accumulated" if args.accumulated else "per_layer" if args.per_layer else "terms"
    return [json.dumps(line, ensure_ascii=False) for line in a.lines(view)]


def main(argv=None) -> int:
    """Print one output step's logit taken apart."""
    errors = (CheckpointError, LogitAttributionError, TranslationError, ValueError)
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
