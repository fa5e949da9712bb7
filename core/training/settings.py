"""Run settings: the form's fields, preset defaults, validation, and command-line flags.

A run's settings are three groups, one per config dataclass: ``data`` (DataConfig),
``model`` (ModelConfig) and ``train`` (TrainConfig).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import re
from dataclasses import MISSING, dataclass, fields

from core.config_fields import flag_help
from core.corpus.config import DIRECTIONS, SPLITS, TASKS, TOKENIZERS, UPPER, DataConfig
from core.corpus.user_files import induction_words, source_problems
from core.corpus.vocab import SPECIALS
from core.model.config import ARCHS, MODEL_UPPER, ModelConfig
from core.model.dropout import MASKS
from core.training.config import DEVICES, RESUME_CHANGES, SCHEDULES, TRAIN_UPPER, TrainConfig
from core.training.devices import memory_problem, resolve_device
from core.training.presets import PRESETS

GROUPS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}
UPPERS = {"data": UPPER, "model": MODEL_UPPER, "train": TRAIN_UPPER}  # what too_large checks
DERIVED = ("src_vocab_size", "tgt_vocab_size", "pad_id")  # model fields the data decides
COMMAND_ONLY = (  # set by the run, not the form: where the alignments came from; one
    "align_source",  # vocabulary for a one-stack model (core.runs.training_run.prepare)
    "shared_vocab",
)


class SettingsError(ValueError):
    """Settings name an unknown preset or group; the message says which."""


CHOICES = {
    "split": SPLITS,
    "tokenizer": TOKENIZERS,
    "direction": DIRECTIONS,
    "schedule": SCHEDULES,
    "device": DEVICES,
    "dropout_masks": MASKS,
    "arch": ARCHS,
    "task": TASKS,
}


def field_help(cls) -> dict[str, str]:
    """The comment after each field of a config dataclass, as help text."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#\s*(.+)$", src, re.M)}


@dataclass
class FormField:
    """One hyper-parameter as the Train form shows it."""

    group: str  # "data", "model" or "train"
    name: str  # field name in its config dataclass
    value_type: str  # "int", "float", "bool", "str", "list" or "choice"
    help: str = ""  # the field's comment in its dataclass
    choices: tuple = ()  # allowed values of a "choice"


def form_fields() -> list[FormField]:
    """Every tunable field of DataConfig, ModelConfig and TrainConfig, in order."""
    skip = {*DERIVED, "source", *COMMAND_ONLY}  # the form picks the data source itself
    out = []
    for section, cls in GROUPS.items():
        helps = field_help(cls)
        for f in fields(cls):
            if f.name in skip:
                continue
            value_type = "choice" if f.name in CHOICES else str(f.type).split("[")[0]
            out.append(
                FormField(
                    section, f.name, value_type, helps.get(f.name, ""), CHOICES.get(f.name, ())
                )
            )
    return out


TASK_ONLY = {  # fields that mean something for one task only: the Train form hides the rest
    "translation": (
        *("max_len", "min_freq", "max_vocab", "split", "val_fraction", "test_fraction"),
        *("num_train", "num_val", "max_pairs", "tokenizer", "bpe_vocab", "direction"),
        *("eval_sentences", "probes"),  # BLEU and the probe sentences' maps
    ),
    "induction": (
        "induction_length",
        "induction_min_length",
        "induction_tokens",
        "induction_sequences",
    ),
    "lm": (  # the corpus's text, packed
        *("max_len", "min_freq", "max_vocab", "split", "val_fraction", "test_fraction"),
        *("num_train", "num_val", "max_pairs", "tokenizer", "bpe_vocab", "direction"),
        "context_length",
    ),
}
ARCH_ONLY = {  # fields that mean something for one architecture only
    "encoder-decoder": (
        *("num_encoder_layers", "norm_first", "dropout_masks"),  # Llama: pre-norm, torch's dropout
        *("align_weight", "align_layer", "align_head", "align_full_context"),  # cross-attention
        *("num_decoder_layers", "eval_sentences", "probes"),  # a writer's: BLEU, probe maps
    ),
    "decoder-only": ("num_kv_heads", "num_decoder_layers", "eval_sentences", "probes"),
    "encoder": ("num_encoder_layers",),  # BERT-style: its one stack's layers; it fills masks
}


