"""Per-head trajectories over training: each head's numbers at every snapshot of a run.

For every head of every kind, at each snapshot step: the mean row entropy (nats), the
diagonality (self-attention: weight on the query's own position; cross: share within one
key of the rescaled diagonal, as ``head_stats`` measures them), the weight one position to
the left (self-attention; Voita et al. 2019's positional heads), the share of weight on
<bos>/<eos> keys, and for cross heads the AER of their links on a gold set.

Two bases, because a snapshot holds only the probe sentences' maps:

- ``probes``: every snapshot; the probe sentences as the model translated them then
  (free-running), averaged over probes. AER only where a probe and its output are a gold pair.
- ``validation``: at steps with a model: the run's snapshot models
  (``snapshots/model_<step>.pt``, float16, kept at up to ``TrainConfig.snapshot_models``
  evaluations), ``best.pt``, ``last.pt`` and any other ``.pt`` in the run directory (beside a
  ``.history`` file, its model); the first N validation sentences teacher-forced on their
  first reference, AER on the gold set, and one number of the whole model per step: the
  source share of its predictions (``ShareFn``; ALTI+ in ``core.alignment.head_aer``).
  A ``.history`` file can carry these numbers for its snapshot steps (``stored``), measured
  when it was written from its run, so a shipped model has them without its corpus.

Each step's numbers are cached on disk (``<runs>/.trajectories/``) by content: a snapshot by
its bytes, a checkpoint by its SHA-1 with the data settings, N and what was asked.

Shape key: L layers, B sentences, H heads, Tq queries, Tk keys.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.attention.head_stats import NEAR_DIAGONAL_KEYS
from core.attention.importance import (
    ProgressFn,
    sample_key,
    validation_sample,
)
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.attention.snapshots import SNAPSHOT_ERRORS
from core.corpus.source import DataError, file_sha1
from core.corpus.vocab import Vocab
from core.model.checkpoints import (
    CheckpointError,
    LoadedModel,
    load_checkpoint,
    read_metadata,
    trained_data,
)
from core.model.record import record
from core.model.transformer import evaluating
from core.places import trajectories_root
from core.runs import budget
from core.runs.disk_cache import read_cached, write_cached
from core.runs.history import SUFFIX, HistoryFile, open_history
from core.runs.run_dir import RunDir

METRICS = ("entropy", "diagonal", "previous", "special", "aer")  # a head's numbers at a step
MAP_METRICS = METRICS[:4]  # those read from the maps alone
METRIC_NAMES = {
    "entropy": "entropy (nats, mean over rows)",
    "diagonal": "diagonality (own position; cross: near the rescaled diagonal)",
    "previous": "weight on the previous position (self-attention only)",
    "special": "share of weight on <bos>/<eos>",
    "aer": "alignment error rate on the gold set (cross heads, lower is better)",
}
BASES = ("probes", "validation")
SENTENCES = 100  # validation sentences of the ``validation`` basis (the first N)
VALIDATION = ("off", "cached", "measure")  # the validation basis: none, from the cache, all
BATCH = 64  # sentences teacher-forced together
CACHE_VERSION = 2
STORED_KEY = "trajectories"  # a .history file's section of validation numbers per step
COST = {"probes": 1, "validation": 40}  # relative cost of a step of each basis (progress)

AerFn = Callable[[LoadedModel], dict]  # model -> {(layer, head): AER} of its cross heads
ProbeAerFn = Callable[[list[SentenceMaps]], dict | None]  # probes -> the same, or None
Rows = Sequence[tuple[list[int], list[int]]]  # teacher-forced (source ids, reference ids)
ShareFn = Callable[[LoadedModel, Rows], float]  # model, rows -> source share of predictions


@dataclass
class Trajectories:
    """Every head's numbers at every snapshot step: one record per (basis, step, head)."""

    records: list[dict] = field(default_factory=list)  # basis, step, kind, layer, head, METRICS
    model_records: list[dict] = field(default_factory=list)  # step, source_share (validation)
    steps: list[int] = field(default_factory=list)  # snapshot steps, in order
    model_steps: list[int] = field(default_factory=list)  # steps with a loadable model
    sentences: int = 0  # validation sentences per step of the ``validation`` basis
    notes: list[str] = field(default_factory=list)  # what could not be measured, in words
    seconds: float = 0.0
    computed: int = 0  # steps measured now (the others came from the disk cache)
    pending: list[int] = field(default_factory=list)  # model steps not measured (not cached)

    def frame(self, basis: str | None = None) -> pd.DataFrame:
        """The records as a table (of one basis if given)."""
        table = pd.DataFrame.from_records(
            self.records, columns=["basis", "step", "kind", "layer", "head", *METRICS]
        )
        return table if basis is None else table[table["basis"] == basis].reset_index(drop=True)

    def model_frame(self) -> pd.DataFrame:
        """The whole model's numbers per step (validation basis): step, source_share."""
        table = pd.DataFrame.from_records(self.model_records, columns=["step", "source_share"])
        return table.sort_values("step").reset_index(drop=True)

    def available(self) -> dict[str, list[str]]:
        """Which metrics each basis has numbers for (a metric all NaN is left out)."""
        table = self.frame()
        return {
            b: [m for m in METRICS if table.loc[table["basis"] == b, m].notna().any()]
            for b in BASES
        }


