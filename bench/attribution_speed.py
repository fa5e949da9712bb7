"""Attribution speed and faithfulness on the shipped model.

    python bench/attribution_speed.py [--checkpoint checkpoints/fra-eng-small.pt]
        [--repeats 7] [--sentences 200] [--faith-repeats 3] [--ig-sentences 50] [--threads N]

Part 1: the median milliseconds of each method on a 15-token sentence and its translation,
beside the peer measured in the same run: one greedy translation of the same sentence with
all its attention maps (what the Attention page does before anything else).
Part 2 (needs fra-eng.zip: FRA_ENG_ZIP, else ../shared/data/fra-eng.zip): the faithfulness
table on the first N validation sentences, every method but integrated gradients, computed
afresh each time (median seconds of several runs), then integrated gradients alone on a
smaller sample. The table is what ``python -m core.attribute --faithfulness`` prints.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from common import ROOT, corpus_path, median
from decode_latency import time_ms

from core.attribution.faithfulness import DEFAULT_METHODS, faithfulness_for
from core.attribution.methods import METHODS, attribute
from core.model.checked_translation import translate_sentence
from core.model.opened import open_model

SENTENCE = "i don't know if tom will be able to come to the party tomorrow ."  # 15 words
GOALS_MS = {  # the goals for one 15-token sentence
    "attention": 50,
    "rollout": 50,
    "norm": 50,
    "alti": 50,
    "grad-input": 100,
    "value-zeroing": 500,
    "integrated-gradients": 3000,
}


def speed(lm, repeats: int) -> None:
    """Part 1: each method's median time on one sentence, and the translation peer."""
    t = translate_sentence(lm, SENTENCE)
    print(f"sentence: {len(t.src_ids)} source tokens, {len(t.out_ids)} output tokens")
    peer, _ = time_ms(lambda: translate_sentence(lm, SENTENCE), repeats)
    print(f"  {'peer: greedy translation with all maps':42s} {peer:8.1f} ms")
    for method in METHODS:
        runs = repeats if method != "integrated-gradients" else max(3, repeats // 2)
        ms, all_runs = time_ms(lambda m=method: attribute(lm, t.src_ids, t.out_ids, m), runs)
        ok = "ok" if ms < GOALS_MS[method] else "OVER"
        print(
            f"  {method:42s} {ms:8.1f} ms  x{ms / peer:5.2f} of the peer  "
            f"(min {min(all_runs):.1f}, max {max(all_runs):.1f}; "
            f"goal < {GOALS_MS[method]} ms: {ok})"
        )


def table(result) -> None:
    """Print a faithfulness table."""
    for r in result.methods:
        ci = r["spearman_ci95"]
        rho = "   n/a" if r["spearman"] is None else f"{r['spearman']:+.3f}"
        ci = "" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
        drops = " ".join("  n/a" if d is None else f"{d:5.2f}" for d in r["deletion"])
        print(f"  {r['name']:28s} rho {rho} {ci:18s} deletion k=1,2,3: {drops}")


def faithful(lm, checkpoint: str, sentences: int, repeats: int, ig_sentences: int) -> None:
    """Part 2: the faithfulness table, timed, and integrated gradients on a smaller sample."""
    corpus_path()
    times, result = [], None
    for _ in range(repeats):
        result = faithfulness_for(lm, checkpoint, sentences, DEFAULT_METHODS, refresh=True)
        times.append(result.seconds)
    print(
        f"\nfaithfulness, {result.sentences} sentences, {result.tokens} output tokens, "
        f"{len(DEFAULT_METHODS)} methods + random: median {median(times):.1f} s "
        f"(runs {', '.join(f'{s:.1f}' for s in times)}; goal < 90 s)"
    )
    table(result)
    if ig_sentences:
        ig = faithfulness_for(
            lm, checkpoint, ig_sentences, ("integrated-gradients", "attention"), refresh=True
        )
        print(
            f"\nintegrated gradients beside raw attention, {ig.sentences} sentences: "
            f"{ig.seconds:.1f} s"
        )
        table(ig)


def main() -> None:
    """Print attribution timings and the faithfulness table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--faith-repeats", type=int, default=3)
    p.add_argument("--ig-sentences", type=int, default=50)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["ATTENTION_STUDIO_RUNS"] = tempfile.mkdtemp(prefix="attribution-bench-")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    lm = open_model(args.checkpoint)
    speed(lm, args.repeats)
    if args.sentences:
        faithful(lm, args.checkpoint, args.sentences, args.faith_repeats, args.ig_sentences)


if __name__ == "__main__":
    main()
