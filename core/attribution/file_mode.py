"""Attributions of a whole file (issue 51, item 4): ``python -m core.attribute --input
pairs.tsv --out attributions.jsonl``.

Each input line is ``source[<TAB>target[<TAB>contrast]]``: the source explained, with the
model's own translation or the target given (teacher-forced), and against the contrast where
given. Each output line is one JSON object: ``line`` (0-based, of the input), the three
texts, then what the one-sentence command prints (``core.attribution.explain.sentence_json``:
the tokens, contributions, source shares, step scores and, for other than the default
choices, the choices); a line that cannot be explained is a JSON object with its ``error``.
Lines already in the output file (the same method and choices) are skipped, so an
interrupted run goes on where it stopped; each line is written and flushed when done.

``aggregate`` reads such a file back (the page's "Load attributions" and tests): the mean
source share by output position, the mean contribution each source token type receives, and
one row per sentence.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core.attribution.explain import sentence_json
from core.attribution.gradients import DEFAULT_CHOICES, GradientChoices
from core.attribution.methods import AttributionError
from core.model.checked_translation import translate_sentence
from core.model.decode import DecodeSettings, TranslationError
from core.model.interface import TranslationModel

MAX_INPUT_BYTES = 20 * 2**20  # an input file read whole (pairs of sentences: 20 MB is plenty)
MAX_LINE_CHARS = 2000  # a longer line is an error of its own, never tokenised
MAX_RECORDS_BYTES = 64 * 2**20  # the most of a results file the page reads back


class FileModeError(ValueError):
    """The input or output file cannot be used as asked; the message says why."""


@dataclass(frozen=True)
class InputLine:
    """One line of the input: its index and its texts (target and contrast may be "")."""

    index: int
    source: str
    target: str = ""
    contrast: str = ""


def read_input(path: str | Path) -> list[InputLine]:
    """The input's non-empty lines (FileModeError for a file past MAX_INPUT_BYTES or not text)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise FileModeError(f"{path.name} is {size / 2**20:.1f} MB; at most 20 MB is read.")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FileModeError(f"{path.name} is not UTF-8 text ({e.reason}).") from None
    except OSError as e:
        raise FileModeError(
            f"{path.name} cannot be read ({e.strerror or type(e).__name__})."
        ) from None
    lines = []
    for i, line in enumerate(text.splitlines()):
        parts = [p.strip() for p in line.split("\t")]
        if parts and parts[0]:
            lines.append(InputLine(i, *(parts + ["", ""])[:3]))
    return lines


def done_lines(out: Path, method: str, choices: GradientChoices) -> set[int]:
    """The input lines an existing output file already holds (FileModeError when it was made
    with another method or other choices: resuming would mix two explanations)."""
    if not out.is_file():
        return set()
    done = set()
    asked = choices.to_json() if choices != DEFAULT_CHOICES else None
    with out.open(encoding="utf-8") as f:
        for n, text in enumerate(f):
            try:
                record = json.loads(text)
            except ValueError:
                continue  # a line cut by an interruption: done again
            if "error" not in record and (
                record.get("method") != method or record.get("choices") != asked
            ):
                raise FileModeError(
                    f"{out.name} line {n + 1} was made with {record.get('method')} and other "
                    "choices: give another --out, or the same method and choices to go on."
                )
            if isinstance(record.get("line"), int):
                done.add(record["line"])
    return done


def cut_partial_line(out: Path) -> None:
    """Drop a last line an interruption cut short (no newline), so what follows starts a
    line of its own."""
    if not out.is_file() or not (size := out.stat().st_size):
        return
    with out.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)