# ----------------------------------------------------------------------------- the numbers


def batch_metrics(w: np.ndarray, q_len: np.ndarray, k_len: np.ndarray, kind: str) -> dict:
    """Entropy, diagonality, previous-position weight and <bos>/<eos> share of each head.

    Args:
        w: (L, B, H, Tq, Tk) attention, padded (padded keys hold no weight).
        q_len, k_len: (B,) real queries and keys of each sentence.
        kind: "encoder", "decoder_self" or "cross" (decides the diagonal and the special key:
            <eos>, the last key, for encoder and cross; <bos>, the first, for decoder self).

    Returns:
        {metric: (L, B, H)}, each the mean over the sentence's real rows ("previous" is NaN
        for cross attention).
    """
    _, n, _, tq, tk = w.shape
    rows = np.arange(tq)[None, :] < q_len[:, None]  # (B, Tq)
    logs = np.log(w, out=np.zeros_like(w), where=w > 0)
    entropy = -(w * logs).sum(axis=-1)  # (L, B, H, Tq)
    keys = np.arange(tk)[None, None, :]  # (1, 1, Tk)
    q = np.arange(tq)[None, :, None]  # (1, Tq, 1)
    if kind == "cross":  # nearest proportional key, as head_stats.diagonal_keys
        scale = (k_len - 1) / np.maximum(q_len - 1, 1)  # (B,)
        centre = np.floor(q * scale[:, None, None] + 0.5)  # (B, Tq, 1)
        near = np.abs(keys - centre) <= NEAR_DIAGONAL_KEYS  # (B, Tq, Tk)
    else:
        near = keys == q  # (1, Tq, Tk)
    diagonal = (w * near[None, :, None]).sum(axis=-1)  # (L, B, H, Tq)
    previous = (w * (keys == q - 1)[None, :, None]).sum(axis=-1)  # (L, B, H, Tq)
    if kind == "cross":
        previous = np.full_like(previous, np.nan)
    special_key = np.zeros(n, dtype=int) if kind == "decoder_self" else k_len - 1  # (B,)
    special = np.take_along_axis(w, special_key[None, :, None, None, None], axis=-1)[..., 0]
    weight = rows / np.maximum(q_len, 1)[:, None]  # (B, Tq): a mean over real rows
    values = {"entropy": entropy, "diagonal": diagonal, "previous": previous}
    values["special"] = special
    return {name: np.einsum("lbhq,bq->lbh", v, weight) for name, v in values.items()}


def _records(basis: str, step: int, means: dict, aer: dict | None) -> list[dict]:
    """One record per head from {kind: {metric: (L, H)}} and {(layer, head): AER}."""
    out = []
    for kind in KINDS:
        n_layers, n_heads = means[kind]["entropy"].shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rec = {"basis": basis, "step": step, "kind": kind, "layer": layer, "head": head}
                rec |= {m: float(means[kind][m][layer, head]) for m in MAP_METRICS}
                found = (aer or {}).get((layer, head)) if kind == "cross" else None
                rec["aer"] = float("nan") if found is None else float(found)
                out.append(rec)
    return out


