"""Speed of "Explain, round two" on the shipped model: a typed target, contrastive integrated
gradients, the full patching grid and the projector.

    python bench/explain_speed.py [--checkpoint checkpoints/fra-eng-small.pt] [--runs 3]
        [--repeats 5]

The same library calls the pages and commands make, without figures: ``TranslationModel.force`` (a
typed target teacher-forced, with every attention map, each token's probability and rank),
``explain_contrast`` with integrated gradients (a foil that differs in one word), ``patch``
on a 10-word pair (every head of the three kinds and every layer x position of both
residual streams), and ``project`` of 200 validation sentences with PCA (every encoder
layer; with the validation split rebuilt, as the command does, and with the sentences
already read, as the page does after its first projection). The peer, timed in the same
runs: one greedy translation with all maps. Each line: the median of ``--runs``
interleaved runs, each the median of ``--repeats`` timings after two warm-up calls (the
projector's rebuilds: 1 timing). Needs FRA_ENG_ZIP or the corpus in the data folder.
"""

from __future__ import annotations

import argparse
import os

import torch
from common import ROOT, median
from decode_latency import time_ms

from core.attention.patching import patch
from core.attention.projector import ALL_LAYERS, project, sentences_of
from core.attribution.explain import explain_contrast
from core.model.checked_translation import translate_sentence
from core.model.opened import open_model
from core.model.parts import DecodeSettings

SENTENCE = "the boy is very tall and he plays well ."  # 10 words, 11 pieces with <eos>
CORRUPT = "the girl is very tall and she plays well ."
TARGET = "le garçon est très grand et il joue bien ."
FOIL = "le garçon est très grand et il joue mal ."
GOALS_MS = {
    "typed target, every map": 50,
    "contrastive integrated gradients": 3000,
    "patching grid, 10-word pair": 5000,
    "projector, 200 sentences, PCA (split rebuilt)": 10000,
    "projector, 200 sentences, PCA (sentences read)": 10000,
}


def main() -> None:
    """Print the medians and the goals."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    lm = open_model(args.checkpoint)
    t = translate_sentence(lm, SENTENCE)
    print(f"{' '.join(t.output_tokens)} ({len(t.src_ids)} source, {len(t.out_ids)} output pieces)")
    read = sentences_of(lm, 200)
    settings = DecodeSettings()
    calls = {
        "peer: greedy translation with all maps": (lambda: translate_sentence(lm, SENTENCE), 0),
        "typed target, every map": (lambda: lm.force(SENTENCE, TARGET, settings), 0),
        "contrastive integrated gradients": (
            lambda: explain_contrast(lm, t, FOIL, "integrated-gradients"),
            0,
        ),
        "patching grid, 10-word pair": (lambda: patch(lm, SENTENCE, CORRUPT), 0),
        "projector, 200 sentences, PCA (split rebuilt)": (
            lambda: project(lm, "encoder", ALL_LAYERS, "pca", 2, 200),
            1,
        ),
        "projector, 200 sentences, PCA (sentences read)": (
            lambda: project(lm, "encoder", ALL_LAYERS, "pca", 2, read),
            0,
        ),
    }
    results = {name: [] for name in calls}
    for _ in range(args.runs):  # interleaved: each run times every call
        for name, (fn, heavy) in calls.items():
            results[name].append(time_ms(fn, 1 if heavy else args.repeats)[0])
    peer = median(results["peer: greedy translation with all maps"])
    for name, runs in results.items():
        ms, goal = median(runs), GOALS_MS.get(name)
        verdict = f"goal < {goal} ms: {'ok' if ms < goal else 'OVER'}" if goal else ""
        spread = f"runs {min(runs):.1f}-{max(runs):.1f}, {ms / peer:.1f}x the peer"
        print(f"  {name:48s} {ms:9.1f} ms  ({spread})  {verdict}")


if __name__ == "__main__":
    main()
