"""``python -m core.attribute``: what each token contributes to each output token, as JSON.

    python -m core.attribute --checkpoint CK [--method M] [--beam N] [--layer L] [--head H]
        [--words | --source-spans 0:2 --target-spans 1:3] [--target T] [--contrast T]
        [--contrast-source S] [--baseline unk --steps 50 ...] SENTENCE
    python -m core.attribute --checkpoint CK --input PAIRS.tsv --out RESULTS.jsonl [--method M]
    python -m core.attribute --checkpoint CK --faithfulness [--sentences N] [--data FILE]

CK: a studio checkpoint or a Hugging Face model folder (a hub id when online). The first form
prints one JSON object (tokens, ``contributions`` rows summing to 1, ``source_share``, ``raw``,
``step_scores``); the second a JSON line per line of a file (``source[TAB target[TAB contrast[TAB
contrast source]]]``), resumable; the third one per method and the random baseline.
"""

from __future__ import annotations

import argparse
import json
import sys

from core import command_line as cli
from core.attribution import explain as ex  # the sentence's flags, choices' checks, its JSON
from core.attribution.contrast import contrast_problem
from core.attribution.faithfulness import DEFAULT_METHODS, SAMPLE_SIZES, SENTENCES, faithfulness_for
from core.attribution.file_mode import FileModeError, attribute_file, out_problem
from core.attribution.gradients import add_choice_flags, choices_from
from core.attribution.methods import MEAN, METHODS, AttributionError, method_problem, unknown_method
from core.command_line import CommandError, CommandParser, InRange, run_command, terminal_progress
from core.corpus.source import DataError
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import CheckpointError
from core.model.opened import model_path, open_model
from core.model.parts import ALPHAS, BEAM_SIZES, GREEDY, MAX_LENS, TranslationError

ERRORS = (CheckpointError, DataError, AttributionError, TranslationError, FileModeError)


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Token attribution of a translation, as JSON.")
    p.add_argument("--checkpoint", required=True)
    methods = f"one of {', '.join(METHODS)} (default: alti; grad-input with --contrast)"
    p.add_argument("--method", action="append", help=methods)
    cli.add_decode_flags(p, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))  # and --target-lang
    p.add_argument("--layer", type=InRange.index(), help="attention method: decoder layer")
    p.add_argument("--head", type=InRange.index(MEAN), default=MEAN, help="attention: or 'mean'")
    p.add_argument("--words", action="store_true", help="merge BPE pieces into words")
    p.add_argument("--faithfulness", action="store_true", help="score methods by occlusion")
    sentences = InRange(int, *SAMPLE_SIZES)
    p.add_argument("--sentences", type=sentences, default=SENTENCES, help="validation sentences")
    p.add_argument("--data", default=None, help="corpus path or 'fra-eng' (default: its own)")
    p.add_argument("--refresh", action="store_true", help="recompute a cached faithfulness")
    cli.add_prompt_flag(p)  # a decoder-only model's template, as the page's box
    p.add_argument("--target", default="", help="explain this translation, not the model's own")
    p.add_argument("--contrast", default="", help="why the translation rather than this one")
    p.add_argument("--contrast-alignment", default="", help="steps compared, t-j pairs: 3-3,4-5")
    ex.add_sentence_flags(p)  # --source-spans --target-spans --contrast-source
    p.add_argument("--input", default="", help="explain every line of this file (TSV)")
    p.add_argument("--out", default="", help="with --input: the JSON-lines file, resumable")
    add_choice_flags(p)  # gradient methods: --baseline --steps --rule --aggregation ...
    p.add_argument("sentence", nargs="*", help="the sentence to explain")
    return p


def problem(args) -> str | None:
    """What is wrong with the flags, in one line (None if nothing)."""
    if args.contrast.strip():
        bad = [why for m in args.method or [] if (why := contrast_problem(m))]
        if bad:
            return bad[0]
    elif unknown := [m for m in args.method or [] if m not in METHODS]:
        return unknown_method(unknown[0])
    if args.faithfulness:
        if args.target or args.contrast:
            return "--target and --contrast explain one sentence: leave out --faithfulness"
        return ex.flags_problem(args, DEFAULT_METHODS)  # spans, a contrast source, choices
    if bool(args.input) != bool(args.out):
        return "--input and --out go together: the pairs file and the results file"
    if not " ".join(args.sentence).strip() and not args.input:
        return "give a sentence to explain (or --input FILE, or --faithfulness)"
    if len(args.method or []) > 1:
        return "give one --method for a sentence"
    if args.target and args.beam != 1:
        return "--target is fed to the decoder instead of a search: leave out --beam"
    return ex.flags_problem(args, DEFAULT_METHODS)


def run(args) -> list[str]:
    """The lines to print (CommandError when a flag's value cannot be used)."""
    if message := problem(args) or (args.input and out_problem(args.input, args.out)):
        raise CommandError(message)  # --out checked before the model loads
    lm = open_model(args.checkpoint, hub=True, section="attribution", prompt=args.prompt)
    target = cli.usable_target_lang(args.target_lang, lm)
    if args.faithfulness:
        methods = tuple(args.method or DEFAULT_METHODS)
        if args.method and (why := method_problem(lm, args.method[0])):
            raise CommandError(why)
        asked = (args.sentences, methods, args.data, terminal_progress(), args.refresh, target)
        asked = (*asked, choices_from(args))  # gradient methods also as chosen, rows of their own
        result = faithfulness_for(lm, model_path(args.checkpoint), *asked)
        return [json.dumps(r) for r in result.lines()]
    settings = cli.decode_settings(args, GREEDY, lm)  # the page's: beam, alpha, max_len, prompt
    method = ex.flag_methods(args, DEFAULT_METHODS)[0]
    if args.input:  # a summary line; the records go to --out
        asked = (method, settings, choices_from(args), terminal_progress())
        return [json.dumps(attribute_file(lm, args.input, args.out, *asked))]
    t = translate_sentence(lm, " ".join(args.sentence), settings, args.target)
    asked = (args.contrast, args.contrast_alignment), args.words, choices_from(args)
    asked = (*asked, args.contrast_source or "", (args.source_spans, args.target_spans))
    out = ex.sentence_json(lm, t, method, args.layer, args.head, *asked)
    return [json.dumps(out, ensure_ascii=False)]


def main(argv=None) -> int:
    """Print an attribution (or the faithfulness table) of a checkpoint."""
    return run_command(build_parser(), run, ERRORS, argv)


if __name__ == "__main__":
    sys.exit(main())
