"""What a browser can make this server hold, known before it exists, and the limits.

Every artifact a click can cause has its bytes estimated here from settings and shapes
before it is made, and a limit that is checked where it is written as well as at launch:

| artifact | estimated from | checked at |
|---|---|---|
| a run's probe snapshot | heads, layers, probes, positions | launch; the recorder, writing |
| a run's snapshots, kept models | the above, parameters | launch; the recorder thins |
| a run's metrics.jsonl | its cadence (capped) | ``RunDir.append_metrics`` thins |
| a run on disk (all of it) | the sum (``core.runs.run_bytes``) | launch, resume (quota); recorder |
| a saved model and its history | checkpoint and history size | "Save as a model" (quota) |
| a translation with its maps | heads, layers, source and output | before decoding (pages) |
| an alignment-scoring job | pairs x layers x heads x positions | before scoring (pages) |
| a pass of activation patching | rows x layers x positions | before any pass |
| a pass of a gradient method over many sentences | rows x layers x positions | before each batch |
| a model opened by the server | parameters | before loading (pages) |
| a run exported for TensorBoard | each summary's bytes | before each is written |
| an aligner's files for a run | their bytes | launch (``core.runs.alignment_request``) |

What all of it holds on disk together is checked against the quota (``core.runs.quota``).

Shape key: H heads, Le / Ld encoder / decoder layers, S source tokens, T output tokens, P a
prompted model's template tokens besides them (``core.model.interface.prompt_positions``),
N = P + S + T.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass

import numpy as np
import torch

from core.corpus.vocab import SPECIALS
from core.model import opened
from core.model.parts import source_len
from core.training.settings import GROUPS, field_default

MB = 2**20
GB = 2**30

# ----------------------------------------------------------------------------- the limits

SNAPSHOT_BYTES = 4 * MB  # one evaluation's probe maps (float16, every probe together)
SNAPSHOTS_BYTES = 32 * MB  # a run's probe snapshots together (thinned evenly past it)
MAX_SNAPSHOTS = 64  # and at most this many of them
KEPT_MODELS_BYTES = 512 * MB  # a run's kept snapshot models together (float16)
TRAJECTORY_ROWS = 50_000  # heads x steps a model's trajectories hold (both bases together)
METRICS_BYTES = 8 * MB  # a run's metrics.jsonl (older records thinned past it)
LOG_BYTES = 4 * MB  # a trainer's log (the start of a long log is cut on resume)
TRANSLATION_BYTES = 16 * MB  # one translation with all its maps, in the server's memory
ALIGNMENT_FILE_BYTES = 16 * MB  # each of an aligner's two files uploaded for a run
TENSORBOARD_BYTES = 48 * MB  # a run exported for TensorBoard (what would pass it: left out)
PROJECTION_BYTES = 32 * MB  # one projection of token representations (float16 vectors)
SCORING_CELLS = 64_000_000  # attention weights one alignment-scoring job holds (float32)
PATCH_BYTES = 256 * MB  # one pass of activation patching, every row of it (float32)
GRADIENT_BYTES = 256 * MB  # one pass of a gradient method over many sentences (float32)
MODEL_BYTES = 256 * MB  # the float32 weights of a model the server opens for the pages
HF_MODEL_BYTES = 640 * MB  # the same for a Hugging Face model (opus-mt-en-fr: ~300 MB)
MODELS_CACHE_BYTES = 768 * MB  # the models the server keeps open (one copy each)
SERVER_CACHE_BYTES = 512 * MB  # results the server keeps for every session (default)
CACHE_ITEM_BYTES = 64 * MB  # the largest one result the server keeps
DISK_CACHE_BYTES = 128 * MB  # each disk cache folder (.ablation, .attribution, .trajectories)
CORPORA_BYTES = 256 * MB  # corpora prepared for training (.corpora; fra-eng's: about 10 MB each)

CACHE_ENV = "ATTENTION_STUDIO_SERVER_CACHE_MB"  # the server's shared results, in MB

CHECKPOINT_BYTES_PER_PARAM = 4  # best.pt: float32 weights
LAST_BYTES_PER_PARAM = 12  # last.pt: float32 weights and Adam's two moments
KEPT_BYTES_PER_PARAM = 2  # a kept snapshot model: float16 weights
FLOAT16, FLOAT32 = 2, 4
PROBE_OVERHEAD = 4096  # a probe or translation: its objects, warnings and file headers
TOKEN_BYTES = 64  # a token string, pickled or in memory
RECORD_BYTES = 4096  # the largest metrics record the estimate allows (an eval with examples)
DISTRIBUTION_BYTES = 512  # one layer group's weight or gradient distribution in an eval record
SCORE_BYTES = 10  # one head's circuit score in an eval record ("0.1234, ": core.training.circuits)
FIXED_RUN_BYTES = 256 * 1024  # config, status, job, request, notes and locks


class BudgetError(Exception):
    """Something a user asked for would pass a limit; the message says which and what to do."""


def size_words(n_bytes: float) -> str:
    """A size for people: '640 KB', '12.3 MB', '1.45 GB'."""
    if n_bytes >= GB:
        return f"{n_bytes / GB:.2f} GB"
    if n_bytes >= MB:
        return f"{n_bytes / MB:.1f} MB"
    return f"{max(n_bytes, 0) / 1024:.0f} KB"


# ----------------------------------------------------------------------------- shapes


def attention_cells(model: Mapping, src_len: int, out_len: int) -> int:
    """Weights in one sentence's maps of all three kinds: H (Le S² + Ld (T² + T S))."""
    heads, enc, dec = model["num_heads"], model["num_encoder_layers"], model["num_decoder_layers"]
    return heads * (enc * src_len**2 + dec * (out_len**2 + out_len * src_len))


