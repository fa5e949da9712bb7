"""Speed of the "Inside a head" and "Logit lens" sections on the shipped model.

    python bench/inside_head_speed.py [--checkpoint checkpoints/fra-eng-small.pt]
        [--repeats 9] [--runs 3] [--threads N]

On a 15-token sentence and its greedy translation: the q·k view of one head (cross
attention, last layer, head 0, the middle query: one teacher-forced pass, then that head's
q, k, scores and softmax), and the logit lens of the whole translation (every decoder
layer's output through the output layer, top 5 words and the chosen word's rank). The same
library calls the page makes (``core.attention.query_key``, ``core.attention.logit_lens``),
without the figures. Each line: the median of ``--runs`` runs of ``--repeats`` timings, with
the peer measured in the same run (one greedy translation with all attention maps).
"""

from __future__ import annotations

import argparse
import os

import torch
from common import ROOT, median
from decode_latency import time_ms

from core.attention.logit_lens import logit_lens
from core.attention.query_key import query_key_view
from core.model.checked_translation import translate_sentence
from core.model.opened import open_model

SENTENCE = "i don't know if tom will be able to come to the party tomorrow ."  # 15 words
GOALS_MS = {"q·k view, one head": 100, "logit lens": 50}


def main() -> None:
    """Print the medians and the goals."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    lm = open_model(args.checkpoint)
    t = translate_sentence(lm, SENTENCE)
    print(f"sentence: {len(t.src_ids)} source tokens, {len(t.out_ids)} output tokens")
    last = lm.cfg.num_decoder_layers - 1
    calls = {
        "peer: greedy translation with all maps": lambda: translate_sentence(lm, SENTENCE),
        "q·k view, one head": lambda: query_key_view(lm, t, "cross", last, 0, len(t.out_ids) // 2),
        "logit lens": lambda: logit_lens(lm, t),
    }
    medians = {name: [] for name in calls}
    for _ in range(args.runs):  # interleaved: each run times every call once
        for name, fn in calls.items():
            medians[name].append(time_ms(fn, args.repeats)[0])
    for name, runs in medians.items():
        ms = median(runs)
        goal = GOALS_MS.get(name)
        verdict = f"goal < {goal} ms: {'ok' if ms < goal else 'OVER'}" if goal else ""
        spread = f"runs {min(runs):.1f}-{max(runs):.1f}"
        print(f"  {name:40s} {ms:7.1f} ms  ({spread})  {verdict}")


if __name__ == "__main__":
    main()
