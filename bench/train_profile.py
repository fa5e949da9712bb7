"""Where a training step's time goes, at a preset's size on real fra-eng batches.

    python bench/train_profile.py [--preset d2l|small] [--precision bf16|fp32]
                                  [--models ours,twin,d2l] [--batches 12] [--repeats 5]
                                  [--top 12] [--max-vocab 10000]

``--preset d2l`` (default): the d2l chapter's model on word batches (vocabulary 10,000,
sentences up to 20 words); ``--preset small``: the "small" preset's model and data (BPE).

For each implementation (ours, the torch.nn.Transformer twin, the d2l transcription) it
times the step (loss, backward, fused Adam) on the same length-bucketed batches of 128
pairs, interleaved, without the profiler, then runs them once more under torch.profiler
and prints the self time per step of each kind of work and its share:

    output layer      every operator on a tensor with a V-sized axis (V = target words):
                      the projection, the loss, their gradients and the weight's casts
    other products    the remaining matrix products (attention, W_o, FFN)
    dropout masks     bernoulli_ drawing dropout's random masks
    casts and copies  copy_: autocast's dtype casts and head-layout copies
    Adam              the fused optimiser step
    embeddings        lookups and their (dense) gradients
    rest              norms, softmax, element-wise work, autograd's own bookkeeping

then its top operators. Shares are of the profiled time, which the profiler inflates
for small operators; the wall times are the unprofiled medians.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from common import TorchTwin, adam, corpus_path, interleaved_speeds, median, time_steps
from d2l_twin import D2LTransformer
from torch.profiler import ProfilerActivity, profile
from train_throughput import SIZES, training_batches

from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training.presets import PRESETS

IMPLEMENTATIONS = {"ours": Transformer, "twin": TorchTwin, "d2l": D2LTransformer}
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
EMBEDDINGS = {"aten::embedding", "aten::embedding_dense_backward", "aten::index_select"}


def kind_of(name: str, shapes: list, vocab: int) -> str:
    """The kind of work one profiled operator (name, input shapes) does."""
    if name == "aten::bernoulli_":
        return "dropout masks"
    if "adam" in name.lower():
        return "Adam"
    if name in EMBEDDINGS:
        return "embeddings"
    if any(isinstance(s, list) and vocab in s for s in shapes):
        return "output layer"
    if name in PRODUCTS:
        return "other products"
    return "casts and copies" if name == "aten::copy_" else "rest"


def profile_steps(model, opt, data, amp) -> list:
    """Profiled operators (key averages by input shape) of one pass over ``data``."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        time_steps(model, opt, data, amp)
    return prof.key_averages(group_by_input_shape=True)


def summarise(events, steps: int, vocab: int) -> tuple[dict, dict]:
    """(ms per step by kind of work, (ms, calls) per step by operator) from profiled events."""
    kinds, ops = defaultdict(float), defaultdict(lambda: [0.0, 0.0])
    for e in events:
        ms = e.self_cpu_time_total / 1e3 / steps
        kinds[kind_of(e.key, e.input_shapes or [], vocab)] += ms
        ops[e.key][0] += ms
        ops[e.key][1] += e.count / steps
    return dict(kinds), dict(ops)


def print_profile(name: str, wall_ms: float, kinds: dict, ops: dict, top: int) -> None:
    """The step's wall time, its split by kind of work and its top operators."""
    total = sum(kinds.values())
    print(f"\n{name}: {wall_ms:.1f} ms/step wall (median), {total:.1f} ms/step profiled")
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:17s} {ms:7.1f} ms  {ms / total:6.1%}")
    print("  top operators (self time per step, share, calls per step):")
    for op, (ms, calls) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    {op:40s} {ms:7.1f} ms  {ms / total:6.1%}  {calls:6.1f}")


def main() -> None:
    """Time and profile each implementation's step and print where its time goes."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=["d2l", "small"], default="d2l")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--max-vocab", type=int, default=10000, help="d2l: words kept (200: the book's)")
    p.add_argument("--models", default="ours,twin,d2l", help="comma-separated: ours, twin, d2l")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    if args.preset == "small":
        data_cfg = DataConfig(**{**PRESETS["small"]["data"], "source": corpus_path()})
        size, fields = "the small preset", PRESETS["small"]["model"]
    else:
        data_cfg = DataConfig(source=corpus_path(), max_len=20, max_vocab=args.max_vocab)
        size, fields = SIZES["d2l"]
    corpus = load_corpus(data_cfg)
    data = training_batches(corpus, args.batches)
    vocab = len(corpus.tgt_vocab)
    cfg = ModelConfig(len(corpus.src_vocab), vocab, **fields)
    names, amp = args.models.split(","), args.precision == "bf16"
    torch.manual_seed(0)
    models = {k: IMPLEMENTATIONS[k](cfg) for k in names}
    opts = {k: adam(m) for k, m in models.items()}
    speeds = interleaved_speeds(models, opts, data, args.repeats, amp)  # tokens/s
    tokens = sum(int((t[:, 1:] != 0).sum()) for _, t in data)
    walls = {k: [tokens / s * 1e3 / len(data) for s in v] for k, v in speeds.items()}  # ms/step
    print(
        f"{size}, vocab {len(corpus.src_vocab)} / {vocab}, batch 128, "
        f"{len(data)} batches, {args.precision}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    for k in names:
        kinds, ops = summarise(profile_steps(models[k], opts[k], data, amp), len(data), vocab)
        print_profile(k, median(walls[k]), kinds, ops, args.top)


if __name__ == "__main__":
    main()
