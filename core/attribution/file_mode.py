"""Attributions of a whole file (issue 51, item 4): ``python -m core.attribute --input
pairs.tsv --out attributions.jsonl``.

Each input line is ``source[<TAB>target[<TAB>contrast[<TAB>contrast source]]]`` (or the
same with ``|||``, ``core.corpus.source.pair_columns``): the source explained, with the
model's own translation or the target given (teacher-forced), and against the contrast where
given. Each output line is one JSON object: ``line`` (0-based, of the input), the three
texts, then what the one-sentence command prints (``core.attribution.explain.sentence_json``:
the tokens, contributions, source shares, step scores and, for other than the default
choices, the choices); a line that cannot be explained is a JSON object with its ``error``.
Lines already in the output file (the same method and choices) are skipped, so an
interrupted run goes on where it stopped; each line is written and flushed when done.
Gradient × input and integrated gradients explain consecutive lines in batches
(``core.attribution.batched_gradients``: the figures of each line alone, in fewer passes; their
step scores from one padded pass, ``step_scores.batched_logits``),
written in the file's order; a line with a contrast, or one that fails before its
attribution, is explained alone where it stands.

``aggregate`` reads such a file back (the page's "Load attributions" and tests): the mean
source share by output position, the mean contribution each source token type receives, and
one row per sentence.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core.attribution.batched_gradients import attributions, batchable, fits
from core.attribution.explain import sentence_json
from core.attribution.gradients import DEFAULT_CHOICES, GradientChoices
from core.attribution.methods import AttributionError, method_problem
from core.attribution.step_scores import batched_logits
from core.corpus.source import pair_columns
from core.model.checked_translation import translate_sentence
from core.model.interface import TranslationModel
from core.model.parts import DecodeSettings, Translation, TranslationError

MAX_INPUT_BYTES = 20 * 2**20  # an input file read whole (pairs of sentences: 20 MB is plenty)
MAX_LINE_CHARS = 2000  # a longer line is an error of its own, never tokenised
MAX_RECORDS_BYTES = 64 * 2**20  # the most of a results file the page reads back
RECORD_START = '{"line": '  # how every line the file mode writes begins (one_line's head)
MAX_NUMBER = 1e300  # a results file's largest number (perplexity's own cap): every sum is finite


class FileModeError(ValueError):
    """The input or output file cannot be used as asked; the message says why."""


@dataclass(frozen=True)
class InputLine:
    """One line of the input: its index and its texts (target and contrast may be "")."""

    index: int
    source: str
    target: str = ""
    contrast: str = ""
    contrast_source: str = ""  # another source: the step scores' P-CXMI


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
        parts = [p.strip() for p in pair_columns(line)]
        if parts and parts[0]:
            lines.append(InputLine(i, *(parts + ["", "", ""])[:4]))
    return lines


def out_problem(input_path: str | Path, out_path: str | Path) -> str | None:
    """Why ``out_path`` cannot take the results, in one line (None if it can): a folder, in a
    folder that is not there, or the input itself (by another name, a symlink, a hard link)."""
    out = Path(out_path)
    if out.is_dir():
        return f"--out {out} is a folder: give a file in it, e.g. {out / 'attributions.jsonl'}"
    if not out.parent.is_dir():
        if out.parent.exists():
            return f"--out {out}: {out.parent} is not a folder"
        return f"--out {out}: there is no folder {out.parent}; make it or give another --out"
    try:
        same = out.exists() and os.path.samefile(input_path, out)
    except OSError:  # the input cannot be read: read_input says why
        same = False
    if same:
        return f"--out {out} is the same file as --input {input_path}: give another --out"
    return None


def done_lines(out: Path, method: str, choices: GradientChoices) -> set[int]:
    """The input lines an existing output file already holds (FileModeError when it was made
    with another method or other choices, as resuming would mix two explanations, or when it
    is not an attributions file at all, which would be appended to)."""
    if not out.is_file():
        return set()
    done = set()
    asked = choices.to_json() if choices != DEFAULT_CHOICES else None
    with out.open(encoding="utf-8", errors="replace", newline="\n") as f:
        for n, text in enumerate(f, start=1):
            cut = not text.endswith("\n")  # the last line, cut by an interruption: done again
            if cut and (text.startswith(RECORD_START) or RECORD_START.startswith(text)):
                continue
            try:
                record = json.loads(text)
            except (ValueError, RecursionError):
                record = None
            if cut or not isinstance(record, dict) or "line" not in record:
                raise FileModeError(
                    f"{out.name} is not an attributions file (line {n}): give another --out."
                )
            if "error" not in record and (
                record.get("method") != method or record.get("choices") != asked
            ):
                raise FileModeError(
                    f"{out.name} line {n} was made with {record.get('method')} and other "
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


def line_head(line: InputLine) -> dict:
    """What every record of ``line`` begins with: its index and texts."""
    head = {"line": line.index, "source_text": line.source}
    head |= {"target_text": line.target or None, "contrast_text": line.contrast or None}
    if line.contrast_source:
        head["contrast_source_text"] = line.contrast_source
    return head


def too_long(line: InputLine) -> bool:
    """Whether a text of ``line`` is past MAX_LINE_CHARS (an error of its own)."""
    texts = (line.source, line.target, line.contrast, line.contrast_source)
    return max(map(len, texts)) > MAX_LINE_CHARS


def one_line(
    m: TranslationModel, line: InputLine, method: str, settings: DecodeSettings, choices
) -> dict:
    """The JSON object of one input line (with ``error`` when it cannot be explained)."""
    head = line_head(line)
    if too_long(line):
        return head | {"error": f"a text of more than {MAX_LINE_CHARS} characters"}
    try:
        t = translate_sentence(m, line.source, settings, line.target)
        asked = {"contrast": line.contrast, "contrast_source": line.contrast_source}
        return head | sentence_json(m, t, method, choices=choices, **asked)
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
    batch_bytes: int | None = None,
) -> dict:
    """Explain every line of the input not yet in the output, appending one JSON line each,
    in the file's order; returns {lines, written, skipped, errors, seconds}. Gradient × input
    and integrated gradients explain lines without a contrast in batches of one pass each
    within ``batch_bytes`` (None: the server's budget; 0: one line at a time)."""
    if why := out_problem(input_path, out_path):
        raise FileModeError(why)
    lines, out, settings = read_input(input_path), Path(out_path), settings or DecodeSettings()
    try:
        done = done_lines(out, method, choices)
        cut_partial_line(out)
        f = out.open("a", encoding="utf-8")
    except OSError as e:
        raise FileModeError(f"--out {out} cannot be written ({e.strerror or e}).") from None
    todo = [line for line in lines if line.index not in done]
    start, written, errors = time.perf_counter(), 0, 0
    batched = batch_bytes != 0 and batchable(method, choices)
    batched = batched and not method_problem(m, method) and not choices.problems()
    batched = batched and not m.supports("shared_passes")  # one sentence's positions a pass
    with f:
        for record in _records(m, todo, method, settings, choices, batched, batch_bytes):
            errors += "error" in record
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()  # an interruption keeps every line written
            written += 1
            if progress:
                progress(written / len(todo), f"line {record['line'] + 1} of {len(lines)}")
    return {
        "lines": len(lines),
        "written": len(todo),
        "skipped": len(lines) - len(todo),
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 3),
    }