def field_applies(name: str, task: str, arch: str) -> bool:
    """Whether the setting ``name`` means anything for a run of this task and architecture."""
    tasks = [t for t, names in TASK_ONLY.items() if name in names]
    archs = [a for a, names in ARCH_ONLY.items() if name in names]
    return (not tasks or task in tasks) and (not archs or arch in archs)


def field_default(f):
    """The default value of a dataclass field (None when it has none)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def defaults(preset: str) -> dict[str, dict]:
    """Every setting of ``preset``: dataclass defaults overridden by the preset."""
    if preset not in PRESETS:
        raise SettingsError(f"Unknown preset '{preset}': choose one of {', '.join(PRESETS)}.")
    out = {}
    for section, cls in GROUPS.items():
        out[section] = {f.name: field_default(f) for f in fields(cls)}
        out[section].update(copy.deepcopy(PRESETS[preset].get(section, {})))
    for name in DERIVED:
        out["model"].pop(name)
    return out


def merged_settings(preset: str, overrides: dict | None = None) -> dict[str, dict]:
    """The preset's settings with ``overrides`` ({"data"|"model"|"train": {...}}) applied."""
    cfg = defaults(preset)
    if not isinstance(overrides or {}, dict):
        raise SettingsError(
            "Settings must be groups of fields: {data: ..., model: ..., train: ...}."
        )
    for section, values in (overrides or {}).items():
        if section not in cfg:
            raise SettingsError(f"Unknown settings group '{section}': use {', '.join(GROUPS)}.")
        if not isinstance(values, dict):
            raise SettingsError(f"Settings group '{section}' must map fields to values.")
        cfg[section].update(values)
    return cfg


def _built(cls, values: dict, **derived):
    """(a config dataclass built from ``values``, []) or (None, [why it cannot be built])."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(str(k) for k in values if k not in known or k in derived)
    if unknown:
        return None, [f"unknown setting {name!r}" for name in unknown]
    return cls(**values, **derived), []


def config_problems(cfg: dict[str, dict]) -> list[str]:
    """Reasons why the data, model and train groups are not valid configs (none: []).

    Each config's own ``problems()`` is the only check of its fields; this adds the rules
    across groups (the task's architecture, its sequences in the position table:
    ``task_problems``; the head trained to align: ``align_problems``).
    """
    if not isinstance(cfg, dict) or any(not isinstance(cfg.get(g), dict) for g in GROUPS):
        return [f"settings must have the groups {', '.join(GROUPS)}"]
    data, problems = _built(DataConfig, cfg["data"])
    vocab = data.max_vocab if data and isinstance(data.max_vocab, int) else len(SPECIALS) + 1
    if data and data.task == "induction" and isinstance(data.induction_tokens, int):
        vocab = len(SPECIALS) + max(data.induction_tokens, 1)  # its own vocabulary
    model, more = _built(ModelConfig, cfg["model"], src_vocab_size=vocab, tgt_vocab_size=vocab)
    train, most = _built(TrainConfig, cfg["train"])
    problems += more + most
    for config in (data, model, train):
        problems += config.problems() if config is not None else []
    problems += [] if problems else task_problems(data, model)
    return problems + ([] if problems else align_problems(model, train))


def task_problems(data: DataConfig, model: ModelConfig) -> list[str]:
    """Why the task and the architecture do not go together, or the task's sequences do not
    fit the position table: translation is learnt by an encoder-decoder (sentences of max_len
    words, with <bos>/<eos>) or by a decoder-only model prompted with the source (it reads
    ``source <eos> <bos> target <eos>`` in one sequence), the induction task by a decoder-only
    model (a start token and n tokens read twice, as its circuit scores read them:
    ``core.training.circuits``); the lm task (the corpus's text packed in contexts of
    context_length tokens) by a decoder-only model. An encoder learns translation pairs as a
    masked language model (``[CLS] source [SEP] target [SEP]``, ``core.model.encoder_trainee``),
    nothing else: the induction and lm tasks cut each sequence for a reader of the next token
    (its evaluations score its heads on the same repeated tokens: ``core.training.circuits``)."""
    if data.task == "lm":
        if model.arch != "decoder-only":
            return ["the lm task trains a decoder-only model (arch)"]
        if data.context_length + 1 > model.max_positions:
            return [
                f"context_length ({data.context_length}) + 1 must fit in the model's "
                f"max_positions ({model.max_positions})"
            ]
        return []
    induction = data.task == "induction"
    if induction and model.arch != "decoder-only":
        return ["the induction task trains a decoder-only model (arch)"]
    if induction:
        need, words = (
            2 * data.induction_length + 1,
            f"2 x induction_length ({data.induction_length}) + 1",
        )
    elif model.arch == "encoder":  # [CLS] source [SEP] target [SEP], read as masked LM
        need, words = 2 * data.max_len + 3, f"2 x max_len ({data.max_len}) + 3"
    elif model.arch == "decoder-only":  # source <eos> <bos> target <eos> in one sequence
        need, words = 2 * data.max_len + 2, f"2 x max_len ({data.max_len}) + 2"
    else:
        need, words = data.max_len + 2, f"max_len ({data.max_len}) + 2"  # <bos>/<eos> take two
    if need > model.max_positions:
        return [f"{words} must fit in the model's max_positions ({model.max_positions})"]
    return []


def align_problems(model: ModelConfig, train: TrainConfig) -> list[str]:
    """Why the head trained to align is not one of the model's (only when supervision is on)."""
    if not train.align_weight:
        return []
    if model.arch != "encoder-decoder":
        return ["align_weight trains a cross-attention head: an encoder-decoder's (arch)"]
    problems = []
    if train.align_layer >= model.num_decoder_layers:
        problems.append(
            f"align_layer must be below num_decoder_layers ({model.num_decoder_layers}) "
            f"(got {train.align_layer})"
        )
    if train.align_head >= model.num_heads:
        problems.append(
            f"align_head must be below num_heads ({model.num_heads}) (got {train.align_head})"
        )
    return problems


