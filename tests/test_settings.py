"""Tests for core.training.settings: preset defaults, validation with reasons, form fields and
flags."""

from __future__ import annotations

import pytest

from core.train import build_parser
from core.training import devices, settings
from tests.helpers import TINY_ARGS, TINY_PRESET, TINY_RUN


@pytest.mark.parametrize("preset", ["d2l", "small", "induction"])
def test_presets_validate(preset):
    assert settings.validate_settings(preset, {}) == []


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"model": {"num_heads": 3}}, "d_model (256) must be divisible by num_heads (3)"),
        ({"model": {"num_encoder_layers": 0}}, "num_encoder_layers must be at least 1"),
        ({"model": {"num_decoder_layers": 0}}, "num_decoder_layers must be at least 1"),
        ({"train": {"batch_size": 10_000_000}}, "batch_size must be at most 65,536"),
        (
            {"train": {"batch_size": 60_000}, "model": {"d_model": 2048, "d_ff": 8192}},
            "a batch of 60000 needs about",
        ),
        ({"model": {"max_positions": 2_000_000_000}}, "max_positions must be at most 4,096"),
        ({"data": {"max_vocab": 10**9}}, "max_vocab must be at most 200,000"),
        ({"data": {"max_pairs": 10**9}}, "max_pairs must be at most 1,000,000"),
        ({"train": {"threads": 10**6}}, "threads must be at most 1,024"),
        ({"train": {"probes": ["go ."] * 9}}, "probes: at most 8 sentences (got 9)"),
        ({"train": {"probes": ["word " * 100]}}, "probes: each at most 200 characters"),
        ({"train": {"time_budget": 1e12}}, "time_budget must be at most"),
        ({"train": {"batch_size": 0}}, "batch_size must be at least 1"),
        ({"train": {"epochs": 0, "max_steps": 0, "time_budget": 0}}, "set a limit"),
        ({"train": {"device": "tpu"}}, "unknown device 'tpu'"),
        ({"data": {"max_len": 0}}, "max_len must be at least 1"),
        ({"data": {"source": "/no/such/pairs.tsv"}}, "Corpus file not found"),
        ({"model": {"width": 3}}, "unknown setting"),
        ({"optimizer": {}}, "Unknown settings group 'optimizer'"),
    ],
)
def test_impossible_settings_are_refused_with_the_reason(overrides, reason):
    problems = settings.validate_settings("d2l", overrides)
    assert any(reason in p for p in problems), problems


def test_unknown_preset_is_refused():
    assert "Unknown preset 'huge'" in settings.validate_settings("huge", {})[0]


def test_flags_reach_the_trainer_unchanged():
    """Every form field passed as flags comes back identical from core.train's parser."""
    chosen = settings.defaults("small")
    chosen["data"].update(source="/tmp/pairs.tsv", max_len=9, val_fraction=0.05)
    chosen["model"].update(d_model=96, norm_first=True, dropout=0.25)
    chosen["train"].update(amp=False, lr=1.5e-4, probes=["go .", "hi ."], schedule="constant")
    argv = ["--out", "x", "--preset", "small", *settings.to_flags(chosen)]
    cfg = settings.settings_from_args(build_parser().parse_args(argv))
    for group in settings.GROUPS:
        assert cfg[group] == chosen[group], group


def test_tiny_command_line_carries_the_tiny_config():
    """The tiny run's flags, derived with to_flags, give its settings back to core.train."""
    cfg = settings.settings_from_args(build_parser().parse_args(["--out", "x", *TINY_ARGS]))
    assert {g: {k: cfg[g][k] for k in values} for g, values in TINY_RUN.items()} == TINY_RUN
    assert settings.validate_settings(TINY_PRESET, TINY_RUN) == []


def test_form_fields_cover_every_setting_with_help():
    names = {(f.group, f.name) for f in settings.form_fields()}
    expected = {(g, n) for g, values in settings.defaults("d2l").items() for n in values}
    command_only = {(g, n) for g in ("data", "train") for n in settings.COMMAND_ONLY}  # the run's
    assert names == expected - {("data", "source")} - command_only
    assert all(f.help for f in settings.form_fields())
    assert next(f for f in settings.form_fields() if f.name == "schedule").value_type == "choice"


def test_describe_settings_names_the_book_experiment():
    text = settings.describe_settings(settings.defaults("d2l"))
    for part in (
        "first 512 + 128 pairs",
        "width 256",
        "2+2 blocks",
        "4 heads",
        "FFN 64",
        "dropout 0.2",
        "lr 0.0015",
        "batch 128",
        "30 epochs",
    ):
        assert part in text


