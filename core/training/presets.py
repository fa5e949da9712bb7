"""Named starting points for a run: data, model and training settings together."""

from __future__ import annotations

PRESETS: dict[str, dict[str, dict]] = {
    "d2l": {  # the d2l.ai chapter 11.7 experiment, reproduced in one click
        "data": {
            "split": "head",
            "num_train": 512,
            "num_val": 128,
            "min_freq": 2,
            "max_len": 20,
            "max_vocab": 100000,
        },
        "model": {
            "d_model": 256,
            "num_heads": 4,
            "num_encoder_layers": 2,
            "num_decoder_layers": 2,
            "d_ff": 64,
            "dropout": 0.2,
        },
        "train": {
            "epochs": 30,
            "batch_size": 128,
            "lr": 0.0015,
            "warmup_steps": 0,
            "schedule": "constant",
            "label_smoothing": 0.0,
            "grad_clip": 1.0,
            "eval_every": 20,
            "eval_sentences": 128,
            "log_every": 1,
        },
    },
    "small": {  # trains on a laptop CPU in about ten minutes
        "data": {  # BPE: +3.4 test BLEU over words in 10 CPU minutes (bench/tokenizer_quality.py)
            "split": "random",
            "max_len": 12,
            "min_freq": 2,
            "max_vocab": 6000,
            "tokenizer": "bpe",
            "bpe_vocab": 6000,
        },
        "model": {
            "d_model": 256,
            "num_heads": 4,
            "num_encoder_layers": 2,
            "num_decoder_layers": 2,
            "d_ff": 1024,
            "dropout": 0.0,  # in ten minutes: +1.4 test BLEU over 0.1 (bench/sweep.py)
        },
        "train": {
            "epochs": 0,
            "time_budget": 600,
            "batch_size": 128,
            "lr": 2e-3,  # with "linear": +2.3 test BLEU over 1e-3 and 1/sqrt(step) (bench/sweep.py)
            "warmup_steps": 400,
            "schedule": "linear",  # to zero at the end of the ten minutes
            "label_smoothing": 0.1,
            "eval_every": 500,
            "eval_sentences": 300,
            "log_every": 20,
        },
    },
    "decoder": {  # a Llama-style decoder-only model on fra-eng, by prompting: ~10 CPU minutes
        "data": {  # as "small" (one vocabulary of both languages: the run sets shared_vocab)
            "split": "random",
            "max_len": 12,
            "min_freq": 2,
            "max_vocab": 6000,
            "tokenizer": "bpe",
            "bpe_vocab": 6000,
        },
        "model": {  # 7.0 M parameters ("small": 8.3 M); reads source <eos> <bos> target
            "arch": "decoder-only",
            "d_model": 256,
            "num_heads": 4,
            "num_kv_heads": 2,
            "num_decoder_layers": 4,
            "d_ff": 1024,
            "dropout": 0.0,
        },
        "train": {  # as "small", but 100 warm-up steps: ten minutes buy ~2,000 steps on a
            "epochs": 0,  # quiet 2-core CPU, 300-600 on a busy one (test BLEU 40.4 and 22.0:
            "time_budget": 600,  # docs/training.md, "A shipped decoder-only model")
            "batch_size": 128,
            "lr": 2e-3,
            "warmup_steps": 100,
            "schedule": "linear",
            "label_smoothing": 0.1,
            "eval_every": 500,
            "eval_sentences": 300,
            "log_every": 20,
        },
    },
    "base": {  # the paper's base model, for a GPU
        "data": {"split": "random", "max_len": 40, "min_freq": 2, "max_vocab": 20000},
        "model": {
            "d_model": 512,
            "num_heads": 8,
            "num_encoder_layers": 6,
            "num_decoder_layers": 6,
            "d_ff": 2048,
            "dropout": 0.1,
        },
        "train": {
            "epochs": 20,
            "batch_size": 256,
            "lr": 7e-4,
            "warmup_steps": 4000,
            "schedule": "inverse_sqrt",
            "label_smoothing": 0.1,
            "eval_every": 1000,
            "eval_sentences": 500,
            "log_every": 50,
        },
    },
    "induction": {  # a decoder-only model forms an induction head in ~20 s on one CPU core
        "data": {  # (seeds 0 and 1: at steps 500-600, 0.02 -> 0.95 induction score; 256 types
            "task": "induction",  # form it on both, 64 on one of two by step 2000)
            "induction_length": 16,
            "induction_min_length": 4,  # lengths drawn: a head cannot copy by position alone
            "induction_tokens": 256,
            "induction_sequences": 20000,
        },
        "model": {
            "arch": "decoder-only",
            "d_model": 64,
            "num_heads": 4,
            "num_decoder_layers": 2,
            "d_ff": 128,
            "dropout": 0.0,
        },
        "train": {
            "epochs": 0,
            "max_steps": 1000,  # the head forms at ~step 550, the repeat's loss < 0.3 by ~700
            "batch_size": 32,
            "lr": 1e-3,
            "warmup_steps": 0,
            "schedule": "constant",
            "label_smoothing": 0.0,
            "eval_every": 25,  # circuit scores at each evaluation: the phase change, drawn
            "log_every": 10,
            "probes": [],  # nothing to translate
            "threads": 1,  # as fast as two for a model this small, and never collapses on a
            # busy machine (100 steps, load ~6 on 2 cores: 2.4-5.1 s on one, 3.0-24.7 s on two)
        },
    },
}

PRESET_LABELS = {  # how the Train page names each preset
    "d2l": "d2l chapter",
    "small": "small, CPU, ~10 minutes",
    "base": "base, GPU",
    "induction": "induction head, decoder-only, CPU, ~1 minute",
    "decoder": "decoder-only, fra-eng by prompting, CPU, ~10 minutes",
}
