"""The runs table: one row per run with its settings, final metrics, note and tags; filters.

The Train page's "All runs", Home's "Training runs" and ``python -m core.runs_table`` all
show these rows. Settings are the config dataclasses' fields, named ``group.field``
(``train.lr``); the data source is described in words (``data``), never as a path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, fields

import pandas as pd

from core.runs.notes import read_notes
from core.runs.run_dir import RunDir, read_json
from core.runs.status import RunInfo, when
from core.training.settings import DERIVED, GROUPS, field_help

CORE_COLUMNS = (  # shown by default, in this order
    "run",
    "name",
    "state",
    "tags",
    "best BLEU",
    "final BLEU",
    "final loss",
    "val loss",
    "steps",
    "tokens",
    "elapsed (min)",
    "progress",
    "started",
    "data",
    "size",
    "note",
)
HOME_COLUMNS = ("run", "name", "state", "best BLEU", "val loss", "steps", "progress", "started")
# Home's summary fits a 1400 px page (val loss: what an lm, masked-LM or induction run, which
# has no BLEU, is judged by); the Train page's "All runs" has them all (it scrolls sideways)
RUN_COLUMNS = ("preset", "device")  # more about the run, offered under "more columns"
METRIC_HELP = {  # what each result column means
    "best BLEU": "highest validation BLEU of any evaluation",
    "final BLEU": "validation BLEU of the last evaluation",
    "final loss": "training loss of the last logged steps, as trained (with the run's label "
    "smoothing and dropout: above the plain cross-entropy of 'val loss')",
    "val loss": "validation loss (cross-entropy) of the last evaluation",
    "steps": "optimiser steps taken",
    "tokens": "target tokens trained on (tokens/s × seconds of each logged window)",
    "elapsed (min)": "minutes of training (evaluations not counted)",
}


@functools.cache
def setting_names() -> tuple[str, ...]:
    """Every field of the data, model and train configs as ``group.field``, in their order
    (not the vocabulary sizes the data decides, nor the data source: ``data`` describes it)."""
    skip = {*DERIVED, "source"}
    return tuple(
        f"{group}.{f.name}"
        for group, cls in GROUPS.items()
        for f in fields(cls)
        if f.name not in skip
    )


@functools.cache
def column_help() -> dict[str, str]:
    """What a column means: METRIC_HELP, and each setting's comment in its config dataclass."""
    helps = dict(METRIC_HELP)
    for group, cls in GROUPS.items():
        helps |= {f"{group}.{name}": text for name, text in field_help(cls).items()}
    return {name: text for name, text in helps.items() if name in (*CORE_COLUMNS, *more_columns())}


def more_columns() -> tuple[str, ...]:
    """The columns beyond CORE_COLUMNS: the run's preset and device, then every setting."""
    return (*RUN_COLUMNS, *setting_names())


def _defaults(group: str) -> dict[str, object]:
    """The defaults of a config dataclass's fields (what the trainer fills in when a run's
    config.json leaves a field out)."""
    out = {}
    for f in fields(GROUPS[group]):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def run_settings(run_path) -> dict[str, object]:
    """A run's hyper-parameters by ``group.field``: as its config.json (or, before the trainer
    wrote one, its launch settings) records them, a field left out being its default; None
    for a whole group neither records."""
    rd = RunDir(run_path)
    config, job = rd.read_config(), read_json(rd.job, {})
    launched = job.get("settings") if isinstance(job, dict) else None
    config = config if isinstance(config, dict) else {}
    launched = launched if isinstance(launched, dict) else {}
    defaults = {group: _defaults(group) for group in GROUPS}
    flat = {}
    for name in setting_names():
        group, key = name.split(".", 1)
        values = config.get(group) if isinstance(config.get(group), dict) else launched.get(group)
        known = isinstance(values, dict)
        flat[name] = values.get(key, defaults[group].get(key)) if known else None
    return flat


