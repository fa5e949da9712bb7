"""``python -m core.patch``: activation patching between two source sentences, as JSON lines.

    python -m core.patch --checkpoint CK --clean "the boy is tall ." --corrupt "the girl is tall ."
                         [--direction denoise|noise] [--prefix "le"] [--answers garçon fille]

The two sentences must have the same length in pieces. Both are translated greedily; at the
first step where the translations differ, the metric is the logit difference between the
clean run's token and the corrupted run's, the decoder fed their common prefix. Prints one
JSON line per component patched from the clean run into the corrupted one (``kind``,
``layer``, ``head`` for every head of the three kinds, or ``position`` for a layer's output,
the residual stream, kinds ``encoder_stream`` and ``decoder_stream``; ``effect``: 0 = the
corrupted run, 1 = the clean run), then one line with ``clean_metric``, ``corrupt_metric``,
``gap`` (their difference, which every effect is divided by), ``caveat`` (one line when that
gap is under one logit, too small to normalise by, and by how much, also printed on stderr
as ``warning: Caveat: …``; "" else), the step, both tokens and the prefix. ``--sites``: what
to patch (``SELECTIONS``, default ``heads stream_positions``; a head gains ``position`` or
``activation``, an MLP is ``encoder_mlp``/``decoder_mlp``; over ``MAX_COMPONENTS`` refused).
``--direction noise`` patches the corrupted run into the clean one (what is necessary, not
what suffices: 0 = the clean run unchanged, 1 = the corrupted run's). ``--prefix`` (target
words, "" for none) and ``--answers`` (the clean and the corrupted answer word) choose the
step and the metric where the translations agree; a prefix alone takes each run's most likely
word after it. CK: a studio checkpoint or a Hugging Face model folder (a hub id online);
``--target-lang``: a multilingual model's output language. Library: ``core.attention.patching``.
A masked language model is asked at both sentences' first mask (one position), no ``--prefix``.

``--method attribution``: attribution patching's estimate of every component at once
(``core.attention.attribution_patching``), each line's ``estimate`` beside its ``effect``
(null with ``--estimate-only``), the last line's ``spearman`` and ``largest_error``.
``--receivers logits|L.H,...`` (``kind:L.H`` where a model has several kinds of head): path
patching (``core.attention.path_patching``), one line per sender head (or ``--sender L.H``),
its effect through those receivers only, the other heads frozen as Wang et al. do
(``--freeze-mlps``: every MLP's output too, so a path to the logits is the direct effect).
"""

from __future__ import annotations

import argparse
import json
import sys

from core import command_line as cli
from core.attention.attribution_patching import attribution_patch
from core.attention.patch_methods import METHODS
from core.attention.patching import DEFAULT_SELECTION, DIRECTIONS, SELECTIONS, patch
from core.attention.path_patching import HEAD_FORMAT, path_patch_named
from core.command_line import CommandParser, add_prompt_flag, run_command, terminal_safe
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.model.parts import TranslationError


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, --clean and --corrupt."""
    p = CommandParser(
        description="The effect of patching each head and each residual position from one "
        "source sentence's run into another's."
    )
    p.add_argument(
        "--checkpoint", required=True, help="a studio checkpoint (.pt), a model folder or hub id"
    )
    p.add_argument("--clean", required=True, help="the source whose activations are patched in")
    p.add_argument("--corrupt", required=True, help="the source they are patched into")
    p.add_argument("--direction", choices=DIRECTIONS, default=DIRECTIONS[0])
    p.add_argument("--prefix", default=None, help='target words before the step ("" = none)')
    p.add_argument(
        "--answers", nargs=2, default=None, metavar=("CLEAN", "CORRUPT"), help="two answer words"
    )
    p.add_argument("--target-lang", default="", help="a multilingual model's target language")
    p.add_argument("--sites", nargs="+", choices=SELECTIONS, default=list(DEFAULT_SELECTION),
                   help="what to patch: " + "; ".join(SELECTIONS.values()))  # fmt: skip
    p.add_argument("--method", choices=METHODS, default=METHODS[0], help="attribution: the "
                   "gradient's estimate of every patch at once, beside real patching; path: "
                   "each head through --receivers")  # fmt: skip
    p.add_argument("--estimate-only", action="store_true", help="attribution without real patching")
    p.add_argument("--receivers", default=None,
                   help=f"path patching: logits, or heads {HEAD_FORMAT}")  # fmt: skip
    p.add_argument("--sender", default=None, help="path patching: one sender head (default: all)")
    p.add_argument("--freeze-mlps", action="store_true", help="path patching: freeze the MLPs too")
    add_prompt_flag(p)
    return p


def run(args: argparse.Namespace) -> list[str]:
    """One line per component, then the metrics."""
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="patch")
    answers = tuple(args.answers) if args.answers else None
    asked = {"direction": args.direction, "prefix": args.prefix, "answers": answers,
             "target_lang": cli.usable_target_lang(args.target_lang, lm)}  # fmt: skip
    if args.receivers is None and (
        args.sender is not None or args.method == "path" or args.freeze_mlps
    ):
        raise TranslationError(
            "--sender, --freeze-mlps and --method path need --receivers (heads, or logits)."
        )
    if args.receivers is not None and args.method == "attribution":
        raise TranslationError("--receivers asks for path patching, not --method attribution.")
    if args.receivers is not None:
        done = path_patch_named(
            lm, args.clean, args.corrupt, args.receivers, args.sender or "", **asked,
            freeze_mlps=args.freeze_mlps,
        )  # fmt: skip
    elif args.method == "attribution":
        done = attribution_patch(lm, args.clean, args.corrupt, None, not args.estimate_only,
                                 **asked, selection=args.sites)  # fmt: skip
    else:
        done = patch(lm, args.clean, args.corrupt, None, **asked, selection=args.sites)
    result = getattr(done, "patching", done)  # the rows and metrics every method shares
    if result.caveat:  # for whoever reads the terminal, not only the JSON's last line
        print(terminal_safe(f"warning: {result.caveat}"), file=sys.stderr)
    lines = [json.dumps(row, ensure_ascii=False) for row in result.rows]
    return [*lines, json.dumps(done.summary(), ensure_ascii=False)]


def main(argv=None) -> int:
    """Print the effect of patching every component as JSON lines."""
    return run_command(build_parser(), run, (CheckpointError, TranslationError), argv)


if __name__ == "__main__":
    sys.exit(main())
