"""``python -m core.attribute``: what each token contributes to each output token, as JSON.

    python -m core.attribute --checkpoint CK [--method M] [--beam N] [--layer L] [--head H]
        [--words] [--target "FRENCH"] SENTENCE
    python -m core.attribute --checkpoint CK --faithfulness [--sentences N] [--data FILE]
        [--method M ...] [--refresh]

CK is a studio checkpoint or a Hugging Face model folder (a hub id when online; a
multilingual one takes ``--target-lang``).

The first form prints one JSON object: ``method``, ``source``, ``prefix`` and ``output``
tokens, ``contributions`` (a row per output token over the source tokens then the prefix
tokens; non-negative, each row summing to 1), ``source_share`` and, for gradient methods,
the signed scores under ``raw``. With ``--target`` the model is teacher-forced on that
translation instead of decoding its own: ``output`` is the target's tokens, and ``target``,
``probability`` and ``rank`` (1 = the model's own first choice) give each one's standing
under the model. The second prints one JSON line per method (and the random
baseline): ``method``, ``spearman``, ``spearman_ci95``, ``deletion`` (the log-probability
drop with the top 1, 2, 3 words removed), ``sentences``, ``seconds``. The library is
``core.attribution``, the same functions the Attention page calls.
"""

from __future__ import annotations

import argparse
import json
import sys

from tqdm import tqdm

from core.attribution.explain import explain, in_words
from core.attribution.faithfulness import DEFAULT_METHODS, SENTENCES, faithfulness_for
from core.attribution.hugging_face import method_problem
from core.attribution.methods import MEAN, METHODS, AttributionError
from core.command_line import CommandError, run_command
from core.corpus.source import DataError
from core.model import hf_folder
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import CheckpointError
from core.model.decode import BEAM_SIZES, DecodeSettings, TranslationError
from core.model.opened import is_hugging_face, open_model


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(description="Token attribution of a translation, as JSON.")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--method", action="append", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--layer", type=int, default=None, help="attention method: decoder layer")
    p.add_argument("--head", default=MEAN, help="attention method: a head number or 'mean'")
    p.add_argument("--words", action="store_true", help="merge BPE pieces into words")
    p.add_argument("--faithfulness", action="store_true", help="score methods by occlusion")
    p.add_argument("--sentences", type=int, default=SENTENCES, help="validation sentences")
    p.add_argument("--data", default=None, help="corpus path or 'fra-eng' (default: its own)")
    p.add_argument("--refresh", action="store_true", help="recompute a cached faithfulness")
    p.add_argument("--target-lang", default="", help="a multilingual model's target language")
    p.add_argument("--target", default="", help="explain this translation, not the model's own")
    p.add_argument("sentence", nargs="*", help="the sentence to explain")
    return p


def problem(args) -> str | None:
    """What is wrong with the flags, in one line (None if nothing)."""
    unknown = [m for m in args.method or [] if m not in METHODS]
    if unknown:
        return f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}"
    if args.faithfulness:
        if args.target:
            return "--target explains one sentence: leave out --faithfulness"
        return "--sentences must be at least 1" if args.sentences < 1 else None
    if not " ".join(args.sentence).strip():
        return "give a sentence to explain (or --faithfulness)"
    if len(args.method or []) > 1:
        return "give one --method for a sentence"
    if not BEAM_SIZES[0] <= args.beam <= BEAM_SIZES[1]:
        return f"--beam must be {BEAM_SIZES[0]}..{BEAM_SIZES[1]}"
    if args.target and args.beam != 1:
        return "--target is fed to the decoder instead of a search: leave out --beam"
    return None


def progress_bar():
    """A progress callback drawing a tqdm bar (with ETA) on a terminal's stderr."""
    bar = tqdm(
        total=1000, disable=not sys.stderr.isatty(), bar_format="{l_bar}{bar}| {remaining} left"
    )

    def report(fraction: float, what: str) -> None:
        bar.set_description(what)
        bar.update(int(fraction * 1000) - bar.n)

    return report


def run(args) -> list[str]:
    """The lines to print (CommandError when a flag's value cannot be used)."""
    if message := problem(args):
        raise CommandError(message)
    lm = open_model(args.checkpoint, hub=True)
    target = args.target_lang or None
    if args.faithfulness:
        methods = tuple(args.method or DEFAULT_METHODS)
        if args.method and is_hugging_face(lm) and (why := method_problem(lm, args.method[0])):
            raise CommandError(why)
        path = hf_folder.resolve(args.checkpoint) if is_hugging_face(lm) else args.checkpoint
        result = faithfulness_for(
            lm, path, args.sentences, methods, args.data, progress_bar(), args.refresh, target
        )
        return [json.dumps(row) for row in result.methods]
    settings = DecodeSettings(beam_size=args.beam, target_lang=args.target_lang)
    t = translate_sentence(lm, " ".join(args.sentence), settings, args.target)
    e = explain(lm, t, (args.method or ["alti"])[0], args.layer, args.head)
    return [json.dumps((in_words(e) if args.words else e).to_json(), ensure_ascii=False)]


def main(argv=None) -> int:
    """Print an attribution (or the faithfulness table) of a checkpoint."""
    return run_command(
        parser(),
        run,
        (CheckpointError, DataError, AttributionError, TranslationError),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
