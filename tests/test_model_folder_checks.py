"""Hugging Face model folders checked before anything is loaded (issue 64, items 6, 8 and 9):
a weights file cut short or too long, a config asking for more layers than anything built
could hold, and no server path in any message about a folder."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from core.model import hf_folder
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.runs.catalogue import list_models
from tests.hf_tiny import CONFORMANCE, save_tiny, tiny_config
from tests.lm_tiny import (
    ENCODER_FAMILIES,
    ENCODER_REAL_FLAGS,
    LM_FAMILIES,
    byte_level_tokenizer,
    save_tiny_lm,
    tiny_encoder_config,
    tiny_lm_config,
)


@pytest.fixture
def checkpoints(tmp_path, monkeypatch) -> Path:
    """An empty checkpoints/ folder the app lists (ATTENTION_STUDIO_CHECKPOINTS)."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(root))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return root


def listed(root: Path) -> dict:
    """{folder name: catalogue entry} of the model folders under ``root``."""
    entries = list_models(str(root), str(root.parent / "runs"))
    return {Path(e.path).name: e for e in entries}


def refusal(folder: Path) -> str:
    """The one line open_model refuses ``folder`` with (the server's memory limit on)."""
    with pytest.raises(CheckpointError) as err:
        open_model(str(folder), max_bytes=640 * 2**20)
    return str(err.value)


def edit_config(folder: Path, **changes) -> Path:
    """Rewrite ``folder``'s config.json with ``changes``."""
    path = folder / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))
    return folder


# ----------------------------------------------------------------------------- item 6


@pytest.mark.parametrize("change, needle", [(-100, "cut short"), (100, "longer than")])
def test_a_weights_file_of_the_wrong_length_is_unusable_and_one_line(checkpoints, change, needle):
    """A whole header over a body cut short (a copy under way) or with bytes after it: listed
    as unusable from the header alone, and refused in one line, never SafetensorError."""
    folder = save_tiny(checkpoints / "copied", "marian")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:change] if change < 0 else data + bytes(change))
    entry = listed(checkpoints)["copied"]
    assert not entry.usable and needle in entry.reason and "model.safetensors" in entry.reason
    line = refusal(folder)
    assert needle in line and "\n" not in line


def test_damage_the_header_cannot_show_is_one_line_at_loading(checkpoints):
    """A header whose length is right but whose dtype disagrees with its bytes: safetensors
    refuses it as the weights load, and that is one line of the studio's."""
    folder = save_tiny(checkpoints / "mislabelled", "marian")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + size].replace(b'"F32"', b'"F16"', 1)
    weights.write_bytes(data[:8] + header + data[8 + size :])
    assert listed(checkpoints)["mislabelled"].usable  # nothing in the header says otherwise
    line = refusal(folder)
    assert "cannot be loaded" in line and "safetensors" in line and "\n" not in line


