"""``python -m core.inside_head``: one head's q·k taken apart, or the decoder's logit lens, as JSON.

    python -m core.inside_head --checkpoint CK --sentence S --kind cross --layer L --head H
        --query I [--beam N] [--alpha A] [--max-len M] [--target-lang C] [--target T]
    python -m core.inside_head --checkpoint CK --sentence S --logit-lens [--top K] [...]
    python -m core.inside_head --checkpoint CK --sentence S --head-roles [--prompt T] [...]

Every form explains the translation the Attention page explains with the same settings: the
model's own, decoded with ``--beam``, ``--alpha``, ``--max-len`` and ``--target-lang``, or
``--target``, a translation teacher-forced instead (the page's typed translation).

The first form prints one JSON line: ``kind``, ``layer``, ``head``, ``query``,
``query_token``, ``key_tokens``, ``head_width``, the query vector ``q``, the key vectors
``keys``, the scaled ``scores`` q·k/√d_k, the ``mask`` and the softmax ``weights``. The
second prints one JSON line per output step: ``step``, ``reads``, ``chosen`` and, per
decoder layer, its ``top`` words with probabilities and the chosen word's rank and
probability; ``settled``, the layer from which on the chosen word is every layer's top word
(None: not even the last's), and ``summary``, what the page's caption states (``projected``:
what each layer's output is passed through; ``early`` of ``steps`` chosen words are the top
word from a layer before the last on). The third prints one JSON line per head of each
attention (``kind``: encoder, decoder_self, cross, or a one-stack model's ``sequence``): the
scores of the roles that attention can have (``previous``, ``next``, ``first``, ``last``,
``duplicate``, ``induction``; None where no row reads one) and the ``roles`` they reach, the
figures the Maps' "What each head does" draws. The library is ``core.attention.query_key``,
``core.attention.logit_lens`` and ``core.attention.head_roles``, the same functions the
Attention page calls.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.head_roles import head_roles
from core.attention.kinds import KINDS
from core.attention.logit_lens import TOP_K, logit_lens
from core.attention.query_key import InsideHeadError, query_key_view
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

MAX_TOP = 100  # the most words --top may ask for
HEAD_VIEW = {"kind": "cross", "layer": 0, "head": 0, "query": 0}  # one head's q·k: defaults


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Inside one attention head, or the logit lens.")
    add_model_flag(p)
    p.add_argument("--sentence", required=True, help="the source sentence to translate")
    p.add_argument("--kind", default=HEAD_VIEW["kind"], help=f"one of {', '.join(KINDS)}")
    p.add_argument("--layer", type=InRange.index(), default=0, help="layer, counted from 0")
    p.add_argument("--head", type=InRange.index(), default=0, help="head, counted from 0")
    p.add_argument("--query", type=InRange.index(), default=0, help="query token's position")
    view = p.add_mutually_exclusive_group()  # one view: one head's q·k (by default) or these
    view.add_argument("--logit-lens", action="store_true", help="the decoder's logit lens instead")
    view.add_argument("--head-roles", action="store_true", help="every head's roles, by attention")
    top = InRange(int, 1, MAX_TOP)
    p.add_argument("--top", type=top, default=TOP_K, help="logit lens: words kept per cell")
    add_decode_flags(p, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))
    p.add_argument(
        "--target",
        default="",
        help="a translation to explain instead of the model's own, teacher-forced (the "
        "Attention page's typed translation; --beam, --alpha and --max-len then change nothing)",
    )
    add_prompt_flag(p)
    return p


def problem(args) -> str | None:
    """What is wrong with the flags, in one line (None if nothing)."""
    if not args.sentence.strip():
        return "give a sentence to translate (--sentence)"
    if args.kind not in KINDS:
        return f"unknown attention kind {args.kind!r}; use one of {', '.join(KINDS)}"
    picked = [f"--{k}" for k, v in HEAD_VIEW.items() if getattr(args, k) != v]
    if picked and (args.logit_lens or args.head_roles):  # they read every head: ignored
        return f"{'/'.join(picked)} pick one head's q·k view: leave them out with this view"
    if args.top != TOP_K and not args.logit_lens:
        return "--top counts the logit lens's words: give --logit-lens or leave --top out"
    return None


def run(args) -> list[str]:
    """The lines to print (CommandError when a flag's value cannot be used)."""
    if message := problem(args):
        raise CommandError(message)
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt)
    t = translate_sentence(lm, args.sentence, decode_settings(args, GREEDY, lm), args.target)
    if args.logit_lens or args.head_roles:
        rows = logit_lens(lm, t, args.top).rows() if args.logit_lens else head_roles(lm, t).rows()
        return [json.dumps(row, ensure_ascii=False) for row in rows]
    v = query_key_view(lm, t, args.kind, args.layer, args.head, args.query)  # a one-stack
    # model's --query counts the whole sequence's tokens (a prompt's and output's)
    return [json.dumps(v.to_json(), ensure_ascii=False)]


def main(argv=None) -> int:
    """Print one head's q·k view or the logit lens of a checkpoint's translation."""
    errors = (CheckpointError, InsideHeadError, TranslationError, ValueError)
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