def output_len(max_len: int, max_positions: int) -> int:
    """The most output steps decoding takes (``core.model.decode.translate`` clamps max_len)."""
    return max(1, min(max_len, max_positions - 1))


def translation_bytes(model: Mapping, src_len: int, max_len: int) -> int:
    """One translation with its maps in memory (float32), its tokens and top-k lists."""
    out = output_len(max_len, model.get("max_positions", 512))
    tokens = (4 * src_len + 24 * out) * TOKEN_BYTES  # the token lists, ids and top-k tables
    return FLOAT32 * attention_cells(model, src_len, out) + tokens + PROBE_OVERHEAD


def longest_output(model: Mapping, src_len: int, max_len: int, limit: int = TRANSLATION_BYTES):
    """The longest output (<= max_len) whose translation fits ``limit``; 0 when none does."""
    low, high = 0, output_len(max_len, model.get("max_positions", 512))
    while low < high:  # the largest fitting length: translation_bytes grows with it
        mid = (low + high + 1) // 2
        low, high = (
            (mid, high) if translation_bytes(model, src_len, mid) <= limit else (low, mid - 1)
        )
    return low


def parameters(model: Mapping) -> int:
    """Parameters of a model of these sizes (a ModelConfig as a dict, vocabularies included)."""
    return opened.count_parameters(model)


def complete(settings: Mapping) -> dict:
    """Settings with every field of the config dataclasses (its default where one is missing),
    so a request or config.json that names only what it changes is estimated whole."""
    out = {}
    for group, cls in GROUPS.items():
        given = settings.get(group) if isinstance(settings.get(group), Mapping) else {}
        defaults = {f.name: field_default(f) for f in fields(cls)}
        out[group] = {**defaults, **given}
    return out


def vocab_bound(data: Mapping) -> int:
    """The most types a vocabulary of these data settings holds (specials included)."""
    if data.get("task") == "induction":  # the random tokens and the specials
        return int(data["induction_tokens"]) + len(SPECIALS)
    return int(data["bpe_vocab"] if data.get("tokenizer") == "bpe" else data["max_vocab"])


def model_bound(settings: Mapping) -> dict:
    """The model's sizes with its vocabularies at their largest."""
    vocab = vocab_bound(settings["data"])
    return {**settings["model"], "src_vocab_size": vocab, "tgt_vocab_size": vocab}