def _records(m, todo, method, settings, choices, batched: bool, most) -> Iterator[dict]:
    """The record of each line of ``todo``, in order: with ``batched``, the lines a batch can
    take gathered until one pass is full (``batched_gradients.fits``), the others alone."""
    waiting: list[tuple[InputLine, Translation]] = []
    sizes: list[tuple[int, int]] = []  # (source, output) lengths of waiting and the next
    for line in todo:
        t = _batch_translation(m, line, settings) if batched else None
        if t is None:
            yield from _batch(m, waiting, method, settings, choices)
            waiting, sizes = [], []
            yield one_line(m, line, method, settings, choices)
            continue
        sizes.append((len(t.src_ids), len(t.out_ids)))
        if waiting and not fits(m, sizes, method, choices, most):
            yield from _batch(m, waiting, method, settings, choices)
            waiting, sizes = [], sizes[-1:]
        waiting.append((line, t))
    yield from _batch(m, waiting, method, settings, choices)


def _batch_translation(m, line: InputLine, settings) -> Translation | None:
    """The translation of a line a batch can take (None: one to explain alone, a contrast,
    a text too long, a translation that fails or is empty, each its own record)."""
    if line.contrast or too_long(line):
        return None
    try:
        t = translate_sentence(m, line.source, settings, line.target)
    except (TranslationError, ValueError):
        return None  # one_line writes the error
    return t if t.src_ids and t.out_ids else None