def validate_settings(preset: str, overrides: dict | None = None, any_source=False) -> list[str]:
    """Human reasons why these settings cannot train (an empty list when they can); with
    ``any_source`` (the command line, which reads any path) the data source is not checked."""
    try:
        cfg = merged_settings(preset, overrides)
    except SettingsError as e:
        return [str(e)]
    source = cfg["data"].get("source", "fra-eng")
    made = cfg["data"].get("task") == "induction"  # its sequences are made, no file read
    problems = config_problems(cfg) + ([] if any_source or made else source_problems(source))
    if problems:
        return problems
    try:
        device_type = resolve_device(cfg["train"]["device"])
    except ValueError as e:
        return [str(e)]
    return [p for p in [memory_problem(cfg, device_type)] if p]


GROUP_TITLES = {"data": "Data", "model": "Model", "train": "Training"}  # the form's headings
DERIVED_FROM = "the vocabularies, which the data settings max_vocab and bpe_vocab bound"


def field_of(problem: str) -> FormField | None:
    """The form field a problem is about: the one its text starts with (None: no field)."""
    first = re.match(r"[a-z_]+", problem)
    return next((f for f in form_fields() if first and f.name == first[0]), None)


def form_problems(problems: list[str]) -> list[str]:
    """Problems as the Train form's user reads them: each led by where its field sits
    ("Model › d_model (30) must be ..."); problems of the fields the data decides (the
    vocabulary sizes) only where no data setting explains them, and in those words."""
    derived = [p for p in problems if p.split(" ", 1)[0].rstrip(":") in DERIVED]
    out = []
    for problem in problems:
        if problem in derived:
            if len(derived) < len(problems):
                continue  # a data setting's own problem says it first
            problem = f"{DERIVED_FROM}: {problem}"
        f = field_of(problem)
        out.append(f"{GROUP_TITLES[f.group]} › {problem}" if f else problem)
    return out


def data_words(d: dict) -> str:
    """What a run's data settings read, e.g. 'first 512 + 128 pairs · word tokens'."""
    if d.get("task") == "induction":
        return f"{induction_words(d)}, {d['induction_sequences']:,} sequences"
    if d.get("split") == "head":
        data = f"first {d.get('num_train') or 'all'} + {d.get('num_val', 0)} pairs"
    else:
        data = f"random split, sentences up to {d['max_len']} words"
    if d.get("tokenizer") == "bpe":
        return data + f" · BPE subwords ({d.get('bpe_vocab', DataConfig.bpe_vocab):,})"
    return data + " · word tokens"


