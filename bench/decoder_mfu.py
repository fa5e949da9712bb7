"""The decoder-only trainer against this CPU's bf16 matmul peak, with a plain-loop peer.

    python bench/decoder_mfu.py [--preset decoder] [--rounds 5] [--steps 20] [--profile]

In each round, in one process, interleaved batch by batch (one peak product, then each
step on that batch, then the own-shape products: a machine shared with other work loads them
alike), each figure the round's FLOPs over its summed seconds; then medians over rounds:

- **peak**: ``torch.matmul`` of bf16 square matrices, of the size (1024, 2048 or 3072) whose
  median of ``--repeats`` was best at the start, on the trainer's threads;
- **ffn, output**: one bf16 matrix product of the model's own shapes (a batch's real tokens
  x d_model by d_model x d_ff; its loss tokens x d_model by d_model x V): what a single
  product of this model's sizes reaches here;
- **trainer**: ``Trainer.train_step`` (the studio's own step: bf16 autocast, the model's
  ``loss_terms``, clipping, fused Adam) over ``--steps`` of the preset's real fra-eng batches;
- **peer**: the same Llama (a copy of the trainer's starting weights) trained by a plain
  PyTorch loop on the same batches: ``LlamaForCausalLM(ids, mask, positions).logits`` over
  the whole sequence, ``cross_entropy(ignore_index)`` on the target positions, clipping and
  fused Adam, as nanoGPT-style loops write it;
- with ``--sdpa``, **trainer on SDPA**: the same trainer (same starting weights) with its
  loss pass on torch's fused attention (``F.scaled_dot_product_attention``) instead of the
  eager path ``core.model.trainee.training_attention`` picks on a CPU: the step as it was
  before 29 November 2026;
- with ``--encoder-decoder``, the "small" preset's encoder-decoder (the d2l Transformer, its
  own fra-eng batches of the same size) trained by the same ``Trainer``: target tokens/s
  only (its FLOPs are not counted here), to set the decoder-only model's speed beside it.

**FLOPs counted** (the same useful work for both, whatever each computes beyond it): per
real (non-pad) token of ``source <eos> <bos> target``, 6 x the decoder layers' matmul
parameters (q, k, v, o, gate, up, down: forward 2, backward 4 per parameter); per loss token
(the target and its <eos>), 6 x d_model x V for the output layer; and attention's scores and
values, 12 x layers x d_model x n per token of a sequence of n real tokens (nanoGPT's and
PaLM's count: QK^T and AV, 2 FLOPs per multiply-add, forward and backward, the whole n x n).
Padding, the logits of positions without a loss, norms, RoPE, softmax and Adam count nothing.
MFU = counted FLOPs / seconds / peak.

``--profile`` prints torch.profiler's top operators of the trainer's step once.
Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from unittest import mock

import torch
from common import corpus_path, median
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

from core.corpus.config import DataConfig
from core.corpus.vocab import Vocab
from core.model import trainee
from core.model.config import ModelConfig
from core.model.trainee import build_model, left_padded
from core.model.transformer import Transformer
from core.runs.corpus_cache import prepared_corpus
from core.training.config import TrainConfig
from core.training.loop import Trainer
from core.training.presets import PRESETS

PEAK_SIZES = (1024, 2048, 3072)


def trainer_for(preset: str) -> Trainer:
    """The preset's decoder-only Trainer on fra-eng, bf16 autocast, as a run builds it."""
    cfg = PRESETS[preset]
    model = {**cfg["model"], "arch": "decoder-only"}
    data = DataConfig(**{**cfg["data"], "source": corpus_path(), "shared_vocab": True})
    corpus = prepared_corpus(data)
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab), tgt_vocab_size=len(corpus.tgt_vocab), **model
    )
    torch.manual_seed(0)
    train = TrainConfig(**{**cfg["train"], "amp": True, "device": "cpu", "probes": []})
    return Trainer(build_model(model_cfg), corpus, train)


def encoder_decoder_trainer() -> Trainer:
    """The "small" preset's encoder-decoder Trainer on fra-eng, bf16 autocast."""
    cfg = PRESETS["small"]
    corpus = prepared_corpus(DataConfig(**{**cfg["data"], "source": corpus_path()}))
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab), tgt_vocab_size=len(corpus.tgt_vocab), **cfg["model"]
    )
    torch.manual_seed(0)
    train = TrainConfig(**{**cfg["train"], "amp": True, "device": "cpu", "probes": []})
    return Trainer(Transformer(model_cfg), corpus, train)