# ----------------------------------------------------------------------------- in memory


def sizeof(value, seen: set | None = None) -> int:
    """Bytes a value holds in memory: arrays, tensors, models and tables by their data;
    containers, dataclasses and this project's own objects by what they hold (each object
    counted once). Anything else (a lock, a class, a library's object) by its own size."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes() if value.device.type != "meta" else 0
    if isinstance(value, torch.nn.Module):
        tensors = [*value.parameters(), *value.buffers()]
        return sum(sizeof(t, seen) for t in tensors)
    if isinstance(value, np.ndarray):
        return value.nbytes + 128
    pd = sys.modules.get("pandas")  # not imported: no value can be a table (the trainer
    if pd is not None and isinstance(value, pd.DataFrame):  # never imports pandas)
        return int(value.memory_usage(deep=True).sum())
    if pd is not None and isinstance(value, pd.Series):
        return int(value.memory_usage(deep=True))
    if hasattr(value, "to_plotly_json") and not isinstance(value, type):  # a Plotly figure
        return sizeof(value.to_plotly_json(), seen)
    return sys.getsizeof(value) + sum(sizeof(v, seen) for v in _children(value))


def _children(value) -> Iterable:
    """What a container, a dataclass or an object of this project holds (nothing else)."""
    if isinstance(value, Mapping):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    if isinstance(value, type):
        return []
    if is_dataclass(value):
        return [getattr(value, f.name) for f in fields(value)]
    if type(value).__module__.startswith(("core.", "pages.")) and hasattr(value, "__dict__"):
        return list(vars(value).values())
    return []


def scoring_cells(
    model: Mapping,
    pairs: Iterable,
    tokenizer: str = "word",
    whole: bool = False,
    prompt: int | None = None,
) -> int:
    """Attention weights (all three kinds) a scoring job teacher-forcing these pairs holds;
    ``whole``: a model read in the full-context pass too (its cross-attention once more);
    ``prompt``: P of a prompted model, whose one attention reads all N positions of each
    pair (L H N², the template's rows and columns too)."""
    positions = model.get("max_positions", 512)
    cells = 0
    for src, tgt in pairs:
        S = source_len(list(src), tokenizer, positions)
        T = source_len(list(tgt), tokenizer, positions)  # <bos> + the target's tokens
        if prompt is not None:
            cells += model["num_heads"] * model["num_decoder_layers"] * (prompt + S + T) ** 2
            continue
        cells += attention_cells(model, S, T)
        if whole:
            cells += model["num_heads"] * model["num_decoder_layers"] * T * S
    return cells


def scoring_problem(
    model: Mapping,
    pairs: list,
    tokenizer: str = "word",
    whole: bool = False,
    prompt: int | None = None,
) -> str | None:
    """Why scoring every reader on these pairs would pass SCORING_CELLS (None: it would not);
    ``whole`` and ``prompt`` as ``scoring_cells``."""
    cells = scoring_cells(model, pairs, tokenizer, whole, prompt)
    if cells <= SCORING_CELLS:
        return None
    layers = f"{model['num_encoder_layers']}+{model['num_decoder_layers']} layers"
    shorter = "fewer or shorter pairs"
    if prompt is not None:  # one stack, its template read with every pair
        layers = f"{model['num_decoder_layers']} layers, a prompt template of {prompt} tokens"
        shorter += " or a shorter prompt template"
    return (
        f"Scoring {len(pairs):,} pairs with this model ({model['num_heads']} heads, {layers}) "
        f"would hold {size_words(FLOAT32 * cells)} of attention maps; the server scores at "
        f"most {size_words(FLOAT32 * SCORING_CELLS)} at once. Use {shorter} (python -m "
        "core.align takes any number)."
    )


OPEN_BYTES = {  # what the server opens, by where a model lies (``opened.open_problem``)
    opened.CHECKPOINT: MODEL_BYTES,
    opened.FOLDER: HF_MODEL_BYTES,
}


def patch_row_bytes(model: Mapping, src_len: int, tgt_len: int, prompt: int | None = None) -> int:
    """An upper bound on what one row of a patching pass holds (float32): every layer's
    activations (queries, keys, values, outputs, the feed-forward's hidden layer), its
    attention scores, the patched sites' copies and the last step's logits; ``prompt``: P
    of a prompted model, whose one stack reads all N = P + S + T positions in every layer."""
    D, H, F = model["d_model"], model["num_heads"], model["d_ff"]
    S, T, V = src_len, tgt_len, model["tgt_vocab_size"]
    if prompt is not None:
        N = prompt + S + T
        stack = model["num_decoder_layers"] * (N * (12 * D + F) + H * N * N)
        return FLOAT32 * (stack + 2 * N * D + V)
    encoder = model["num_encoder_layers"] * (S * (8 * D + F) + H * S * S)
    decoder = model["num_decoder_layers"] * (T * (12 * D + F) + H * T * (T + S))
    return FLOAT32 * (encoder + decoder + 2 * (S + T) * D + V)


def patch_rows(
    model: Mapping, src_len: int, tgt_len: int, most: int, prompt: int | None = None
) -> int:
    """How many components one patching pass takes (at most ``most``), within PATCH_BYTES
    (``prompt`` as ``patch_row_bytes``)."""
    row = patch_row_bytes(model, src_len, tgt_len, prompt)
    return max(1, min(most, PATCH_BYTES // row))


def gradient_rows(
    model: Mapping, src_len: int, tgt_len: int, prompt: int | None = None, limit: int | None = None
) -> int:
    """How many rows (a sentence at one integration point) one pass of a gradient method holds
    within ``limit`` bytes (GRADIENT_BYTES by default): each row keeps a patching row's
    activations for the backward pass and their gradients (``prompt`` as ``patch_row_bytes``)."""
    row = 2 * patch_row_bytes(model, src_len, tgt_len, prompt)
    return max(1, (GRADIENT_BYTES if limit is None else limit) // row)


def patch_problem(
    model: Mapping, src_len: int, tgt_len: int, prompt: int | None = None
) -> str | None:
    """Why one row of a patching pass alone would pass PATCH_BYTES, in one line (None: it
    fits); ``prompt`` as ``patch_row_bytes``."""
    row = patch_row_bytes(model, src_len, tgt_len, prompt)
    if row <= PATCH_BYTES:
        return None
    template = f"{prompt} tokens of the prompt template, " if prompt else ""
    shorter = "prompt template, sentence or prefix" if prompt else "sentence or prefix"
    return (
        f"Activation patching here would hold {size_words(row)} for each component it patches "
        f"({template}{src_len} of the sentence and {tgt_len} of the target prefix, at every "
        f"layer); one pass may hold at most {size_words(PATCH_BYTES)}: use a shorter {shorter}."
    )


def open_problem(path) -> str | None:
    """Why the server will not open the model at ``path`` (None: it will), read before
    loading it: the factory weighs it within ``OPEN_BYTES`` (``opened.open_problem``)."""
    return opened.open_problem(path, OPEN_BYTES, model_problem)


def model_problem(n_parameters: int, limit: int = MODEL_BYTES) -> str | None:
    """Why the server will not open a model of this many parameters (None: it will);
    ``limit``: MODEL_BYTES, or HF_MODEL_BYTES for a Hugging Face model."""
    need = FLOAT32 * n_parameters
    if need <= limit:
        return None
    return (
        f"This model has {n_parameters / 1e6:,.0f} M parameters ({size_words(need)} in memory); "
        f"the server opens models up to {size_words(limit)}. Use it from the command line "
        "(python -m core.translate, core.attribute, ...)."
    )


def server_cache_bytes() -> int:
    """Bytes of results the server keeps for every session (ATTENTION_STUDIO_SERVER_CACHE_MB)."""
    try:
        return max(0, int(float(os.environ[CACHE_ENV]) * MB))
    except (KeyError, ValueError):
        return SERVER_CACHE_BYTES
