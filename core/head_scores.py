"""``python -m core.head_scores``: every decoder head's previous-token, duplicate-token and
induction scores and the in-context-learning score, or (``--head-stats``) the Maps section's
head statistics of one sentence, as JSON lines.

    python -m core.head_scores --checkpoint CK [--length 20] [--sequences 8] [--seed 0]
    python -m core.head_scores --checkpoint CK --head-stats --sentence S [--kind cross]
        [--words] [--target T] [--beam 1] [--alpha 0.6] [--max-len 50] [--target-lang L]

``--length`` defaults to the longest copy a model trained here on the induction task read
(its run's or ``.history``'s circuit scores say), else 20, as on the page. Both forms take a
decoder-only model's ``--prompt T``.

Prints one JSON line per head (``layer``, ``head``, ``previous_token``, ``duplicate_token``,
``induction``), then one summary line (``length``, ``sequences``, ``seed``, ``icl``, the
``early_token`` and ``late_token`` it compares, ``first_copy_loss``, ``repeat_loss``). The
library is ``core.attention.head_detectors``, as in the page's "Head scores". ``--head-stats``
translates the sentence as the Attention page does (``--target`` forced; an induction model
reads it as its tokens) and prints the rows of the Maps section's "Head statistics" table of
``--kind`` (None: no value), the supervised mark included (``head_stats.marked_rows``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from core.attention import head_detectors as hd
from core.attention.head_stats import marked_rows
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.attention.word_maps import shown_maps
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_decode_flags,
    add_model_flag,
    add_prompt_flag,
    decode_settings,
    run_command,
    terminal_safe,
)
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.model.parts import ALPHAS, BEAM_SIZES, GREEDY, MAX_LENS
from core.runs.circuit_history import trained_length

SENTENCE_FLAGS = {"sentence": "", "kind": "cross", "words": False, "target": ""}  # --head-stats's


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Head detector scores, or one sentence's head statistics.")
    add_model_flag(p)
    copy = f"random tokens per copy (default: an induction model's own, else {hd.LENGTH})"
    p.add_argument("--length", type=InRange(int, *hd.LENGTHS), help=copy)
    counts, seeds = InRange(int, *hd.SEQUENCE_COUNTS), InRange(int, *hd.SEEDS)
    p.add_argument("--sequences", type=counts, default=hd.SEQUENCES, help="sequences averaged over")
    p.add_argument("--seed", type=seeds, default=hd.SEED, help="of the random tokens")
    add_prompt_flag(p)
    stats = "one sentence's head statistics (the flags below)"
    p.add_argument("--head-stats", action="store_true", help=stats)
    p.add_argument("--sentence", help="--head-stats: the sentence (an induction model's tokens)")
    p.add_argument("--kind", choices=KINDS, help="--head-stats: the attention kind (default cross)")
    p.add_argument("--words", action="store_true", help="--head-stats: a subword model's words")
    p.add_argument("--target", help="--head-stats: a translation fed to the decoder instead")
    add_decode_flags(p, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))  # --head-stats's
    p.set_defaults(**SENTENCE_FLAGS)
    return p


def problem(args) -> str | None:
    """What is wrong with the flags, in one line (None if nothing)."""
    if not args.head_stats:
        given = [f"--{k}" for k, v in SENTENCE_FLAGS.items() if getattr(args, k) != v]
        if replace(decode_settings(args, GREEDY, None), prompt=GREEDY.prompt) != GREEDY:
            given.append("--beam, --alpha, --max-len, --target-lang")  # its decoding
        return f"{given[0]}: only with --head-stats" if given else None
    if (args.length, args.sequences, args.seed) != (None, hd.SEQUENCES, hd.SEED):
        return "--length, --sequences and --seed are the head scores': leave them out"
    return None if args.sentence.strip() else "give a sentence to translate (--sentence)"


def run(args) -> list[str]:
    """The lines to print: one per head, then the summary; or the head statistics."""
    if message := problem(args):
        raise CommandError(message)
    if args.head_stats:
        return head_stats_lines(args)
    m = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="head_scores")
    length = args.length or trained_length(args.checkpoint) or hd.LENGTH  # as the page's
    s = hd.head_scores(m, length, args.sequences, args.seed)
    return [json.dumps(row) for row in [*s.rows(), s.summary()]]


def head_stats_lines(args) -> list[str]:
    """One line per head of the kind: the Maps section's head statistics of the sentence."""
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="maps")
    if args.target and (why := lm.supports("force")):
        raise CommandError(why)
    settings = decode_settings(args, GREEDY, lm)  # as the page builds them, --prompt included
    read = ("", args.sentence) if lm.supports("sentence") else (args.sentence, args.target)
    t = translate_sentence(lm, read[0], settings, read[1])  # the page's reading of each model
    print("".join(terminal_safe(f"warning: {w}\n") for w in t.warnings), end="", file=sys.stderr)
    maps = shown_maps(SentenceMaps.from_translation(t), args.words)
    return [json.dumps(r, ensure_ascii=False) for r in marked_rows(maps, args.kind, lm.meta)]


def main(argv=None) -> int:
    """Print every head's detector scores and the in-context-learning score, or the head
    statistics of one sentence's translation (``--head-stats``)."""
    errors = (CheckpointError, hd.HeadScoresError, ValueError)  # and TranslationError
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