def shard(folder: Path) -> Path:
    """``folder``'s weights cut into two shards with their index, as save_pretrained writes
    a large model's."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    names = sorted(weights)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2]}
    halves["model-00002-of-00002.safetensors"] = names[len(names) // 2 :]
    for file, keys in halves.items():
        save_file({k: weights[k] for k in keys}, folder / file, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: f for f, ks in halves.items() for k in ks}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()
    return folder


def test_sharded_weights_are_read_and_each_shard_checked(checkpoints):
    folder = shard(save_tiny(checkpoints / "sharded", "marian"))
    assert listed(checkpoints)["sharded"].usable
    assert open_model(str(folder)).cfg.d_model == 32
    second = folder / "model-00002-of-00002.safetensors"
    second.write_bytes(second.read_bytes()[:-10])
    entry = listed(checkpoints)["sharded"]
    assert not entry.usable and "model-00002-of-00002.safetensors is cut short" in entry.reason
    second.unlink()
    entry = listed(checkpoints)["sharded"]
    assert not entry.usable and "model-00002-of-00002.safetensors" in entry.reason
    assert "\n" not in refusal(folder)


# ----------------------------------------------------------------------------- item 8


def family_configs():
    """(name, config) of every family the studio reads, with its real checkpoints' flags
    (tests/hf_tiny.py, tests/lm_tiny.py), and variants that change what is counted."""
    from transformers import BertConfig, MT5Config, RobertaConfig

    out = [(f, tiny_config(f, 50)) for f in CONFORMANCE]
    tokenizer = byte_level_tokenizer(bos=True)
    out += [(f, tiny_lm_config(f, tokenizer)) for f in LM_FAMILIES]
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    sizes |= {"intermediate_size": 64, "vocab_size": 70, "max_position_embeddings": 40}
    out += [("bert", BertConfig(**sizes, **ENCODER_REAL_FLAGS["bert"]))]
    out += [("roberta", RobertaConfig(**sizes, **ENCODER_REAL_FLAGS["roberta"]))]
    out += [(f, tiny_encoder_config(f, 70)) for f in ("distilbert", "electra")]
    variants = [
        ("marian", {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 30}),
        ("marian", {"tie_word_embeddings": False, "decoder_layers": 3}),
        ("marian", {"share_encoder_decoder_embeddings": False, "tie_word_embeddings": False}),
        ("bart", {"tie_word_embeddings": False, "encoder_ffn_dim": 48}),
        ("mbart", {"tie_word_embeddings": False, "max_position_embeddings": 30}),
        ("m2m_100", {"decoder_ffn_dim": 40, "decoder_layers": 1, "tie_word_embeddings": False}),
        ("t5", {"num_decoder_layers": 3, "d_kv": 4, "relative_attention_num_buckets": 16}),
        ("gpt2", {"n_inner": 40, "tie_word_embeddings": False, "add_cross_attention": True}),
        ("llama", {"attention_bias": True, "mlp_bias": True, "head_dim": 4}),
        ("qwen2", {"tie_word_embeddings": False, "num_key_value_heads": 1}),
        ("mistral", {"head_dim": 16}),
        ("gemma", {"attention_bias": True, "tie_word_embeddings": False}),
        ("bert", {"tie_word_embeddings": False, "type_vocab_size": 1}),
        ("distilbert", {"tie_word_embeddings": False, "hidden_dim": 40}),
        ("electra", {"tie_word_embeddings": False, "embedding_size": 32}),  # no projection
    ]
    real = dict(out)
    for name, changes in variants:
        config = type(real[name])(**real[name].to_dict() | changes)
        out.append((f"{name} {' '.join(f'{k}={v}' for k, v in changes.items())}", config))
    mt5 = {"vocab_size": 50, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2}
    out.append(("mt5", MT5Config(**mt5, num_heads=4)))
    return [pytest.param(config, id=name) for name, config in out]


def built_parameters(config) -> int:
    """Parameters of the model ``config`` describes, as transformers builds it (on the meta
    device: the same modules, no memory)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    auto = AutoModelForMaskedLM if config.model_type in ENCODER_FAMILIES else auto
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", family_configs())
def test_the_count_from_the_config_is_the_models_own(config):
    """The arithmetic count equals the built model's parameters, read from config.json as
    save_pretrained writes it (only what differs from the defaults) and written out whole."""
    from core.model.hf_size import counted_parameters

    built = built_parameters(config)
    assert counted_parameters(json.loads(config.to_json_string())) == built
    assert counted_parameters(config.to_dict()) == built


def test_a_saved_folder_is_described_with_its_own_count(hf_models, hf_loaded, lm_models, lm_loaded):
    """Every tiny model the suite loads: the folder's description counts what loading holds."""
    for folders, loaded in ((hf_models, hf_loaded), (lm_models, lm_loaded)):
        for family, folder in folders.items():
            held = sum(p.numel() for p in loaded[family].model.parameters())
            assert hf_folder.describe(folder)["config_parameters"] == held, family


def test_the_defaults_a_config_may_leave_out_are_transformers_own():
    """What the count assumes of a key a config.json leaves out is what the config class
    assumes (so a transformers upgrade that changes one fails here)."""
    from transformers import AutoConfig

    from core.model.hf_size import FAMILY_DEFAULTS

    for family, defaults in FAMILY_DEFAULTS.items():
        config = AutoConfig.for_model(family).to_dict()
        for key, value in defaults.items():
            assert config.get(key) == value, (family, key)


def forbid_building(monkeypatch):
    """Any model module constructed, or any config parsed by transformers, fails the test."""
    from transformers import AutoConfig

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was built (or its config parsed) for a refused folder")

    monkeypatch.setattr(torch.nn.Module, "__init__", forbidden)
    monkeypatch.setattr(AutoConfig, "from_pretrained", forbidden)


DEEP = {  # per family, the keys of a config asking for 20,000 layers
    "marian": {"encoder_layers": 20_000, "decoder_layers": 20_000},
    "t5": {"num_layers": 20_000},
    "llama": {"num_hidden_layers": 20_000},
    "gpt2": {"n_layer": 20_000},
}


