"""A run's note and tags, written by its user: ``notes.json`` in the run's own directory.

User text is data: bounded here (note length, tag count and tag length), stored as JSON,
written whole (a temporary file, then a rename) and read back leniently (a missing,
damaged or hand-edited file gives empty or cut-down notes, never an error).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.runs.locks import launch_lock
from core.runs.owners import User, check_owner
from core.runs.run_dir import RunDir, RunError, run_dir

MAX_NOTE_CHARS = 2000  # longest note
MAX_TAGS = 12  # tags per run
MAX_TAG_CHARS = 32  # longest tag
MAX_FILE_BYTES = 64 * 1024  # a larger notes.json is not read (hand-made or damaged)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters (tab and newline kept)


class NotesError(RunError):
    """A note or tag is out of bounds; the message says which and what to do."""


@dataclass
class RunNotes:
    """What the user wrote about a run."""

    note: str = ""  # free text, at most MAX_NOTE_CHARS
    tags: list[str] = field(default_factory=list)  # short labels, at most MAX_TAGS


def clean_note(text: object) -> str:
    """A note without control characters or trailing space; NotesError when it is too long."""
    note = _CONTROL.sub("", str(text or "")).strip()  # \r goes too: newlines stay \n
    if len(note) > MAX_NOTE_CHARS:
        raise NotesError(
            f"A note has at most {MAX_NOTE_CHARS:,} characters (got {len(note):,}); shorten it."
        )
    return note


def parse_tags(tags: object) -> list[str]:
    """Tags from 'a, b' or a list: trimmed, spaces collapsed, duplicates dropped; NotesError
    when there are too many or one is too long."""
    items = [tags] if isinstance(tags, str) else list(tags or [])
    out: list[str] = []
    for item in (part for entry in items for part in str(entry).split(",")):
        tag = " ".join(_CONTROL.sub("", str(item)).split())
        if len(tag) > MAX_TAG_CHARS:
            raise NotesError(
                f"A tag has at most {MAX_TAG_CHARS} characters: '{tag[:40]}…' is "
                f"{len(tag)}. Separate tags with commas."
            )
        if tag and tag.casefold() not in {t.casefold() for t in out}:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise NotesError(f"A run has at most {MAX_TAGS} tags (got {len(out)}); drop some.")
    return out


def read_notes(run_path) -> RunNotes:
    """A run's notes; empty when there are none or the file cannot be read, cut to the
    bounds when it was edited by hand."""
    path = RunDir(run_path).notes
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return RunNotes()
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return RunNotes()
    if not isinstance(data, dict):
        return RunNotes()
    note = data.get("note") if isinstance(data.get("note"), str) else ""
    tags = data.get("tags") if isinstance(data.get("tags"), list) else []
    try:
        tags = parse_tags([str(t)[:MAX_TAG_CHARS] for t in tags][:MAX_TAGS])
    except NotesError:
        tags = []
    return RunNotes(_CONTROL.sub("", note)[:MAX_NOTE_CHARS].strip(), tags)


def write_notes(run_id: str, note: object, tags: object, user: User | None = None) -> RunNotes:
    """Check and save a run's note and tags (NotesError or RunError saying why not)."""
    notes = RunNotes(clean_note(note), parse_tags(tags))
    rd = run_dir(run_id)
    check_owner(user, rd, "annotate")
    with launch_lock():  # never into a directory being deleted
        if not rd.path.is_dir():
            raise RunError(f"Run '{run_id}' does not exist (deleted, or another runs directory).")
        _write_atomically(rd.notes, asdict(notes))
    return notes


def _write_atomically(path: Path, obj: dict) -> None:
    """Write JSON to a temporary file of this process and thread, then rename it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=2), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise RunError(f"The notes could not be saved ({e.strerror or e}).") from e
    finally:
        tmp.unlink(missing_ok=True)