def one_line(
    m: TranslationModel, line: InputLine, method: str, settings: DecodeSettings, choices
) -> dict:
    """The JSON object of one input line (with ``error`` when it cannot be explained)."""
    head = {"line": line.index, "source_text": line.source}
    head |= {"target_text": line.target or None, "contrast_text": line.contrast or None}
    if max(map(len, (line.source, line.target, line.contrast))) > MAX_LINE_CHARS:
        return head | {"error": f"a text of more than {MAX_LINE_CHARS} characters"}
    try:
        t = translate_sentence(m, line.source, settings, line.target)
        return head | sentence_json(m, t, method, contrast=line.contrast, choices=choices)
    except (AttributionError, TranslationError, ValueError) as e:
        return head | {"error": " ".join(str(e).split())}


def attribute_file(
    m: TranslationModel,
    input_path: str | Path,
    out_path: str | Path,
    method: str,
    settings: DecodeSettings | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Explain every line of the input not yet in the output, appending one JSON line each;
    returns {lines, written, skipped, errors, seconds}."""
    lines, out, settings = read_input(input_path), Path(out_path), settings or DecodeSettings()
    done = done_lines(out, method, choices)
    cut_partial_line(out)
    todo = [line for line in lines if line.index not in done]
    start, errors = time.perf_counter(), 0
    with out.open("a", encoding="utf-8") as f:
        for k, line in enumerate(todo):
            record = one_line(m, line, method, settings, choices)
            errors += "error" in record
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()  # an interruption keeps every line written
            if progress:
                progress((k + 1) / len(todo), f"line {line.index + 1} of {len(lines)}")
    return {
        "lines": len(lines),
        "written": len(todo),
        "skipped": len(lines) - len(todo),
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 3),
    }


def read_records(source: str | Path | bytes) -> list[dict]:
    """The JSON objects of a results file (a path, or its bytes as uploaded), bounded."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if len(data) > MAX_RECORDS_BYTES:
        raise FileModeError(
            f"The results file is {len(data) / 2**20:.1f} MB; at most 64 MB is read."
        )
    records = []
    for n, text in enumerate(data.decode("utf-8", errors="replace").splitlines()):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError:
            raise FileModeError(
                f"line {n + 1} is not JSON: is this an attributions file?"
            ) from None
        if not isinstance(record, dict) or "line" not in record:
            raise FileModeError(f"line {n + 1} is not an attribution record (no 'line').")
        records.append(record)
    return records


@dataclass
class Aggregated:
    """A results file summed up: by output position, by source token type, per sentence."""

    by_position: pd.DataFrame  # position, sentences, mean source share
    by_token: pd.DataFrame  # token, occurrences, mean contribution received (source side)
    per_sentence: pd.DataFrame  # line, source, output, mean source share, perplexity
    errors: int


def aggregate(records: Iterable[dict]) -> Aggregated:
    """Means over the explained sentences (records with an ``error`` counted, not read)."""
    shares: dict[int, list[float]] = defaultdict(list)
    received: dict[str, list[float]] = defaultdict(list)
    rows, errors = [], 0
    for r in records:
        if "error" in r or "contributions" not in r:
            errors += 1
            continue
        source, contributions = r["source"], r["contributions"]
        for t, share in enumerate(r["source_share"]):
            shares[t].append(float(share))
        for j, token in enumerate(source):  # each source token's mean over the output rows
            received[token].append(sum(row[j] for row in contributions) / len(contributions))
        scores = r.get("step_scores") or {}
        rows.append(
            {
                "line": r["line"],
                "source": " ".join(source),
                "output": " ".join(r["output"]),
                "mean source share": sum(r["source_share"]) / len(r["source_share"]),
                "perplexity": (scores.get("perplexity") or [None])[-1],
            }
        )
    by_position = pd.DataFrame(
        [
            {"position": t, "sentences": len(v), "mean source share": sum(v) / len(v)}
            for t, v in sorted(shares.items())
        ]
    )
    by_token = pd.DataFrame(
        [
            {"token": tok, "occurrences": len(v), "mean contribution": sum(v) / len(v)}
            for tok, v in received.items()
        ]
    )
    if len(by_token):
        by_token = by_token.sort_values("mean contribution", ascending=False, ignore_index=True)
    return Aggregated(by_position, by_token, pd.DataFrame(rows), errors)
