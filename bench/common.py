"""Shared pieces of the benchmarks: the corpus, a torch.nn.Transformer twin, timing."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.corpus.vocab import Vocab  # noqa: E402
from core.model.blocks import PositionalEncoding  # noqa: E402
from core.model.config import ModelConfig  # noqa: E402

SHARED_ZIP = ROOT.parent / "shared" / "data" / "fra-eng.zip"


def corpus_path() -> str:
    """FRA_ENG_ZIP, else ../shared/data/fra-eng.zip; exit with a message if neither."""
    path = os.environ.get("FRA_ENG_ZIP") or str(SHARED_ZIP)
    if not Path(path).is_file():
        sys.exit(f"fra-eng.zip not found at {path}: set FRA_ENG_ZIP")
    return path


class TorchTwin(nn.Module):
    """The same encoder-decoder built on torch.nn.Transformer (post-LN, ReLU)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_emb = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.pos = PositionalEncoding(cfg.d_model, cfg.dropout, cfg.max_positions, "bernoulli")
        self.transformer = nn.Transformer(
            cfg.d_model,
            cfg.num_heads,
            cfg.num_encoder_layers,
            cfg.num_decoder_layers,
            cfg.d_ff,
            cfg.dropout,
            batch_first=True,
        )
        self.dense = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)

    def forward(self, src, tgt_in):
        """src (B, S), tgt_in (B, T) -> (logits (B, T, V), None)."""
        scale = math.sqrt(self.cfg.d_model)
        s = self.pos(self.src_emb(src) * scale)  # (B, S, D)
        t = self.pos(self.tgt_emb(tgt_in) * scale)  # (B, T, D)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), dtype=torch.bool)
        src_pad, tgt_pad = src == Vocab.pad_id, tgt_in == Vocab.pad_id
        out = self.transformer(
            s,
            t,
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.dense(out), None

    def loss(self, src, tgt_in, tgt_out, label_smoothing=0.0):
        """Cross-entropy over full (B, T, V) logits, ignoring <pad>, as usually written."""
        logits, _ = self(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(
            logits.flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=Vocab.pad_id,
            label_smoothing=label_smoothing,
        )


def budget_command(out, preset: str, minutes: float, *extra: str) -> list[str]:
    """``python -m core.train`` on fra-eng for ``minutes`` of training (no epoch limit)."""
    return [
        sys.executable,
        "-m",
        "core.train",
        *("--data", corpus_path(), "--out", str(out), "--preset", preset),
        *("--epochs", "0", "--time-budget", str(minutes * 60), "--no-progress"),
        *extra,
    ]


def held_out_figures(run) -> tuple:
    """(LoadedModel, figures) of a run's best.pt on its corpus's held-out test split."""
    from core.corpus.splits import load_splits
    from core.model.checkpoints import data_config_of
    from core.model.scores import evaluate_split
    from core.model.studio_loading import load_checkpoint

    lm = load_checkpoint(Path(run) / "best.pt")
    cfg = data_config_of(lm.meta)
    cfg.source = corpus_path()
    test = load_splits(cfg).test
    result = evaluate_split(lm.model, lm.src_vocab, lm.tgt_vocab, test)
    state = lm.meta["state"]
    result.update(steps=state["step"], val_bleu=state["best_bleu"], test_pairs=len(test.pairs))
    return lm, result


def adam(model):
    """The optimiser both models use (fused Adam, as core.training.loop)."""
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)


def train_step(model, opt, src, tgt, smoothing=0.1, amp=False) -> int:
    """One Adam step; returns the number of real target tokens.

    With ``amp``, bf16 autocast covers the loss only and is entered anew each step, as in
    core.training.loop: autocast caches its casts of the weights until its block ends, so a
    block around several steps would keep using the first step's bf16 weights.
    """
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = model.loss(src, tgt[:, :-1], tgt[:, 1:], smoothing)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return int((tgt[:, 1:] != Vocab.pad_id).sum())


def time_steps(model, opt, batches, amp=False) -> tuple[float, int]:
    """Seconds and target tokens for one pass of train steps over ``batches``."""
    model.train()
    start = time.perf_counter()
    tokens = sum(train_step(model, opt, s, t, amp=amp) for s, t in batches)
    return time.perf_counter() - start, tokens


def interleaved_speeds(models, opts, data, repeats, amp=False) -> dict[str, list[float]]:
    """Target tokens/s of each model's step, per repeat over ``data``, interleaved by batch.

    Each batch is stepped by every model in turn, so a neighbour's load that comes and
    goes over seconds falls on all of them alike. Two warm-up batches come first.
    """
    for k in models:
        time_steps(models[k], opts[k], data[:2], amp)  # also puts the model in training mode
    speed = {k: [] for k in models}
    for _ in range(repeats):
        seconds, tokens = dict.fromkeys(models, 0.0), 0
        for src, tgt in data:
            for k in models:
                start = time.perf_counter()
                n = train_step(models[k], opts[k], src, tgt, amp=amp)
                seconds[k] += time.perf_counter() - start
            tokens += n
        for k in models:
            speed[k].append(tokens / seconds[k])
    return speed


def median(xs) -> float:
    """Median of a list."""
    return statistics.median(xs)


def interleaved_cpu_seconds(calls, runs: int) -> list[float]:
    """The median CPU seconds (``time.process_time``) of each call over ``runs`` rounds, after
    one warm-up each; every round times every call in turn, so a neighbour's load that comes
    and goes falls on all of them alike (the ratios of one round are what count)."""
    for call in calls:
        call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        for call, kept in zip(calls, times):
            start = time.process_time()
            call()
            kept.append(time.process_time() - start)
    return [statistics.median(t) for t in times]


def without_narrow_products(call):
    """``call`` with ``core.attribution.products`` passing every product through unchanged
    (the code before it, plus the mode's dispatch): the same run's figure before the change."""
    from unittest import mock

    from core.attribution import products

    def plain():
        with mock.patch.object(products, "_batched_pair", lambda args: False):
            return call()

    return plain


def with_torch_softmax(call):
    """``call`` with ``core.attribution.products`` leaving every softmax to torch's own (short
    rows not written out): the same run's figure before ``ShortSoftmax``."""
    from unittest import mock

    from core.attribution import products

    def plain():
        with mock.patch.object(products, "_short_rows", lambda args, kwargs: None):
            return call()

    return plain


def with_joint_projection(call):
    """``call`` with the gradient methods' output steps projected onto the vocabulary together
    (one (B, P, V) product, each step's backward pass running through all P): the same run's
    figure before ``Passes.log_probs_at`` projected each step on its own."""
    from unittest import mock

    from core.model.hooks import replace_with
    from core.model.passes import Passes

    def joint(self, src, tgt_in, src_emb, tgt_emb, steps):
        B = src_emb.size(0)
        src, tgt_in = src.expand(B, -1), tgt_in.expand(B, -1)
        pairs = [("encoder.embed", replace_with(src_emb)), ("decoder.embed", replace_with(tgt_emb))]
        with self.hooks(pairs):
            hidden = self.hidden(src, tgt_in)  # (B, T, D)
        return list(self.logits_of(hidden[:, steps]).float().log_softmax(-1).unbind(1))

    def before():
        with mock.patch.object(Passes, "log_probs_at", joint):
            return call()

    return before


REAL_SIZES = {  # (layers each side, width, heads, MLP width, vocabulary) of the hub configs
    "marian": (6, 512, 8, 2048, 59514),  # Helsinki-NLP/opus-mt-en-fr
    "bart": (6, 768, 12, 3072, 50265),  # facebook/bart-base
}


def real_sized(tiny_config):
    """``tests/hf_tiny.tiny_config`` with the REAL_SIZES of its family (random weights)."""

    def config(family: str, vocab_size: int):
        layers, width, heads, mlp, vocab = REAL_SIZES[family]
        c = tiny_config(family, vocab)
        c.encoder_layers = c.decoder_layers = layers
        c.encoder_attention_heads = c.decoder_attention_heads = heads
        c.d_model, c.encoder_ffn_dim, c.decoder_ffn_dim = width, mlp, mlp
        c.max_position_embeddings = 512
        return c

    return config


def use_real_sizes(families: str) -> None:
    """Make ``hf_tiny.save_tiny`` build REAL_SIZES models (exit naming a family it lacks)."""
    import hf_tiny

    unknown = set(families.split(",")) - set(REAL_SIZES)
    if unknown:
        sys.exit(f"--real-sizes knows {', '.join(REAL_SIZES)}, not {', '.join(sorted(unknown))}")
    hf_tiny.tiny_config = real_sized(hf_tiny.tiny_config)