def probe_means(probes: Sequence[SentenceMaps]) -> dict:
    """{kind: {metric: (L, H)}}: the heads' numbers averaged over the probe sentences."""
    out = {}
    for kind in KINDS:
        per = []
        for maps in probes:
            w = maps.weights(kind).astype(np.float64)[:, None]  # (L, 1, H, Tq, Tk)
            size = np.array([w.shape[-2]]), np.array([w.shape[-1]])
            per.append(batch_metrics(w, *size, kind))
        out[kind] = {m: np.mean([p[m][:, 0] for p in per], axis=0) for m in MAP_METRICS}
    return out


def teacher_forced_rows(lm: LoadedModel, sample) -> list[tuple[list[int], list[int]]]:
    """(source ids + <eos>, reference ids) of each sample sentence, its first reference."""
    return [
        (list(map(int, ids)), lm.tgt_vocab.segment(list(refs[0]))[1])
        for ids, refs in zip(sample.src_ids, sample.references)
    ]


@torch.no_grad()
def validation_means(lm: LoadedModel, rows: Sequence[tuple[list[int], list[int]]]) -> dict:
    """{kind: {metric: (L, H)}} over teacher-forced pairs, each sentence weighing the same."""
    model, sums = lm.model, {}
    device = next(model.parameters()).device
    with evaluating(model):
        for start in range(0, len(rows), BATCH):
            chunk = rows[start : start + BATCH]
            s_len = np.array([len(s) for s, _ in chunk])
            t_len = np.array([len(t) + 1 for _, t in chunk])  # <bos> + reference
            src = torch.full((len(chunk), s_len.max()), Vocab.pad_id, dtype=torch.long)
            tgt = torch.full((len(chunk), t_len.max()), Vocab.pad_id, dtype=torch.long)
            for i, (s, t) in enumerate(chunk):
                src[i, : len(s)] = torch.tensor(s)
                tgt[i, : len(t) + 1] = torch.tensor([Vocab.bos_id, *t])
            maps = record(model, src.to(device), tgt.to(device)).maps()  # the recorded pass
            lengths = {"encoder": (s_len, s_len), "decoder_self": (t_len, t_len)}
            lengths["cross"] = (t_len, s_len)
            for kind in KINDS:
                w = getattr(maps, kind).float().cpu().numpy()  # (L, B, H, Tq, Tk)
                for m, v in batch_metrics(w, *lengths[kind], kind).items():
                    sums.setdefault(kind, {}).setdefault(m, 0.0)
                    sums[kind][m] = sums[kind][m] + v.sum(axis=1)  # (L, H)
    return {k: {m: v / max(len(rows), 1) for m, v in ms.items()} for k, ms in sums.items()}


# ----------------------------------------------------------------------------- sources


def history_of(checkpoint) -> Path | None:
    """Where a model's training history is: the run directory it sits in (with snapshots),
    else the ``.history`` file beside it; None when neither is there."""
    path = Path(checkpoint)
    if (path.parent / "snapshots").is_dir():
        return path.parent
    beside = path.with_suffix(SUFFIX)
    return beside if beside.is_file() else None


def snapshot_models(source, checkpoint=None) -> dict[int, Path]:
    """Checkpoints saved at a snapshot step: {step: path} (``checkpoint`` when given, the
    run's .pt files, then its kept snapshot models; the model beside a .history file)."""
    path = Path(source)
    found = [Path(checkpoint)] if checkpoint else []
    if path.suffix == SUFFIX:
        found.append(path.with_suffix(".pt"))
    elif path.is_dir():
        found += sorted(path.glob("*.pt"))
    reader = open_history(source)
    steps = set(reader.snapshot_steps())
    out: dict[int, Path] = {}
    for pt in found:
        try:
            step = int((read_metadata(pt).get("state") or {}).get("step"))
        except (CheckpointError, TypeError, ValueError):
            continue
        if step in steps:
            out.setdefault(step, pt)
    if isinstance(reader, RunDir):  # a kept model's step is in its name: no file to open
        for step in steps.intersection(reader.snapshot_model_steps()):
            out.setdefault(step, reader.snapshot_model(step))
    return dict(sorted(out.items()))


