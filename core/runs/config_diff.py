"""Which settings differ between runs: one row per differing setting, one column per run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from core.runs.status import RunInfo
from core.runs.table import run_settings

SETTING = "setting"  # the first column: the setting's ``group.field`` name


def run_columns(runs: Sequence[RunInfo], names: Mapping[str, str] | None = None) -> list[str]:
    """A column title per run: its name in ``names`` (or its id), made unique with the id."""
    titles = [(names or {}).get(r.run_id, r.run_id) for r in runs]
    return [
        t if titles.count(t) == 1 or t == r.run_id else f"{t} ({r.run_id})"
        for t, r in zip(titles, runs)
    ]


def config_diff(runs: Sequence[RunInfo], names: Mapping[str, str] | None = None) -> list[dict]:
    """Rows ``{"setting": ..., <run column>: value, ...}`` for every setting (preset and data
    included) whose value is not the same in all ``runs`` ([] for fewer than two runs)."""
    if len(runs) < 2:
        return []
    columns = run_columns(runs, names)
    values = [
        {"preset": r.preset or None, "data": r.data or None, **run_settings(r.path)} for r in runs
    ]
    rows = []
    for setting in values[0]:
        seen = [v.get(setting) for v in values]
        if any(s != seen[0] for s in seen[1:]):
            rows.append({SETTING: setting, **dict(zip(columns, seen))})
    return rows


def value_text(value) -> str:
    """A setting's value as a table shows it ('—' when a run does not record it)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "; ".join(str(v) for v in value)
    return str(value)


def diff_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """The differing settings as text, one column per run (values of mixed types show alike)."""
    frame = pd.DataFrame(list(rows))
    return frame.map(value_text) if not frame.empty else frame
