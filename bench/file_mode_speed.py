"""The whole-file attribution mode against inseq's batched attribution, one thread.

    python bench/file_mode_speed.py [--pairs 50] [--runs 3] [--steps 50]
        [--families marian,bart,gpt2,llama] [--methods grad-input,integrated-gradients]
        [--batch 10] [--torch-softmax]

On tiny random Hugging Face models (the tests' ``tests/hf_tiny.py`` and ``tests/lm_tiny.py``,
built in a temporary folder), ``--pairs`` source-target pairs of 4 to 16 words each: the CPU
seconds (``time.process_time``, one thread) of the studio's file mode
(``core.attribution.file_mode.attribute_file``: every pair teacher-forced, explained and
written as a JSON line, with its step scores) against inseq 0.7.1's
``model.attribute(sources, targets, batch_size=--batch, n_steps=--steps)`` on the same pairs
(a decoder-only model's: its prompts and the prompts followed by the targets). inseq is not a
dependency: install it apart, ``pip install --no-deps --target /tmp/inseq_site inseq==0.7.1
jaxtyping treescope``, and run with ``PYTHONPATH=/tmp/inseq_site``.

Each figure is the median of ``--runs`` timings after a warm-up, the studio and inseq timed in
turn in every round (``common.interleaved_cpu_seconds``); the ratio is studio / inseq
(the goal of issue 67: at most 0.5 on both methods). ``--one-at-a-time`` times the file mode
as it was before batching (every pair alone), for the record; ``--plain`` also times it with
every product as it was before ``core.attribution.products``, in the same rounds;
``--whole-passes`` with passes not cut to ``batched_gradients.ATTENTION_BYTES``, likewise;
``--torch-softmax`` with torch's own softmax on short rows (``products.ShortSoftmax`` off).
``--joint-projection`` with the output steps projected onto the vocabulary together, as
before ``Passes.log_probs_at`` projected each on its own. ``--real-sizes`` builds the
encoder-decoders at their hub checkpoints' sizes instead (``common.REAL_SIZES``, random
weights, the same word tokenizer): Marian as opus-mt-en-fr (6 + 6 layers, 512 wide, 8 heads,
a 2048-wide MLP, 59,514 pieces), BART as bart-base (6 + 6, 768, 12 heads, 3072, 50,265);
there the vocabulary's projection and the stacks' products weigh what they weigh in use, not
a tiny model's per-operation costs (give it fewer ``--pairs`` and ``--steps``: minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from common import (
    ROOT,
    interleaved_cpu_seconds,
    use_real_sizes,
    with_joint_projection,
    with_torch_softmax,
    without_narrow_products,
)

sys.path.insert(0, str(ROOT / "tests"))

from ig_speed import peer_texts  # noqa: E402

from core.attribution import batched_gradients, file_mode  # noqa: E402
from core.attribution.gradients import GradientChoices  # noqa: E402
from core.model.opened import open_model  # noqa: E402
from core.model.parts import DecodeSettings  # noqa: E402

ENGLISH = "i am cold the boy is tall . you are hot we"
FRENCH = "je suis froid le garçon est grand . tu es chaud nous"
GREEDY = DecodeSettings()
EXTRA = ("plain products", "whole passes", "torch softmax", "joint projection")  # --plain, ...
INSEQ_METHODS = {"grad-input": "input_x_gradient", "integrated-gradients": "integrated_gradients"}


def pairs(n: int) -> list[tuple[str, str]]:
    """``n`` pairs of 4 to 16 words, each a different cut of the word lists."""
    english, french, out = ENGLISH.split(), FRENCH.split(), []
    for i in range(n):
        k, j = 4 + (i * 5) % 13, 4 + (i * 7) % 13
        src = [english[(i + w) % len(english)] for w in range(k)]
        tgt = [french[(2 * i + w) % len(french)] for w in range(j)]
        out.append((" ".join(src), " ".join(tgt)))
    return out


def studio(m, folder: Path, texts, method: str, steps: int, one_at_a_time: bool):
    """A call running the file mode on the pairs into a fresh output file."""
    tsv = folder / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in texts), encoding="utf-8")
    choices = GradientChoices(steps=steps)
    out = folder / "out.jsonl"

    def call():
        out.unlink(missing_ok=True)
        if one_at_a_time:
            file_mode.attribute_file(m, tsv, out, method, choices=choices, batch_bytes=0)
        else:
            file_mode.attribute_file(m, tsv, out, method, choices=choices)

    return call


def inseq_call(inseq, folder: Path, m, texts, method: str, args):
    """A call running inseq's batched attribution of the same pairs (None without inseq)."""
    if inseq is None:
        return None
    model = inseq.load_model(str(folder), INSEQ_METHODS[method])
    sources, targets = [s for s, _ in texts], [t for _, t in texts]
    if m.reads_prompt:  # a decoder-only model: its prompt, then the whole sequence explained
        sources, targets = zip(*(peer_texts(m, m.force(s, t, GREEDY), s, t) for s, t in texts))
        sources, targets = list(sources), list(targets)
    kw = {"n_steps": args.steps} if method == "integrated-gradients" else {}
    return lambda: model.attribute(
        sources, targets, batch_size=args.batch, show_progress=False, **kw
    )


