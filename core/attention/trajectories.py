"""Per-head trajectories over training: each head's numbers at every snapshot of a run.

For every head of every kind, at each snapshot step: the mean row entropy (nats), the
diagonality (self-attention: weight on the query's own position; cross: share within one
key of the rescaled diagonal, as ``head_stats`` measures them), the weight one position to
the left (self-attention; Voita et al. 2019's positional heads), the share of weight on
<bos>/<eos> keys (``core.attention.trajectory_numbers``), and for cross heads the AER of
their links on a gold set.

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

import pandas as pd

from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.attention.snapshots import SNAPSHOT_ERRORS
from core.attention.trajectory_numbers import (
    MAP_METRICS,
    probe_means,
    teacher_forced_rows,
    validation_means,
)
from core.corpus.source import DataError, file_sha1
from core.measure.progress import ProgressFn, checked
from core.measure.sample import sample_key, validation_sample
from core.model.checkpoints import CheckpointError, read_metadata, trained_data
from core.model.interface import TranslationModel
from core.model.opened import open_model
from core.places import trajectories_root
from core.runs import budget, run_bytes
from core.runs.circuit_history import MEASURES as CIRCUIT_MEASURES
from core.runs.circuit_history import circuit_evals, phase_of, score
from core.runs.disk_cache import read_cached, write_cached
from core.runs.history import SUFFIX, HistoryFile, open_history
from core.runs.run_dir import RunDir

METRICS = (*MAP_METRICS, "aer", *CIRCUIT_MEASURES)  # a head's numbers at a step
METRIC_NAMES = {
    "entropy": "entropy (nats, mean over rows)",
    "diagonal": "diagonality (own position; cross: near the rescaled diagonal)",
    "previous": "weight on the previous position (self-attention only)",
    "special": "share of weight on <bos>/<eos>",
    "aer": "alignment error rate on the gold set (cross heads, lower is better)",
    "induction": "induction score (circuit scores of the run's evaluations)",
    "previous_token": "previous-token score (circuit scores of the run's evaluations)",
    "duplicate_token": "duplicate-token score (circuit scores of the run's evaluations)",
}
BASES = ("probes", "validation")
SENTENCES = 100  # validation sentences of the ``validation`` basis (the first N)
VALIDATION = ("off", "cached", "measure")  # the validation basis: none, from the cache, all
CACHE_VERSION = 3  # 3: circuit scores in every record, the kinds a snapshot draws
STORED_KEY = "trajectories"  # a .history file's section of validation numbers per step
COST = {"probes": 1, "validation": 40}  # relative cost of a step of each basis (progress)

AerFn = Callable[[TranslationModel], dict]  # model -> {(layer, head): AER} of its cross heads
ProbeAerFn = Callable[[list[SentenceMaps]], dict | None]  # probes -> the same, or None
Rows = Sequence[tuple[list[int], list[int]]]  # teacher-forced (source ids, reference ids)
ShareFn = Callable[[TranslationModel, Rows], float]  # model, rows -> source share of predictions


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
    phase: dict | None = None  # the phase change of a run with circuit scores (phase_change)

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


# ----------------------------------------------------------------------------- records


def _records(basis: str, step: int, means: dict, aer: dict | None) -> list[dict]:
    """One record per head from {kind: {metric: (L, H)}} and {(layer, head): AER}."""
    out = []
    for kind in [k for k in KINDS if k in means]:
        n_layers, n_heads = means[kind]["entropy"].shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rec = {"basis": basis, "step": step, "kind": kind, "layer": layer, "head": head}
                rec |= {m: float(means[kind][m][layer, head]) for m in MAP_METRICS}
                found = (aer or {}).get((layer, head)) if kind == "cross" else None
                rec["aer"] = float("nan") if found is None else float(found)
                out.append(rec | dict.fromkeys(CIRCUIT_MEASURES, float("nan")))
    return out


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

    def rows(self, lm: TranslationModel):
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
    lm = open_model(str(checkpoint))
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
    """The validation numbers of ``t`` per step, as a ``.history`` file carries them: the
    steps measured only (one that failed or was not measured is left out, not kept empty)."""
    last = float("inf") if up_to_step is None else up_to_step
    model = {int(r["step"]): r for r in t.model_records}  # a measured step has its record
    steps = [
        {
            "records": [r for r in t.records if r["basis"] == "validation" and r["step"] == s],
            "model": model[s],
        }
        for s in t.model_steps
        if s <= last and s in model
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
    forced = validation != "off" and _translations(reader, out.steps)
    models = snapshot_models(source, checkpoint) if forced else {}
    kept = stored(reader, sentences) if forced else {}
    out.model_steps = sorted(set(models) | set(kept))
    fit_rows(out, reader)
    jobs = [("probes", s) for s in out.steps] + [("validation", s) for s in out.model_steps]
    how, total = _Validation(sentences, aer, share), sum(COST[b] for b, _ in jobs)
    done_cost, report = 0, checked(progress)  # stops past a shared server's time limit
    for basis, step in jobs:
        report(done_cost / max(total, 1), f"{basis} at step {step:,}")
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
    with_circuits(out, reader.read_metrics())
    out.seconds = time.perf_counter() - start
    report(1.0, "done")
    return out


def with_circuits(out: Trajectories, metrics: list[dict]) -> None:
    """Each head's circuit scores (``core.training.circuits``: previous-token,
    duplicate-token, induction) at the snapshot steps of a run whose evaluations carry them,
    on the probe records of the one kind its snapshot holds (a one-stack model's pass), and
    the run's phase change."""
    evals = {r["step"]: r for r in circuit_evals(metrics)}
    out.phase = phase_of(metrics) if evals else None
    kinds = {s: set() for s in evals}
    for rec in out.records:
        if rec["basis"] == "probes" and rec["step"] in kinds:
            kinds[rec["step"]].add(rec["kind"])
    for rec in out.records:
        if rec["basis"] == "probes" and len(kinds.get(rec["step"], ())) == 1:
            head = (rec["layer"], rec["head"])
            found = {m: score(evals[rec["step"]], m, head) for m in CIRCUIT_MEASURES}
            rec |= {m: float("nan") if v is None else v for m, v in found.items()}


def fit_rows(out: Trajectories, reader) -> None:
    """Thin the steps evenly so that every head's rows at them fit budget.TRAJECTORY_ROWS
    (half for each basis), saying so in a note."""
    rows = _rows_per_step(reader, out.steps)
    share = budget.TRAJECTORY_ROWS // 2
    steps = run_bytes.steps_that_fit(out.steps, rows, share)
    model_steps = run_bytes.steps_that_fit(out.model_steps, rows, share)
    if (len(steps), len(model_steps)) != (len(out.steps), len(out.model_steps)):
        out.notes.append(
            f"{len(steps)} of {len(out.steps)} snapshots and {len(model_steps)} of "
            f"{len(out.model_steps)} kept models are read, spread evenly: with {rows:,} heads "
            f"per step, more would pass the {budget.TRAJECTORY_ROWS:,} rows the server holds."
        )
    out.steps, out.model_steps = steps, model_steps


def _translations(reader, steps: list[int]) -> bool:
    """Whether the run's snapshots hold translations (a cross map: its probes read a source
    and wrote an output), so that teacher-forced validation sentences measure its heads; a
    one-stack run's pass over a sequence (induction, lm, an encoder's) holds none."""
    for step in reversed(steps):
        try:
            probes = reader.load_snapshot(step)["probes"]
        except SNAPSHOT_ERRORS:
            continue
        return any(min(p["cross"].shape[-2:]) > 0 for p in probes)
    return False


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
