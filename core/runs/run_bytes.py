"""What a training run will write, known from its settings before it starts: its probe
snapshots, kept snapshot models, metrics and checkpoints, each part within the limits of
``core.runs.budget``, and the trajectories' rows they make.

Checked at launch and resume (``core.runs.jobs``, the quota) and by the recorder as it writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.corpus.text import tokenize
from core.model.config import attention_layers
from core.model.parts import MAX_LEN, source_len
from core.runs.budget import (
    CHECKPOINT_BYTES_PER_PARAM,
    DISTRIBUTION_BYTES,
    FIXED_RUN_BYTES,
    FLOAT16,
    KEPT_BYTES_PER_PARAM,
    KEPT_MODELS_BYTES,
    LAST_BYTES_PER_PARAM,
    LOG_BYTES,
    MAX_SNAPSHOTS,
    METRICS_BYTES,
    PROBE_OVERHEAD,
    RECORD_BYTES,
    SCORE_BYTES,
    SNAPSHOT_BYTES,
    SNAPSHOTS_BYTES,
    TOKEN_BYTES,
    TRAJECTORY_ROWS,
    complete,
    model_bound,
    output_len,
    parameters,
    size_words,
    vocab_bound,
)
from core.training.circuits import circuit_sizes


def snapshot_bytes(settings: Mapping) -> int:
    """One evaluation's probe snapshot on disk: every probe's maps in float16 (decoded up to
    MAX_LEN tokens, as the trainer does), with its tokens; a run scored by its circuits keeps
    one pass over a sequence of its circuit scores, an encoder one pass over each probe
    (``core.training.probes``)."""
    settings = complete(settings)
    model, data = settings["model"], settings["data"]
    layers, heads = attention_layers(model), model["num_heads"]
    positions = model.get("max_positions", 512)
    if data.get("task") in ("induction", "lm"):  # [bos, a, a] of the circuit scores' length
        n = 2 * circuit_length(data, positions) + 1
        return (
            FLOAT16 * heads * layers["decoder_self"] * n * n + PROBE_OVERHEAD + 3 * n * TOKEN_BYTES
        )
    total = 0
    for probe in settings["train"].get("probes") or []:
        src = source_len(tokenize(probe), data.get("tokenizer", "word"), positions)
        if not layers["decoder_self"]:  # one pass over <bos> source <eos>
            cells = heads * layers["encoder"] * (src + 1) ** 2
            total += FLOAT16 * cells + PROBE_OVERHEAD + (src + 1) * TOKEN_BYTES
            continue
        out = output_len(MAX_LEN, positions)
        cells = heads * (layers["encoder"] * src**2 + layers["cross"] * (out**2 + out * src))
        total += FLOAT16 * cells + PROBE_OVERHEAD
        total += (src + 2 * out) * TOKEN_BYTES
    return total


def circuit_length(data: Mapping, positions: int) -> int:
    """n of the sequences [bos, a, a] a run's circuit scores read (``circuit_sizes``), its
    vocabulary at its largest."""
    summary = {**data, "tgt_vocab": vocab_bound(data)}
    n, types = circuit_sizes(summary, positions)
    return min(n, types)


def rows_per_step(model: Mapping) -> int:
    """Rows a trajectory holds per step: one per head of every layer of every kind."""
    return model["num_heads"] * sum(attention_layers(model).values())


def steps_that_fit(steps: list[int], rows: int, share: int = TRAJECTORY_ROWS) -> list[int]:
    """``steps`` thinned evenly (the first and the last stay) until ``rows`` rows per step fit
    in ``share`` rows."""
    most = max(2, share // max(rows, 1))
    while len(steps) > most:
        steps = [s for i, s in enumerate(steps) if i % 2 == 0 or i == len(steps) - 1]
    return steps


def snapshots_to_keep(settings: Mapping) -> int:
    """How many probe snapshots a run keeps: MAX_SNAPSHOTS, fewer where SNAPSHOTS_BYTES or
    the trajectories' rows (half of TRAJECTORY_ROWS) would be passed."""
    settings = complete(settings)
    one = max(snapshot_bytes(settings), 1)
    rows = TRAJECTORY_ROWS // 2 // rows_per_step(settings["model"])
    return max(0, min(MAX_SNAPSHOTS, SNAPSHOTS_BYTES // one, rows))


def models_to_keep(asked: int, n_parameters: int, model: Mapping) -> int:
    """How many snapshot models a run keeps: ``asked``, fewer where KEPT_MODELS_BYTES or the
    trajectories' rows would be passed (none when one model alone passes them)."""
    if not asked:
        return 0
    one = max(KEPT_BYTES_PER_PARAM * n_parameters, 1)
    rows = TRAJECTORY_ROWS // 2 // rows_per_step(model)
    return max(0, min(asked, KEPT_MODELS_BYTES // one, rows))


def eval_record_bytes(model: Mapping) -> int:
    """An evaluation record at its largest: examples, metrics, the distributions of the
    weights and gradients of every layer group (two embeddings, each layer, the output) and a
    one-stack run's circuit scores (three per head of every layer)."""
    groups = model["num_encoder_layers"] + model["num_decoder_layers"] + 3
    heads = model["num_heads"] * max(model["num_encoder_layers"], model["num_decoder_layers"])
    return RECORD_BYTES + 2 * groups * DISTRIBUTION_BYTES + 3 * heads * SCORE_BYTES


def metrics_bytes(train: Mapping, model: Mapping) -> int:
    """metrics.jsonl at its largest: its records (from the step limit and cadence, when the run
    has one), never past METRICS_BYTES and one thinning's second copy."""
    evaluation = eval_record_bytes(model)
    cap = 2 * METRICS_BYTES + evaluation
    steps = train.get("max_steps") or 0
    if not steps:
        return cap
    records = steps // max(train["log_every"], 1) * RECORD_BYTES
    evaluations = (steps // max(train["eval_every"], 1) + 2) * evaluation
    return min(cap, records + evaluations)


@dataclass
class RunBudget:
    """What a run may hold on disk at most, part by part, and what it keeps."""

    parameters: int  # of the model, vocabularies at their largest
    snapshot: int  # bytes of one evaluation's probe snapshot
    snapshots_kept: int  # probe snapshots kept (thinned evenly past it)
    models_kept: int  # snapshot models kept
    parts: dict[str, int] = field(default_factory=dict)  # what takes how many bytes

    @property
    def total(self) -> int:
        """Every part together."""
        return sum(self.parts.values())

    def words(self) -> str:
        """E.g. 'checkpoints 210 MB, kept models 160 MB, snapshots 1.2 MB, ...'."""
        parts = sorted(self.parts.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{name} {size_words(n)}" for name, n in parts if n)


def run_budget(settings: Mapping, corpus_bytes: int = 0) -> RunBudget:
    """The most disk a run of these settings takes (each checkpoint written beside the one it
    replaces, as a save does); ``corpus_bytes``: the copy of its corpus in the run."""
    settings = complete(settings)
    model = model_bound(settings)
    n = parameters(model)
    snap, keep = snapshot_bytes(settings), snapshots_to_keep(settings)
    models = models_to_keep(settings["train"].get("snapshot_models", 0), n, model)
    vocab = 2 * vocab_bound(settings["data"]) * TOKEN_BYTES  # both vocabularies in each file
    last, best = LAST_BYTES_PER_PARAM * n + vocab, CHECKPOINT_BYTES_PER_PARAM * n + vocab
    kept = KEPT_BYTES_PER_PARAM * n + vocab
    parts = {
        "checkpoints": last + best + last,  # a save writes the new file before the old goes
        "kept models": (models + 1) * kept if models else 0,
        "snapshots": (keep + 1) * snap,
        "metrics": metrics_bytes(settings["train"], model),
        "corpus copy": int(corpus_bytes),
        "log and records": LOG_BYTES + FIXED_RUN_BYTES,
    }
    return RunBudget(n, snap, keep, models, parts)


def run_problems(settings: Mapping) -> list[str]:
    """Why a run of these settings would pass a limit of this server ([] when it would not)."""
    settings = complete(settings)
    snap = snapshot_bytes(settings)
    if snap <= SNAPSHOT_BYTES:
        return []
    model, probes = settings["model"], settings["train"].get("probes") or []
    return [
        f"probes: their attention maps would take {size_words(snap)} at each evaluation "
        f"({len(probes)} probe sentences, {model['num_heads']} heads, "
        f"{model['num_encoder_layers']}+{model['num_decoder_layers']} layers, up to "
        f"{output_len(MAX_LEN, model.get('max_positions', 512))} output tokens); the limit is "
        f"{size_words(SNAPSHOT_BYTES)}: use fewer or shorter probe sentences, or fewer heads "
        "or layers"
    ]