def whole_passes(call):
    """``call`` with passes cut by rows and summed gradients only (no ATTENTION_BYTES)."""

    def whole():
        kept = batched_gradients.ATTENTION_BYTES
        batched_gradients.ATTENTION_BYTES = 2**62
        try:
            call()
        finally:
            batched_gradients.ATTENTION_BYTES = kept

    return whole


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=10, help="inseq's batch_size")
    ap.add_argument("--families", default="marian,bart,gpt2,llama")
    ap.add_argument("--methods", default="grad-input,integrated-gradients")
    ap.add_argument("--one-at-a-time", action="store_true", help="the file mode unbatched")
    ap.add_argument("--plain", action="store_true", help="also time it without narrow products")
    ap.add_argument("--whole-passes", action="store_true", help="also time it with uncut passes")
    ap.add_argument(
        "--torch-softmax", action="store_true", help="also time it with torch's softmax"
    )
    ap.add_argument("--real-sizes", action="store_true", help="hub-sized encoder-decoders")
    ap.add_argument(
        "--joint-projection", action="store_true", help="also time it with steps projected together"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        import inseq
    except ImportError:
        inseq = None
    print(f"{args.pairs} pairs; peer: {'inseq' if inseq else 'none (inseq not installed)'}")
    from hf_tiny import save_tiny
    from lm_tiny import LM_FAMILIES, save_tiny_lm

    if args.real_sizes:
        use_real_sizes(args.families)

    texts, size = pairs(args.pairs), "hub-sized" if args.real_sizes else "tiny"
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            save = save_tiny_lm if family in LM_FAMILIES else save_tiny
            folder = save(Path(tmp) / family, family)
            m = open_model(str(folder))
            for method in args.methods.split(","):
                ours_call = studio(m, Path(tmp), texts, method, args.steps, args.one_at_a_time)
                peer = inseq_call(inseq, folder, m, texts, method, args)
                calls = [ours_call, peer or (lambda: None)]
                if args.plain:
                    calls.append(without_narrow_products(ours_call))
                if args.whole_passes:
                    calls.append(whole_passes(ours_call))
                if args.torch_softmax:
                    calls.append(with_torch_softmax(ours_call))
                if args.joint_projection:
                    calls.append(with_joint_projection(ours_call))
                ours, theirs, *more = interleaved_cpu_seconds(calls, args.runs)
                asked = (args.plain, args.whole_passes, args.torch_softmax, args.joint_projection)
                extra = [name for name, on in zip(EXTRA, asked) if on]  # the calls' order
                theirs = theirs if peer else float("nan")
                print(
                    f"{size} {family:<8} {method:<22} studio {ours:7.3f} s   inseq "
                    f"{theirs:7.3f} s   ratio {ours / theirs:.2f}",
                    flush=True,
                )
                for name, seconds in zip(extra, more):
                    print(f"{'':<36}{name:<14} {seconds:7.3f} s   ratio {seconds / theirs:.2f}")


if __name__ == "__main__":
    main()