def describe_settings(cfg: dict[str, dict]) -> str:
    """One line of what a run would be, e.g. 'first 512 + 128 pairs · width 256 · ...'."""
    d, m, t = cfg["data"], cfg["model"], cfg["train"]
    data = data_words(d)
    if t.get("align_weight"):
        layer, head = t.get("align_layer", 0), t.get("align_head", 0)
        data += f" · cross layer {layer} head {head} trained to align"
    limits = [f"{t['epochs']} epochs"] if t.get("epochs") else []
    limits += [f"{t['max_steps']:,} steps"] if t.get("max_steps") else []
    limits += [f"{t['time_budget'] / 60:g} min"] if t.get("time_budget") else []
    return " · ".join(
        [
            data,
            f"width {m['d_model']}",
            blocks_words(m),
            f"{m['num_heads']} heads",
            f"FFN {m['d_ff']}",
            f"dropout {m['dropout']:g}",
            f"lr {t['lr']:g}",
            f"batch {t['batch_size']}",
            " or ".join(limits) or "no limit",
        ]
    )


def blocks_words(model: dict) -> str:
    """'2+2 blocks' (encoder + decoder), '2 blocks, decoder-only' or '2 blocks, encoder'."""
    if model.get("arch") == "encoder":
        return f"{model.get('num_encoder_layers')} blocks, encoder"
    if model.get("arch") == "decoder-only":
        return f"{model.get('num_decoder_layers')} blocks, decoder-only"
    return f"{model.get('num_encoder_layers')}+{model.get('num_decoder_layers')} blocks"


def to_flags(overrides: dict) -> list[str]:
    """core.train command-line flags for ``overrides`` (data.source becomes --data)."""
    argv = []
    for section in GROUPS:
        for name, value in overrides.get(section, {}).items():
            flag = "--" + name.replace("_", "-")
            if section == "data" and name == "source":
                argv += [f"--data={value}"]
            elif isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, (list, tuple)):
                argv += [flag, *map(str, value)] if value else []
            else:
                argv.append(f"{flag}={value}")
    return argv


def add_setting_flags(parser: argparse.ArgumentParser, preset: str = "small") -> None:
    """One flag per settable field (``--d-model``, ``--no-amp``...), the inverse of to_flags;
    each one's help: the field's comment, its default in ``preset``, its choices or limit."""
    shown = defaults(preset)
    parser.add_argument(
        "--data",
        dest="data.source",
        default=argparse.SUPPRESS,
        help="'fra-eng' (download) or a path to a .zip / tab-separated file",
    )
    for group, cls in GROUPS.items():
        helps = field_help(cls)
        for f in fields(cls):
            if f.name in (*DERIVED, "source"):
                continue
            words = (shown[group][f.name], UPPERS[group].get(f.name), CHOICES.get(f.name, ()))
            kw = {"dest": f"{group}.{f.name}", "default": argparse.SUPPRESS}
            kw["help"] = flag_help(helps.get(f.name, ""), *words, preset=preset)
            if f.type in ("bool", bool):
                kw["action"] = argparse.BooleanOptionalAction
            elif str(f.type).startswith("list"):
                kw["nargs"] = "+"
            else:
                kw["type"] = {"int": int, "float": float, "str": str}[str(f.type)]
            parser.add_argument("--" + f.name.replace("_", "-"), **kw)


def resume_problem(args: argparse.Namespace, saved: dict) -> str | None:
    """Why a resume's setting flags cannot be read, in one line (None: they can): a resumed run
    keeps its own settings (``saved``, its config.json) but the limits, lr, warmup and clipping
    (RESUME_CHANGES); a flag giving another value was dropped without a word (the same value,
    as the command that started the run repeats it, changes nothing; the corpus is the run's)."""
    dropped = []
    for key, value in vars(args).items():
        group, _, name = key.partition(".")
        if not name or key == "data.source" or (group == "train" and name in RESUME_CHANGES):
            continue
        if (saved.get(group) or {}).get(name, value) != value:
            dropped.append("--" + name.replace("_", "-"))
    if not dropped:
        return None
    kept = ", ".join("--" + k.replace("_", "-") for k in RESUME_CHANGES)
    return f"--resume keeps the run's own settings: it may change {kept}, not {', '.join(dropped)}"


def settings_from_args(args: argparse.Namespace) -> dict[str, dict]:
    """The preset's settings overridden by the flags given on the command line."""
    cfg = {k: dict(v) for k, v in PRESETS[args.preset].items()}
    for key, value in vars(args).items():
        if "." in key:
            group, name = key.split(".", 1)
            cfg.setdefault(group, {})[name] = value
    return cfg