def _snapshot_digest(source, step: int) -> str:
    """What a snapshot's content is, for the cache: its file's SHA-1 (a history file's + step),
    read in chunks and once per version of the file."""
    reader = open_history(source)
    path = reader.path if isinstance(reader, HistoryFile) else reader.snapshot_path(step)
    if not (digest := file_sha1(path)):
        raise FileNotFoundError(f"the snapshot of step {step} cannot be read")
    return f"{digest}:{step}"


def probe_step(source, step: int, probe_aer: ProbeAerFn | None) -> tuple[list[dict], bool]:
    """(the ``probes`` records of one snapshot, whether they came from the disk cache)."""
    key = hashlib.sha1(
        f"probes:{CACHE_VERSION}:{_snapshot_digest(source, step)}:{probe_aer is not None}".encode()
    ).hexdigest()
    if (hit := read_cached(trajectories_root(), key)) is not None:
        return hit["records"], True
    snapshot = open_history(source).load_snapshot(step)
    probes = [SentenceMaps.from_probe(p) for p in snapshot["probes"]]
    if not probes:
        return [], False
    aer = probe_aer(probes) if probe_aer else None
    records = _records("probes", step, probe_means(probes), aer)
    write_cached(trajectories_root(), key, {"records": records})
    return records, False


@dataclass
class _Validation:
    """The validation basis's settings, and the sample rebuilt once for every checkpoint."""

    sentences: int
    aer: AerFn | None
    share: ShareFn | None = None
    sample: object = None
    vocab: tuple = ()

    def rows(self, lm: LoadedModel):
        """The teacher-forced pairs of this model (the split is rebuilt once per vocabulary)."""
        vocab = tuple(str(lm.meta.get(k)) for k in ("src_vocab", "tgt_vocab", "tokenizers"))
        if self.sample is None or vocab != self.vocab:
            self.sample = validation_sample(lm, trained_data(lm.meta), self.sentences)
            self.vocab = vocab
        return teacher_forced_rows(lm, self.sample)


def validation_step(
    step: int, checkpoint: Path, how: _Validation, measure: bool = True
) -> tuple[dict, bool] | None:
    """({"records": the ``validation`` records of one checkpoint, "model": {step,
    source_share}}, whether it came from the disk cache); None when it is not cached and
    ``measure`` is False."""
    meta = read_metadata(checkpoint)
    key = sample_key(
        checkpoint,
        trained_data(meta),
        how.sentences,
        version=CACHE_VERSION,
        what="trajectory",
        aer=how.aer is not None,
        share=how.share is not None,
    )
    if (hit := read_cached(trajectories_root(), key)) is not None:
        return hit | {"model": hit["model"] | {"step": step}}, True
    if not measure:
        return None
    lm = load_checkpoint(checkpoint)
    rows = how.rows(lm)
    aer = how.aer(lm) if how.aer else None
    share = how.share(lm, rows) if how.share else float("nan")
    records = _records("validation", step, validation_means(lm, rows), aer)
    done = {"records": records, "model": {"step": step, "source_share": share}}
    write_cached(trajectories_root(), key, done)
    return done, False


def stored(reader, sentences: int) -> dict[int, dict]:
    """{step: {"records", "model"}} a ``.history`` file carries for ``sentences`` validation
    sentences ({} for a run directory, another N, or none stored)."""
    section = reader.section(STORED_KEY) if isinstance(reader, HistoryFile) else None
    if not isinstance(section, dict) or section.get("sentences") != sentences:
        return {}
    try:
        return {int(s["model"]["step"]): s for s in section["steps"]}
    except (KeyError, TypeError, ValueError):
        return {}


def stored_section(t: Trajectories, up_to_step: int | None = None) -> dict:
    """The validation numbers of ``t`` per step, as a ``.history`` file carries them."""
    last = float("inf") if up_to_step is None else up_to_step
    model = {int(r["step"]): r for r in t.model_records}
    steps = [
        {
            "records": [r for r in t.records if r["basis"] == "validation" and r["step"] == s],
            "model": model.get(s, {"step": s, "source_share": float("nan")}),
        }
        for s in t.model_steps
        if s <= last and s not in t.pending
    ]
    return {"sentences": t.sentences, "steps": steps}