def _batch(m, waiting, method, settings, choices) -> Iterator[dict]:
    """The records of translated lines whose attributions and step scores share passes
    (``batched_gradients.attributions``, ``step_scores.batched_logits``; each line alone
    where the batch cannot be run)."""
    if not waiting:
        return
    pairs = [(list(t.src_ids), list(t.out_ids)) for _, t in waiting]
    try:
        given = attributions(m, pairs, method, choices)
        logits = batched_logits(m, pairs)  # (T, V) each in turn: the step scores' passes
    except (AttributionError, ValueError):  # a baseline token missing: each line says so
        given = logits = [None] * len(waiting)
    for (line, t), a, read in zip(waiting, given, logits):
        if a is None:
            yield one_line(m, line, method, settings, choices)
            continue
        try:
            asked = {"contrast_source": line.contrast_source, "given": a, "logits": read}
            yield line_head(line) | sentence_json(m, t, method, choices=choices, **asked)
        except (AttributionError, TranslationError, ValueError) as e:
            yield line_head(line) | {"error": " ".join(str(e).split())}


def read_records(source: str | Path | bytes) -> list[dict]:
    """The JSON objects of a results file (a path, or its bytes as uploaded), bounded, each
    checked as ``aggregate`` reads it (FileModeError naming the line and the field)."""
    return list(iter_records(source))


def iter_records(source: str | Path | bytes) -> Iterator[dict]:
    """``read_records``'s objects one at a time, each line read and checked as it comes, so
    that ``aggregate`` never holds a whole file's records (the page's uploads)."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if len(data) > MAX_RECORDS_BYTES:
        raise FileModeError(
            f"The results file is {len(data) / 2**20:.1f} MB; at most 64 MB is read."
        )
    # lines end with \n alone: a token may hold U+2028, which splitlines cuts at
    lines = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
    for n, text in enumerate(lines, start=1):
        if text.strip():
            yield checked_record(parsed_line(text, n), n)


def parsed_line(text: str, n: int) -> dict:
    """Line ``n``'s JSON object holding a ``line`` (FileModeError for anything else)."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        raise FileModeError(f"line {n}: not JSON: is this an attributions file?") from None
    if not isinstance(record, dict) or "line" not in record:
        raise FileModeError(f"line {n}: not an attribution record (no 'line').")
    return record