def _number(value) -> float | None:
    """A finite number, else None (NaN, infinity, text or a missing value)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


@functools.lru_cache(maxsize=512)
def _final_metrics(run_path: str, size: int, mtime_ns: int) -> dict:
    """Final metrics from a run's metrics.jsonl (cached per file size and modification time)."""
    try:
        records = RunDir(run_path).read_metrics()
    except (OSError, ValueError):  # unreadable, or not UTF-8
        records = []
    train = [r for r in records if r.get("record") == "train"]
    evals = [r for r in records if r.get("record") == "eval"]
    bleus = [b for r in evals if (b := _number(r.get("val_bleu"))) is not None and b >= 0]
    losses = [v for r in evals if (v := _number(r.get("val_loss"))) is not None]
    tokens, before = 0.0, 0.0
    for r in train:  # tokens/s times the seconds of each logged window
        rate, elapsed = _number(r.get("tokens_per_s")), _number(r.get("elapsed"))
        if rate is not None and elapsed is not None:
            tokens += rate * max(elapsed - before, 0.0)
            before = elapsed
    elapsed = _number((train or evals or [{}])[-1].get("elapsed"))
    return {
        "final BLEU": bleus[-1] if bleus else None,
        "best BLEU": max(bleus) if bleus else None,
        "final loss": _number(train[-1].get("loss")) if train else None,
        "val loss": losses[-1] if losses else None,
        "tokens": round(tokens) if tokens else None,
        "elapsed (min)": round(elapsed / 60, 2) if elapsed is not None else None,
    }


def final_metrics(run_path) -> dict:
    """BLEU (final and best), training and validation loss, target tokens trained on (summed
    over the logged windows) and training minutes, from a run's metric records."""
    path = RunDir(run_path).metrics
    try:
        st = path.stat()
    except OSError:
        return _final_metrics(str(run_path), 0, 0)
    return _final_metrics(str(run_path), st.st_size, st.st_mtime_ns)


def run_row(info: RunInfo) -> dict:
    """One run as a row of the runs table: every column of CORE_COLUMNS and more_columns()."""
    metrics = final_metrics(info.path)
    notes = read_notes(info.path)
    row = {
        "run": info.run_id,
        "name": info.name,
        "state": info.state,
        "tags": notes.tags,
        **metrics,
        "best BLEU": info.best_bleu if info.best_bleu is not None else metrics["best BLEU"],
        "steps": info.step,
        "progress": info.progress,
        "started": when(info.started_at),
        "data": info.data,
        "size": info.size,
        "note": notes.note,
        "preset": info.preset,
        "device": info.device or info.device_type,
    }
    return {**row, **run_settings(info.path)}


def run_rows(runs: Iterable[RunInfo]) -> list[dict]:
    """The rows of ``runs``, in their order."""
    return [run_row(r) for r in runs]


def filter_rows(
    rows: Sequence[dict], search: str = "", states: Iterable = (), tags: Iterable = ()
) -> list[dict]:
    """Rows whose run id, name, note or tags contain ``search`` (any case), in one of
    ``states`` and carrying one of ``tags`` (an empty filter keeps every row)."""
    needle, states, tags = search.strip().casefold(), set(states), set(tags)
    kept = []
    for row in rows:
        text = " ".join([row["run"], row["name"], row["note"], *row["tags"]]).casefold()
        if needle and needle not in text:
            continue
        if (states and row["state"] not in states) or (tags and not tags & set(row["tags"])):
            continue
        kept.append(row)
    return kept


def all_tags(rows: Iterable[dict]) -> list[str]:
    """Every tag used by the rows, sorted (for the tag filter)."""
    return sorted({t for row in rows for t in row["tags"]}, key=str.casefold)


def runs_frame(rows: Sequence[dict], columns: Sequence[str] = CORE_COLUMNS) -> pd.DataFrame:
    """The rows as a table with ``columns`` (unknown names are left out)."""
    known = [c for c in columns if c in CORE_COLUMNS or c in more_columns()]
    return pd.DataFrame([{c: row.get(c) for c in known} for row in rows], columns=known)