def trajectories(
    source,
    checkpoint=None,
    sentences: int = SENTENCES,
    validation: str = "measure",
    aer: AerFn | None = None,
    probe_aer: ProbeAerFn | None = None,
    share: ShareFn | None = None,
    progress: ProgressFn | None = None,
) -> Trajectories:
    """Every head's trajectory over a run's (or a .history file's) snapshots, cached per step.

    ``validation`` (one of VALIDATION): "off" reads the probe maps only (cheap: what a live
    view polls), "cached" adds the validation numbers already on disk (or in the history
    file), "measure" all of them.
    """
    if validation not in VALIDATION:
        raise ValueError(f"validation must be one of {', '.join(VALIDATION)} (got {validation!r})")
    start, reader = time.perf_counter(), open_history(source)
    out = Trajectories(steps=reader.snapshot_steps(), sentences=sentences)
    models = snapshot_models(source, checkpoint) if validation != "off" else {}
    kept = stored(reader, sentences) if validation != "off" else {}
    out.model_steps = sorted(set(models) | set(kept))
    fit_rows(out, reader)
    jobs = [("probes", s) for s in out.steps] + [("validation", s) for s in out.model_steps]
    how, total = _Validation(sentences, aer, share), sum(COST[b] for b, _ in jobs)
    done_cost = 0
    for basis, step in jobs:
        if progress:
            progress(done_cost / max(total, 1), f"{basis} at step {step:,}")
        done_cost += COST[basis]
        try:
            if basis == "probes":
                records, cached = probe_step(source, step, probe_aer)
            elif step in kept:
                out.records += kept[step]["records"]
                out.model_records.append(kept[step]["model"])
                continue
            elif (
                found := validation_step(step, models[step], how, validation == "measure")
            ) is not None:
                done, cached = found
                records = done["records"]
                out.model_records.append(done["model"])
            else:
                out.pending.append(step)
                continue
        except SNAPSHOT_ERRORS + (CheckpointError, DataError) as e:
            out.notes.append(f"{basis} at step {step:,}: {_reason(e)}")
            continue
        out.records += records
        out.computed += not cached
    out.seconds = time.perf_counter() - start
    if progress:
        progress(1.0, "done")
    return out


def fit_rows(out: Trajectories, reader) -> None:
    """Thin the steps evenly so that every head's rows at them fit budget.TRAJECTORY_ROWS
    (half for each basis), saying so in a note."""
    rows = _rows_per_step(reader, out.steps)
    share = budget.TRAJECTORY_ROWS // 2
    steps = budget.steps_that_fit(out.steps, rows, share)
    model_steps = budget.steps_that_fit(out.model_steps, rows, share)
    if (len(steps), len(model_steps)) != (len(out.steps), len(out.model_steps)):
        out.notes.append(
            f"{len(steps)} of {len(out.steps)} snapshots and {len(model_steps)} of "
            f"{len(out.model_steps)} kept models are read, spread evenly: with {rows:,} heads "
            f"per step, more would pass the {budget.TRAJECTORY_ROWS:,} rows the server holds."
        )
    out.steps, out.model_steps = steps, model_steps


def _rows_per_step(reader, steps: list[int]) -> int:
    """Heads of every kind and layer, from the newest readable snapshot (0: none is)."""
    for step in reversed(steps):
        try:
            probe = reader.load_snapshot(step)["probes"][0]
            heads, enc = probe["encoder"].shape[1], probe["encoder"].shape[0]
            return int(heads * (enc + 2 * probe["cross"].shape[0]))
        except (*SNAPSHOT_ERRORS, IndexError):
            continue
    return 0


def _reason(e: Exception) -> str:
    """An error in words for a note (its message's first line, or its type)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:500]


def as_json_lines(t: Trajectories) -> list[dict]:
    """The command's JSON lines: one summary, then one record per (basis, step, head)."""
    head = asdict(t) | {"records": len(t.records), "available": t.available()}
    head["model_records"] = [_nulls(r) for r in t.model_records]
    return [head, *map(_nulls, t.records)]


def _nulls(record: dict) -> dict:
    """A record with NaN as None (JSON's null)."""
    return {k: (None if v != v else v) for k, v in record.items()}