@pytest.mark.parametrize("family", DEEP)
def test_a_config_of_20000_layers_is_refused_before_anything_is_built(
    checkpoints, monkeypatch, family
):
    save = save_tiny_lm if family in LM_FAMILIES else save_tiny
    folder = edit_config(save(checkpoints / "deep", family), **DEEP[family])
    assert (folder / "config.json").stat().st_size < 2048
    forbid_building(monkeypatch)
    entry = listed(checkpoints)["deep"]
    assert not entry.usable and "20,000 layers" in entry.reason, entry.reason
    line = refusal(folder)
    assert "20,000 layers" in line and "\n" not in line


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"num_labels": 10**8}, "100,000,000 labels"),
        ({"d_model": 1 << 20}, "parameters"),  # a million wide: 10^12 parameters
        ({"d_model": "512"}, "d_model"),
        ({"encoder_layers": -1}, "encoder_layers"),
    ],
)
def test_a_config_that_cannot_be_counted_or_held_is_refused_first(
    checkpoints, monkeypatch, changes, needle
):
    """A label count transformers would spell out one by one, a width past anything held,
    a size that is not a whole number: refused from the JSON, nothing parsed or built."""
    folder = edit_config(save_tiny(checkpoints / "odd", "marian"), **changes)
    forbid_building(monkeypatch)
    entry = listed(checkpoints)["odd"]
    assert not entry.usable and needle in entry.reason, entry.reason
    assert needle in refusal(folder)


# ----------------------------------------------------------------------------- item 9


def broken_folders(root: Path) -> dict:
    """{name: folder} of model folders broken in the ways transformers words with a path."""
    out = {}
    out["renamed"] = save_tiny(root / "renamed", "marian")  # no model.safetensors
    (out["renamed"] / "model.safetensors").rename(out["renamed"] / "weights.safetensors")
    out["no-weights"] = save_tiny(root / "no-weights", "marian")
    (out["no-weights"] / "model.safetensors").unlink()
    out["lost-shard"] = shard(save_tiny(root / "lost-shard", "marian"))
    (out["lost-shard"] / "model-00002-of-00002.safetensors").unlink()
    out["tokenizer"] = save_tiny(root / "tokenizer", "marian")
    (out["tokenizer"] / "tokenizer.json").write_text('{"model": 5}')
    out["activation"] = edit_config(save_tiny(root / "activation", "bart"), activation_function="x")
    return out


def test_no_message_about_a_folder_shows_a_server_path(checkpoints, tmp_path, capsys):
    from core.translate import main as translate

    folders = broken_folders(checkpoints)
    entries = listed(checkpoints)
    for name, folder in folders.items():
        messages = [refusal(folder)]
        messages += [entries[name].reason] if not entries[name].usable else []
        assert translate(["--checkpoint", str(folder), "the boy ."]) == 2
        messages.append(capsys.readouterr().err)
        for message in messages:
            assert str(tmp_path) not in message and "/tmp" not in message, (name, message)
    assert "checkpoints/renamed has no model.safetensors" in refusal(folders["renamed"])


@pytest.mark.parametrize("family", ["marian", "llama"])
def test_transformers_words_reach_a_message_through_the_one_rule(
    checkpoints, tmp_path, monkeypatch, family
):
    """A folder that passed every check, whose weights go as it loads (another copy under
    way): transformers names the folder by its path; the message names it checkpoints/…"""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    save = save_tiny_lm if family in LM_FAMILIES else save_tiny
    folder = save(checkpoints / "racing", family)
    auto = AutoModelForCausalLM if family in LM_FAMILIES else AutoModelForSeq2SeqLM

    def gone(*args, **kwargs):  # transformers' own words for a folder without its weights
        raise OSError(f"Error no file named model.safetensors found in directory {folder}.")

    monkeypatch.setattr(auto, "from_pretrained", gone)
    line = refusal(folder)
    assert str(tmp_path) not in line
    assert line.endswith("found in directory checkpoints/racing."), line


def test_an_unreadable_config_is_one_line_without_its_path(checkpoints, tmp_path, monkeypatch):
    folder = save_tiny(checkpoints / "locked", "marian")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    entry = listed(checkpoints)["locked"]
    assert not entry.usable and "Permission denied" in entry.reason
    line = refusal(folder)
    assert str(tmp_path) not in entry.reason + line and "checkpoints/locked" in line


def test_paths_inside_another_librarys_words_are_shown_by_the_one_rule(checkpoints, tmp_path):
    from core.places import shown_paths

    inside = checkpoints / "opus mt"
    text = (
        f"no file named model.safetensors found in directory {inside}. See "
        f"https://huggingface.co/docs/x or '{tmp_path}/elsewhere/shard.safetensors' (and/or "
        "checkpoints/kept, 1/2)."
    )
    shown = shown_paths(text, inside)
    assert str(tmp_path) not in shown and "directory checkpoints/opus mt." in shown
    assert "https://huggingface.co/docs/x" in shown and "'shard.safetensors'" in shown
    assert "and/or checkpoints/kept, 1/2" in shown
