"""A run's records as files a user downloads from the Train page: metrics CSV, settings JSON."""

from __future__ import annotations

import csv
import io
import json

from core.runs.run_dir import RunDir

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs such a text cell


def text_cell(value) -> object:
    """A cell as written: numbers as they are, text a spreadsheet cannot run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def metrics_csv(rd: RunDir) -> bytes:
    """Every metrics record (train, eval, ...) as one CSV row; columns in order of first use.

    Lists and objects (an evaluation's example translations) are left out: one value per cell.
    """
    records = rd.read_metrics()
    columns: list[str] = []
    for record in records:
        columns += [k for k, v in record.items() if k not in columns and not _nested(v)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([text_cell(_plain(record.get(k))) for k in columns])
    return out.getvalue().encode("utf-8")


def table_csv(frame) -> bytes:
    """A table (a DataFrame, e.g. the runs table) as CSV whose text cells a spreadsheet cannot
    run; a list cell (tags) is written as its items joined by ", "."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([text_cell(str(c)) for c in frame.columns])
    for row in frame.itertuples(index=False):
        cells = [", ".join(map(str, v)) if _nested(v) else _plain(v) for v in row]
        writer.writerow([text_cell(_blank_nan(c)) for c in cells])
    return out.getvalue().encode("utf-8")


def _blank_nan(value) -> object:
    """NaN (a missing number in a table) as an empty cell."""
    return "" if isinstance(value, float) and value != value else value


def config_json(rd: RunDir) -> bytes:
    """The run's settings (data, model, train groups and the corpus summary) as JSON."""
    return (json.dumps(rd.read_config(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _nested(value) -> bool:
    return isinstance(value, (list, dict))


def _plain(value) -> object:
    """None as an empty cell; a nested value (in a record that has one) left out."""
    return "" if value is None or _nested(value) else value