def every_batch(trainer: Trainer):
    """The trainer's batches, epoch after epoch."""
    for epoch in itertools.count():
        trainer.state.epoch = epoch
        yield from trainer.epoch_batches()


def product_seconds(m: int, k: int, n: int, warm: bool = False) -> float:
    """Seconds of one bf16 (m, k) @ (k, n) product (after a warm-up one when ``warm``)."""
    a = torch.randn(m, k, dtype=torch.bfloat16)
    b = torch.randn(k, n, dtype=torch.bfloat16)
    if warm:
        torch.matmul(a, b)  # kernel choice, pages
    start = time.perf_counter()
    torch.matmul(a, b)
    return time.perf_counter() - start


def peak_size(repeats: int) -> int:
    """The square size whose bf16 product is fastest here (best median of ``repeats``)."""
    speed = {
        s: 2 * s**3 / median([product_seconds(s, s, s, warm=True) for _ in range(repeats)])
        for s in PEAK_SIZES
    }
    return max(speed, key=speed.get)


def layer_matmul_params(cfg: ModelConfig) -> int:
    """Matmul parameters of one decoder layer: q, o (D x D), k, v (D x kv width), SwiGLU."""
    kv = cfg.d_model // cfg.num_heads * (cfg.num_kv_heads or cfg.num_heads)
    return 2 * cfg.d_model * cfg.d_model + 2 * cfg.d_model * kv + 3 * cfg.d_model * cfg.d_ff


def batch_flops(cfg: ModelConfig, src: torch.Tensor, tgt: torch.Tensor) -> int:
    """Useful forward + backward FLOPs of one batch (the module docstring's count)."""
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    n = (src != Vocab.pad_id).sum(1) + (tgt_in != Vocab.pad_id).sum(1)  # (B,) real tokens
    loss_tokens = int((tgt_out != Vocab.pad_id).sum())
    body = 6 * cfg.num_decoder_layers * layer_matmul_params(cfg) * int(n.sum())
    attention = 12 * cfg.num_decoder_layers * cfg.d_model * int((n * n).sum())
    return body + attention + 6 * cfg.d_model * cfg.tgt_vocab_size * loss_tokens


def peer_inputs(src, tgt):
    """The plain loop's (ids, mask, positions, labels) of a batch: the trainer's layout."""
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    left, real = left_padded(src, Vocab.pad_id)  # (B, S) each
    ids = torch.cat([left, tgt_in], dim=1)  # (B, S+T)
    mask = torch.cat([real, tgt_in != Vocab.pad_id], dim=1).long()  # (B, S+T)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, S+T)
    labels = torch.cat([torch.full_like(left, Vocab.pad_id), tgt_out], dim=1)  # (B, S+T)
    return ids, mask, positions, labels


class PlainLoop:
    """The same Llama trained by a plain PyTorch loop (full logits, ignore_index)."""

    def __init__(self, trainer: Trainer):
        self.lm = copy.deepcopy(trainer.model.lm)
        self.smoothing, self.clip = trainer.cfg.label_smoothing, trainer.cfg.grad_clip or 1e9
        self.opt = torch.optim.Adam(
            self.lm.parameters(), lr=trainer.cfg.lr, betas=(0.9, 0.98), eps=1e-9, fused=True
        )

    def step(self, src, tgt) -> float:
        """One optimiser step on a batch."""
        ids, mask, positions, labels = peer_inputs(src, tgt)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.lm(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(),  # (B (S+T), V)
                labels.flatten(),
                ignore_index=Vocab.pad_id,
                label_smoothing=self.smoothing,
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.lm.parameters(), self.clip)
        self.opt.step()
        return loss.item()


def on_sdpa(trainer: Trainer):
    """The trainer's step with its loss pass on SDPA (the CPU path before the eager one)."""

    def step(src, tgt):
        with mock.patch.object(trainee, "training_attention", lambda device: "sdpa"):
            return trainer.train_step(src, tgt)

    return step


def timed(step, batches) -> float:
    """Seconds of ``step`` over the batches."""
    start = time.perf_counter()
    for src, tgt, *_ in batches:
        step(src, tgt)
    return time.perf_counter() - start


