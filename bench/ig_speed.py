"""Integrated gradients: the studio against inseq, at the same steps, same pair, one thread.

    python bench/ig_speed.py [--steps 50] [--runs 5] [--families marian,bart,gpt2,llama]

On tiny random Hugging Face models (the tests' ``tests/hf_tiny.py`` and ``tests/lm_tiny.py``,
built in a temporary folder; a decoder-only model's pair is its prompt and the prompt followed
by the target, as inseq reads it) and the shipped model, for a source of 12 words with a
target of 17 and a pair of 39 and 39 words: the CPU seconds (``time.process_time``, one
thread) of the studio's integrated gradients (``core.attribution.methods.attribute``) against
the peer measured in the same run:

- ``inseq`` 0.7.1's ``integrated_gradients`` (``model.attribute(src, tgt, n_steps=...)``)
  where inseq is installed (it is not a dependency: ``pip install --no-deps --target
  /tmp/inseq_site inseq==0.7.1 jaxtyping treescope``, then ``PYTHONPATH=/tmp/inseq_site``),
  on the Hugging Face models;
- otherwise, and on the shipped model (inseq cannot open it), inseq's algorithm by hand: one
  captum ``IntegratedGradients`` call per output step on the source and that step's prefix
  (what inseq runs), through the model's own embeddings path.

Each figure is the median of ``--runs`` timings after a warm-up, the studio and the peer
timed in turn in every round (``common.interleaved_cpu_seconds``); the ratio is studio / peer
(the goal of issue 51: at most 0.6). ``--plain`` also times the studio with every product as
it was before ``core.attribution.products`` (``common.without_narrow_products``), in the same
rounds; ``--joint`` with the output steps projected onto the vocabulary together (as before
``Passes.log_probs_at`` projected each on its own: ``common.with_joint_projection``).
``--real-sizes`` builds the encoder-decoders at their hub checkpoints' sizes instead
(``common.REAL_SIZES``: opus-mt-en-fr, bart-base; random weights) and leaves the shipped model
out; give it fewer ``--steps``: minutes.
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
    without_narrow_products,
)

sys.path.insert(0, str(ROOT / "tests"))

from core.attribution.gradients import GradientChoices  # noqa: E402
from core.attribution.methods import attribute  # noqa: E402
from core.model.opened import open_model  # noqa: E402
from core.model.parts import DecodeSettings  # noqa: E402

ENGLISH = "i am cold the boy is tall . you are hot we"
FRENCH = "je suis froid le garçon est grand . tu es chaud nous je suis froid le garçon"
SHIPPED = (
    "i don't know if tom will be able to come .",  # 12 tokens
    "i don't know if tom will be able to come to the party tomorrow because he is very busy "
    "at work and his mother is ill at home , so he said he would call us .",  # 36 tokens
)


def inseq_by_hand(m, t, steps: int):
    """inseq's integrated gradients as inseq computes them: a captum call per output step."""
    from captum.attr import IntegratedGradients

    p = m.forced(t.src_ids, t.out_ids)
    src_emb, tgt_emb = (x.detach() for x in m.embeddings(p.src, p.tgt_in))
    for step in range(len(t.out_ids)):
        prefix = p.tgt_in[:, : step + 1]

        def prob(x_src, x_tgt, prefix=prefix, step=step):
            logp = m.log_probs_from_embeddings(p.src, prefix, x_src, x_tgt)  # (B, t + 1, V)
            return logp[:, step, int(t.out_ids[step])].exp()

        IntegratedGradients(prob).attribute(
            (src_emb, tgt_emb[:, : step + 1]), n_steps=steps, internal_batch_size=steps
        )


def pairs(lengths: tuple[int, ...]):
    for n_src, n_tgt in lengths:
        yield " ".join((ENGLISH.split() * 5)[:n_src]), " ".join((FRENCH.split() * 5)[:n_tgt])


def peer_texts(m, t, src: str, tgt: str) -> tuple[str, str]:
    """What inseq is given for a pair: the source and the target; for a decoder-only model,
    its prompt and the whole sequence the studio explains (the prompt, then the output)."""
    if not m.reads_prompt:
        return src, tgt
    ids = m.sequence_ids(t.src_ids, t.out_ids)  # the prompt and the decoder inputs
    prompt = ids[: m.first_step(t.src_ids, t.out_ids)]
    return m.tokenizer.decode(prompt), m.tokenizer.decode([*ids, t.out_ids[-1]])


def line(name, t, studio, peer, peer_name):
    sizes = f"{len(t.src_ids)} -> {len(t.out_ids)} tokens"
    print(
        f"{name:<22} {sizes:<18} studio {studio:.3f} s   {peer_name} {peer:.3f} s   "
        f"ratio {studio / peer:.2f}"
    )


def compare(name, m, t, args, peer=None, text=("", "")) -> None:
    """One line: the studio's integrated gradients on ``t`` against inseq (``peer``: an
    inseq model, given the pair as ``text``) or inseq's algorithm by hand."""
    choices = GradientChoices(steps=args.steps)

    def studio():
        attribute(m, t.src_ids, t.out_ids, "integrated-gradients", choices=choices)

    if peer is not None:

        def theirs_call():
            peer.attribute(*text, n_steps=args.steps, show_progress=False)

    else:

        def theirs_call():
            inseq_by_hand(m, t, args.steps)

    extra = {"plain products": without_narrow_products, "joint projection": with_joint_projection}
    asked = {k: f for k, f in extra.items() if getattr(args, k.split()[0])}
    calls = [studio, theirs_call, *(f(studio) for f in asked.values())]
    ours, theirs, *more = interleaved_cpu_seconds(calls, args.runs)
    line(name, t, ours, theirs, "inseq" if peer is not None else "by hand")
    for what, seconds in zip(asked, more):
        print(f"{'':<41} {what} {seconds:.3f} s   ratio {seconds / theirs:.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--families", default="marian,bart,gpt2,llama")
    ap.add_argument("--plain", action="store_true", help="also time it without narrow products")
    ap.add_argument(
        "--joint", action="store_true", help="also time it with the steps projected together"
    )
    ap.add_argument("--real-sizes", action="store_true", help="hub-sized encoder-decoders only")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        import inseq
    except ImportError:
        inseq = None
    print(f"peer: {'inseq' if inseq else 'inseq by hand (captum per step)'}; one thread")
    from hf_tiny import save_tiny
    from lm_tiny import LM_FAMILIES, save_tiny_lm

    if args.real_sizes:
        use_real_sizes(args.families)
    size = "hub-sized" if args.real_sizes else "tiny"
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            save = save_tiny_lm if family in LM_FAMILIES else save_tiny
            folder = save(Path(tmp) / family, family)
            m = open_model(str(folder))
            peer = inseq.load_model(str(folder), "integrated_gradients") if inseq else None
            for src, tgt in pairs(((12, 17), (39, 39))):
                t = m.force(src, tgt, DecodeSettings())
                compare(f"{size} {family}", m, t, args, peer, peer_texts(m, t, src, tgt))
    if args.real_sizes:
        return
    m = open_model(str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    for sentence in SHIPPED:
        compare("shipped fra-eng-small", m, m.translate(sentence, DecodeSettings()), args)


if __name__ == "__main__":
    main()
