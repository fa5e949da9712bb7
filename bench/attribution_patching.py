"""Attribution patching against real activation patching: how well the gradient's estimate
ranks the components (Spearman), its largest absolute error, and the time of each.

    python bench/attribution_patching.py [--runs 3] [--layers 12] [--skip-random]

Models: every shipped checkpoint (``checkpoints/*.pt``) on a sentence pair in its source
language, and GPT-2-sized random models (tests/lm_tiny.py's GPT-2 and Llama configurations
scaled to GPT-2 small's dimensions, 768 wide with 12 heads and 12 layers, or ``--layers``;
random weights, its tiny byte-level vocabulary) on a prompted pair. The same library calls the
page and ``python -m core.patch --method attribution`` make: ``attribution_patch`` with
``exact=False`` (one pass, one pass with a backward pass) and ``patch`` (every component,
batched), both asking the question found once (its prefix and answers given, so that neither
time holds the greedy translations). Each time: the median (and the fastest) of ``--runs``
interleaved runs after one warm-up call each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import ROOT

from core.attention.attribution_patching import attribution_patch, closeness
from core.attention.patching import patch
from core.model.opened import open_model
from core.model.parts import TranslationError

PAIRS = {  # source language -> a pair of one length that changes the answer
    "en": (
        "the boy is very tall and he plays well .",
        "the girl is very tall and she plays well .",
    ),
    "fr": ("le garçon est très grand .", "la fille est très grande ."),
}
LM_PAIR = ("the boy is tall .", "you are tall .")  # one length in the tiny vocabulary
LM_QUESTION = {"prefix": "", "answers": ("the", "he")}


def seconds(fn) -> tuple[float, object]:
    """(seconds one call took, its result)."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def interleaved(fns, runs: int) -> list[tuple[float, float, object]]:
    """Each of ``fns`` called once to warm up, then ``runs`` rounds of one call each in turn:
    (median seconds, fastest seconds, the last result) per function."""
    results = [fn() for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t, results[i] = seconds(fn)
            times[i].append(t)
    return [(statistics.median(t), min(t), r) for t, r in zip(times, results)]


def fixed_question(m, pair, asked: dict) -> dict:
    """The question found by translating, given back as a prefix and two answers, so that the
    times compare the patching alone (not the two greedy translations both would start with);
    the question as found where its words do not round-trip."""
    found = patch(m, *pair, [], **asked)
    given = {"prefix": " ".join(found.prefix[1:]), "answers": (found.answer, found.wrong)}
    try:
        again = patch(m, *pair, [], **given)
    except TranslationError:
        return asked
    same = (again.prefix, again.answer, again.wrong) == (found.prefix, found.answer, found.wrong)
    return given if same else asked


def compare(name: str, m, pair, asked: dict, runs: int) -> None:
    """One line: components, Spearman, largest error, both times and their ratio."""
    asked = fixed_question(m, pair, asked)
    (t_est, fast_est, est), (t_real, fast_real, real) = interleaved(
        [
            lambda: attribution_patch(m, *pair, exact=False, **asked),
            lambda: patch(m, *pair, **asked),
        ],
        runs,
    )
    guessed = [r["estimate"] for r in est.patching.rows]
    rho, largest = closeness(guessed, [r["effect"] for r in real.rows])
    heads = [r for r, e in zip(real.rows, guessed) if "head" in r]
    rho_heads, largest_heads = closeness(
        [e for r, e in zip(real.rows, guessed) if "head" in r], [r["effect"] for r in heads]
    )
    print(
        f"{name:34s} {len(guessed):5d} components (gap {real.gap:+.2f}): Spearman {rho:.3f} "
        f"(heads {rho_heads:.3f}), largest error {largest:.3f} (heads {largest_heads:.3f}); "
        f"attribution {t_est * 1000:.0f} ms (fastest {fast_est * 1000:.0f}), real "
        f"{t_real * 1000:.0f} ms (fastest {fast_real * 1000:.0f}): {t_real / t_est:.1f}× faster",
        flush=True,
    )


def random_lm(family: str, layers: int, folder: Path):
    """tests/lm_tiny.py's ``family`` at GPT-2 small's width and heads, ``layers`` deep."""
    sys.path.insert(0, str(ROOT))
    from transformers import AutoModelForCausalLM

    from core.model.lm_loading import load
    from tests import lm_tiny

    tokenizer = lm_tiny.byte_level_tokenizer(bos=family == "llama")
    config = lm_tiny.tiny_lm_config(family, tokenizer)
    if family == "gpt2":
        config.update({"n_embd": 768, "n_head": 12, "n_layer": layers, "n_inner": 3072})
    else:
        sizes = {"hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 12,
                 "num_hidden_layers": layers, "intermediate_size": 3072}  # fmt: skip
        config.update(sizes)
    return load(lm_tiny.saved(folder / family, AutoModelForCausalLM, config, tokenizer, 0))


def main() -> None:
    """Every shipped checkpoint, then the GPT-2-sized random models."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--layers", type=int, default=12, help="the random models' depth")
    p.add_argument("--skip-random", action="store_true")
    args = p.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {load}", flush=True)
    for path in sorted((ROOT / "checkpoints").glob("*.pt")):
        m = open_model(str(path))
        pair = PAIRS[m.languages[0]] if m.languages[0] in PAIRS else PAIRS["en"]
        compare(path.name, m, pair, {}, args.runs)
    if args.skip_random:
        return
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("gpt2", "llama"):
            m = random_lm(family, args.layers, Path(tmp))
            compare(f"random {family} 768×12 heads×{args.layers}", m, LM_PAIR, LM_QUESTION,
                    args.runs)  # fmt: skip


if __name__ == "__main__":
    main()