def profile_step(trainer: Trainer, batches) -> None:
    """Print the top operators of the trainer's steps by self CPU time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for src, tgt, *_ in batches:
            trainer.train_step(src, tgt)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def round_speeds(cfg: ModelConfig, steps: dict, chunk: list, size: int, other=None) -> tuple:
    """(GFLOP/s of the peak product, each step and the own-shape products; target tokens/s
    of each step) over one round, interleaved batch by batch. ``other``: (an encoder-decoder
    Trainer, its batches), timed beside them on a batch of its own each time."""
    flops, seconds, tokens_per_s = {}, {}, {}

    def add(name: str, f: int, s: float) -> None:
        flops[name], seconds[name] = flops.get(name, 0) + f, seconds.get(name, 0.0) + s

    targets = sum(int(b[1][:, 1:].ne(Vocab.pad_id).sum()) for b in chunk)
    for src, tgt, *_ in chunk:
        add("peak", 2 * size**3, product_seconds(size, size, size))
        useful = batch_flops(cfg, src, tgt)
        for name, step in steps.items():
            add(name, useful, timed(step, [(src, tgt)]))
        if other is not None:
            trainer, batches = other
            their = next(batches)
            add("encoder-decoder", int(their[1][:, 1:].ne(Vocab.pad_id).sum()),
                timed(trainer.train_step, [their]))  # fmt: skip
        tokens = int(src.ne(Vocab.pad_id).sum() + tgt[:, :-1].ne(Vocab.pad_id).sum())
        loss_tokens = int(tgt[:, 1:].ne(Vocab.pad_id).sum())
        d, ff, v = cfg.d_model, cfg.d_ff, cfg.tgt_vocab_size
        add("ffn", 2 * tokens * d * ff, product_seconds(tokens, d, ff))
        add("output", 2 * loss_tokens * d * v, product_seconds(loss_tokens, d, v))
    for name in [*steps, *(["encoder-decoder"] if other else [])]:
        done = flops.pop(name) if name == "encoder-decoder" else targets
        tokens_per_s[name] = done / seconds[name]
    return {name: flops[name] / seconds[name] / 1e9 for name in flops}, tokens_per_s


def main() -> None:
    """Print each round, then the medians as a table row for docs/training.md."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="decoder")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="0: torch's default")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--sdpa", action="store_true", help="also the trainer on fused attention")
    p.add_argument("--encoder-decoder", action="store_true", help="also 'small' (tokens/s)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    trainer = trainer_for(args.preset)
    steps = {"trainer": trainer.train_step, "plain loop": PlainLoop(trainer).step}
    if args.sdpa:
        steps["trainer on SDPA"] = on_sdpa(trainer_for(args.preset))
    cfg = trainer.model.cfg
    batches = list(itertools.islice(every_batch(trainer), args.steps * (args.rounds + 1)))
    warm, batches = batches[: args.steps], batches[args.steps :]
    for step in steps.values():
        timed(step, warm[:5])  # first steps: kernel choice, allocator
    if args.profile:
        profile_step(trainer, warm[5:15])
    other = None
    if args.encoder_decoder:
        encdec = encoder_decoder_trainer()
        other = (encdec, every_batch(encdec))
        timed(encdec.train_step, list(itertools.islice(other[1], 5)))
    size = peak_size(args.repeats)
    rows, speeds = [], []
    for r in range(args.rounds):
        chunk = batches[r * args.steps : (r + 1) * args.steps]
        row, tokens_per_s = round_speeds(cfg, steps, chunk, size, other)
        rows.append(row)
        speeds.append(tokens_per_s)
        print(f"round {r}: " + ", ".join(f"{k} {v:.0f} GFLOP/s ({v / row['peak']:.1%})"
                                         for k, v in row.items()), flush=True)  # fmt: skip
        print("  target tokens/s: " + ", ".join(f"{k} {v:.0f}" for k, v in tokens_per_s.items()))
    peak = median([row["peak"] for row in rows])
    params = trainer.model.num_parameters() / 1e6
    print(f"\ncpu, {torch.get_num_threads()} threads, {args.preset} ({params:.1f} M parameters), "
          f"medians of {len(rows)} rounds (fractions: each round's, then the median)")  # fmt: skip
    print("| what | GFLOP/s | of the bf16 matmul peak |")
    print("|---|---|---|")
    for name in rows[0]:
        fraction = median([row[name] / row["peak"] for row in rows])
        print(f"| {name} | {median([row[name] for row in rows]):.0f} | {fraction:.1%} |")
    print("\n| what | target tokens/s |\n|---|---|")
    for name in speeds[0]:
        print(f"| {name} | {median([x[name] for x in speeds]):,.0f} |")
    print(f"(peak: bf16 products {size} x {size} x {size}: {peak:.0f} GFLOP/s; "
          "ffn, output: one product of the model's own shapes)")  # fmt: skip


if __name__ == "__main__":
    main()