def checked_record(r: dict, n: int) -> dict:
    """``r`` (line ``n`` of a results file) when every field ``aggregate`` reads is what the
    file mode writes: a line number; an ``error`` text, or T > 0 output tokens, a (T, S + P)
    ``contributions`` matrix over the S source and P prefix tokens, T ``source_share``
    numbers and ``step_scores`` holding a list of perplexities. FileModeError if not."""
    if type(r["line"]) is not int or not 0 <= r["line"] < MAX_INPUT_BYTES:  # bool is no line
        raise FileModeError(f"line {n}: line must be a line number (got {r['line']!r:.40}).")
    if "error" in r:
        if not isinstance(r["error"], str):
            raise FileModeError(f"line {n}: error must be text.")
        return r
    source, prefix, output = (_tokens(r, name, n) for name in ("source", "prefix", "output"))
    if not output:
        raise FileModeError(f"line {n}: output is empty: an explanation has an output token.")
    rows = _field(r, "contributions", n)
    if not isinstance(rows, list) or len(rows) != len(output):
        T = len(output)
        raise FileModeError(f"line {n}: contributions must be {T} rows, one per output token.")
    for t, row in enumerate(rows):
        _numbers(row, f"contributions[{t}]", n, len(source) + len(prefix))
    _numbers(_field(r, "source_share", n), "source_share", n, len(output))
    scores = r.get("step_scores") or {}
    if not isinstance(scores, dict):
        raise FileModeError(f"line {n}: step_scores must be an object of score lists.")
    if (perplexity := scores.get("perplexity")) is not None:
        _numbers(perplexity, "step_scores.perplexity", n)
    return r


def _field(r: dict, name: str, n: int):
    """``r[name]`` (FileModeError naming line ``n`` when it is not there)."""
    if name not in r:
        raise FileModeError(f"line {n}: no '{name}': is this an attributions file?")
    return r[name]


def _tokens(r: dict, name: str, n: int) -> list[str]:
    """``r[name]`` when it is a list of texts (FileModeError naming the field otherwise)."""
    tokens = _field(r, name, n)
    if not isinstance(tokens, list):
        raise FileModeError(f"line {n}: {name} must be a list of tokens.")
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise FileModeError(f"line {n}: {name}[{i}] must be text (got {token!r:.40}).")
    return tokens


def _numbers(values, field: str, n: int, length: int | None = None) -> None:
    """FileModeError unless ``values`` is a list (of ``length`` where given) of finite
    numbers, none a bool, each at most MAX_NUMBER in size."""
    if not isinstance(values, list) or length not in (None, len(values)):
        size = "" if length is None else f"{length} "
        raise FileModeError(f"line {n}: {field} must be a list of {size}numbers.")
    for i, v in enumerate(values):
        if type(v) not in (int, float) or not abs(v) <= MAX_NUMBER:  # NaN fails <= too
            raise FileModeError(f"line {n}: {field}[{i}] must be a finite number (got {v!r:.40}).")


@dataclass
class Aggregated:
    """A results file summed up: by output position, by source token type, per sentence."""

    by_position: pd.DataFrame  # position, sentences, mean source share
    by_token: pd.DataFrame  # token, occurrences, mean contribution received (source side)
    per_sentence: pd.DataFrame  # line, source, output, mean source share, perplexity
    errors: int


def aggregate(records: Iterable[dict]) -> Aggregated:
    """Means over the explained sentences of ``read_records``'s (or ``iter_records``')
    records (those with an ``error`` counted, not read): sums and counts, never the numbers
    themselves, so a file is read in one pass."""
    shares: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])  # position: count, sum
    received: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # token: count, sum
    rows, errors = [], 0
    for r in records:
        if "error" in r:  # read_records let no other record without contributions through
            errors += 1
            continue
        source, contributions = r["source"], r["contributions"]
        for t, share in enumerate(r["source_share"]):
            _add(shares[t], float(share))
        for j, token in enumerate(source):  # each source token's mean over the output rows
            _add(received[token], sum(row[j] for row in contributions) / len(contributions))
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
            {"position": t, "sentences": n, "mean source share": total / n}
            for t, (n, total) in sorted(shares.items())
        ]
    )
    by_token = pd.DataFrame(
        [
            {"token": tok, "occurrences": n, "mean contribution": total / n}
            for tok, (n, total) in received.items()
        ]
    )
    if len(by_token):
        by_token = by_token.sort_values("mean contribution", ascending=False, ignore_index=True)
    return Aggregated(by_position, by_token, pd.DataFrame(rows), errors)


def _add(mean: list, value: float) -> None:
    """One more value into a [count, sum] pair."""
    mean[0] += 1
    mean[1] += value