@pytest.mark.parametrize(
    ("preset", "tokens"), [("small", "BPE subwords (6,000)"), ("d2l", "word tokens")]
)
def test_describe_settings_names_the_tokenizer(preset, tokens):
    assert tokens in settings.describe_settings(settings.defaults(preset))


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (int(1.5 * 2**30), "1.5 GB"),
        (int(2_345.6 * 2**30), "2,346 GB"),
        (int(3_576_352_429.6 * 2**30), "3.6 billion GB"),
        (int(4.2e15 * 2**30), "4.2e+15 GB"),
    ],
)
def test_memory_sizes_read_as_numbers(n_bytes, text):
    assert devices.gigabytes(n_bytes) == text


def test_a_huge_model_is_refused_with_a_readable_size(monkeypatch):
    monkeypatch.setattr(devices, "device_memory", lambda device_type: 16 * 2**30)
    huge = {
        "model": {"d_model": 4096, "d_ff": 16384, "num_encoder_layers": 24},
        "data": {"max_len": 200},
        "train": {"batch_size": 65536},
    }
    problems = settings.validate_settings("small", huge)
    assert len(problems) == 1 and "needs about 101,492 GB on cpu but only 16.0 GB" in problems[0]


@pytest.mark.parametrize(
    ("group", "field", "value"),
    [
        ("data", "num_train", -1),
        ("data", "num_val", -5),
        ("data", "max_pairs", -1),
        ("data", "val_fraction", 1.5),
        ("data", "test_fraction", -0.1),
        ("data", "split", "middle"),
        ("data", "max_len", 0),
        ("data", "min_freq", 0),
    ],
)
def test_every_bad_data_field_is_named(group, field, value):
    problems = settings.validate_settings("d2l", {group: {field: value}})
    assert any(p.startswith(field) for p in problems), problems


def test_sentences_must_fit_the_model_positions():
    problems = settings.validate_settings(
        "d2l", {"data": {"max_len": 150}, "model": {"max_positions": 100}}
    )
    assert problems == ["max_len (150) + 2 must fit in the model's max_positions (100)"]


def test_the_induction_preset_is_a_small_decoder_only_model_on_the_induction_task():
    """Issue 66: the sizes in which an induction head forms at step ~575 (seeded)."""
    cfg = settings.defaults("induction")
    assert cfg["data"]["task"] == "induction" and cfg["model"]["arch"] == "decoder-only"
    assert (cfg["model"]["num_decoder_layers"], cfg["model"]["d_model"]) == (2, 64)
    assert (cfg["train"]["batch_size"], cfg["train"]["eval_every"]) == (32, 25)
    line = settings.describe_settings(cfg)
    assert line.startswith("induction: 4-16 random tokens read twice (256 kinds)")
    assert "2 blocks, decoder-only" in line and "word tokens" not in line
    assert (
        "--preset" in build_parser().format_help() and "induction" in build_parser().format_help()
    )


@pytest.mark.parametrize(
    ("name", "task", "arch", "applies"),
    [
        ("max_len", "translation", "encoder-decoder", True),
        ("max_len", "induction", "decoder-only", False),
        ("tokenizer", "induction", "decoder-only", False),
        ("induction_length", "induction", "decoder-only", True),
        ("induction_length", "translation", "encoder-decoder", False),
        ("num_encoder_layers", "translation", "decoder-only", False),
        ("num_kv_heads", "induction", "decoder-only", True),
        ("num_kv_heads", "translation", "encoder-decoder", False),
        ("align_weight", "translation", "decoder-only", False),
        ("lr", "induction", "decoder-only", True),
        ("split_seed", "induction", "decoder-only", True),  # it seeds the random tokens
        ("num_encoder_layers", "translation", "encoder", True),  # the encoder's one stack
        ("num_decoder_layers", "translation", "encoder", False),
        ("num_decoder_layers", "translation", "decoder-only", True),
        ("eval_sentences", "translation", "encoder", False),  # it writes no French: no BLEU
        ("probes", "translation", "decoder-only", True),
        ("norm_first", "translation", "encoder", False),
        ("max_len", "translation", "encoder", True),
    ],
)
def test_the_form_shows_the_fields_a_task_and_an_architecture_read(name, task, arch, applies):
    assert settings.field_applies(name, task, arch) is applies


def test_an_encoder_learns_translation_pairs_as_masked_lm_and_nothing_else():
    """Issue 66: ``[CLS] source [SEP] target [SEP]`` in its position table; no induction."""
    encoder = {"model": {"arch": "encoder"}}
    assert "encoder" in settings.CHOICES["arch"]
    assert settings.validate_settings("d2l", encoder) == []
    too_long = {
        **encoder,
        "data": {"max_len": 20},
        "model": {"arch": "encoder", "max_positions": 42},
    }
    assert settings.validate_settings("d2l", too_long) == [
        "2 x max_len (20) + 3 must fit in the model's max_positions (42)"
    ]
    refused = settings.validate_settings("induction", encoder)
    assert refused == ["the induction task trains a decoder-only model (arch)"]
    assert (
        settings.blocks_words({"arch": "encoder", "num_encoder_layers": 3}) == "3 blocks, encoder"
    )
