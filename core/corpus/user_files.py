"""Corpus files a user brings: counted before a run, uploads staged, data described in words."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path, PureWindowsPath

from core.corpus.source import FRA_ENG_SHA1, DataError, counted
from core.corpus.splits import inspect_file
from core.corpus.text import ATTRIBUTION
from core.places import DATA_ENV, corpus_folders, data_root, shown_path, uploads_root
from core.places import UPLOADS as UPLOADS

MAX_UPLOAD_BYTES = 20 * 2**20  # largest uploaded corpus accepted
MAX_UPLOADS_BYTES = 200 * 2**20  # all staged uploads together (the oldest go first)
UPLOAD_TTL_S = 24 * 3600.0  # a staged upload no launch used is deleted after a day


@functools.lru_cache(maxsize=32)
def _inspect_cached(path: str, mtime: float, size: int) -> dict:
    """core.corpus.inspect_file, cached by path, modification time and size."""
    return inspect_file(path)


def allowed_path(source: str | Path) -> Path:
    """The resolved path of a corpus the app may read (relative: in the data folder).

    Symlinks and '..' are resolved first; anything outside corpus_folders() is a DataError.
    """
    own = str(source) == "~" or str(source).startswith("~/")  # not ~user: no account named
    try:
        path = (data_root() / (Path(source).expanduser() if own else Path(source))).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # a NUL byte, a symlink loop...
        raise DataError(f"{source!r} is not a usable file path ({e}).") from e
    folders = [f.resolve() for f in corpus_folders()]
    if not any(path.is_relative_to(f) for f in folders):
        raise DataError(
            f"Corpus file not found in the app's data folders: {Path(str(source)).name} is "
            "outside them. The app reads corpus files only from its data folder "
            f"({shown_path(folders[0])}), its download cache and uploads. Put the file in the "
            f"data folder, or set {DATA_ENV} to the folder that holds it and restart the app."
        )
    return path


def inspect_data(source: str | Path) -> dict:
    """Usable and skipped line counts of a pairs file in the app's folders (else DataError)."""
    path = allowed_path(source)
    try:
        st = path.stat()
    except OSError:
        return inspect_file(path)  # missing or unreadable: read_text says why, in words
    return _inspect_cached(str(path), st.st_mtime, st.st_size)


def inspect_upload(name: str, staged: str | Path) -> dict:
    """inspect_data of a staged upload; its errors name the user's file, not the copy."""
    try:
        return inspect_data(staged)
    except DataError as e:
        message = str(e)
        for copy in {shown_path(staged), str(staged), str(Path(staged).resolve())}:
            message = message.replace(copy, name)
        raise DataError(message) from e


def describe_counts(info: Mapping) -> str:
    """What inspect_data found, in words: '2 usable pairs, 1 skipped line.'."""
    return f"{counted(info['usable'], 'usable pair')}, {counted(info['skipped'], 'skipped line')}."


ACCEPTED = (  # what an upload may be (core.corpus.source.split_pair reads its lines)
    "a text file of English<TAB>French lines (or English ||| French; .tsv, .txt), or a .zip "
    "holding one"
)
NAME_CHARS = 80  # longest file name the app keeps (its suffix included)
NAME_BYTES = 200  # and its most bytes in UTF-8 (file systems allow 255)


def safe_file_name(name: str, default: str = "corpus.txt") -> str:
    """A user's file name as the app keeps it: its base name (a browser may send a Windows
    path), each run of characters other than letters, digits, '.', '_' and '-' as one '-',
    at most NAME_CHARS characters with its suffix kept, never hidden ("." first) or empty."""
    base = PureWindowsPath(str(name)).name
    clean = re.sub(r"[^\w.-]+", "-", base).strip(".-")
    stem, suffix = os.path.splitext(clean)
    suffix = suffix if re.fullmatch(r"\.\w{1,10}", suffix) else ""
    stem = stem[: NAME_CHARS - len(suffix)]
    while len((stem + suffix).encode()) > NAME_BYTES:  # a file system's limit is in bytes
        stem = stem[:-1]
    stem = stem.strip(".-")
    return stem + suffix if stem else default


def upload_problem(name: str, data: bytes) -> str | None:
    """What is wrong with an uploaded file, in one line, before it is read as pairs (None: it
    may be read): too large, empty, binary (not a zip) or comma-separated."""
    if len(data) > MAX_UPLOAD_BYTES:
        return (
            f"{name} is {len(data) / 2**20:.1f} MB; the upload limit is "
            f"{MAX_UPLOAD_BYTES // 2**20} MB. Put the file in the data folder "
            f"({shown_path(data_root())}) and give its path instead."
        )
    if not data.strip():
        return f"{name} is empty."
    if data.startswith(b"PK"):
        return None  # a zip: its member is read as text
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # Excel's "Unicode Text" is UTF-16
        return (
            f"{name} is UTF-16 text: save it as UTF-8 (the save dialog's encoding), "
            "then upload that."
        )
    if b"\0" in data[:8192]:
        return f"{name} is a binary file, not text: upload {ACCEPTED}."
    first = data[:65536].split(b"\n", 1)[0]
    if b"\t" not in data[:65536] and b"|||" not in first and (b"," in first or b";" in first):
        return (
            f"{name} has no TAB in it: it looks like comma-separated values (CSV). Save it "
            "with a TAB between the English and the French (a .tsv file), then upload that."
        )
    return None


def stage_upload(name: str, data: bytes) -> Path:
    """Save an uploaded corpus (checked: ``upload_problem``) under the runs root, in a folder
    of its content's hash, under its own name made safe; returns its path."""
    if problem := upload_problem(name, data):
        raise DataError(problem)
    dest = uploads_root() / hashlib.sha1(data).hexdigest()[:16] / safe_file_name(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    prune_uploads(room=0 if dest.is_file() else len(data))  # the cap holds this one too
    if not dest.is_file():
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    return dest


def prune_uploads(now: float | None = None, room: int = 0) -> list[Path]:
    """Delete staged uploads older than UPLOAD_TTL_S, then the oldest past MAX_UPLOADS_BYTES
    less ``room`` (the bytes of one about to be written), and the folders they leave empty.

    A launch copies its corpus into the run, so an upload is only needed between the upload
    and the launch; the removed paths are returned.
    """
    now = time.time() if now is None else now
    files = sorted(
        (p for p in uploads_root().rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime
    )
    gone = [p for p in files if now - p.stat().st_mtime > UPLOAD_TTL_S]
    kept = [p for p in files if p not in gone]
    while kept and sum(p.stat().st_size for p in kept) + room > MAX_UPLOADS_BYTES:
        gone.append(kept.pop(0))
    for path in gone:
        path.unlink(missing_ok=True)
        if path.parent != uploads_root():
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only once empty
    return gone


def source_problems(source: str) -> list[str]:
    """Why a data source cannot be read (fra-eng is always fine: it is downloaded)."""
    if source == "fra-eng":
        return []
    try:
        info = inspect_data(source)
    except DataError as e:
        return [str(e)]
    return [] if info["usable"] else [f"{source} has no usable sentence pairs"]


def induction_words(data_config: Mapping) -> str:
    """The induction task's data in words: 'induction: 4-16 random tokens read twice (64
    kinds)'."""
    n, kinds = data_config.get("induction_length", "?"), data_config.get("induction_tokens", "?")
    shortest = data_config.get("induction_min_length", 4)
    return f"induction: {shortest}-{n} random tokens read twice ({kinds} kinds)"


def on_fra_eng(data_config: Mapping) -> bool:
    """Whether recorded data settings read d2l's fra-eng corpus (Tatoeba's pairs): by name
    ("fra-eng", or a file called fra-eng.zip) or by its SHA-1; an induction task reads none."""
    if data_config.get("task") == "induction":  # random tokens made from its settings
        return False
    source = str(data_config.get("source", "fra-eng"))
    named = source == "fra-eng" or PureWindowsPath(source).name == "fra-eng.zip"
    return named or data_config.get("source_sha1") == FRA_ENG_SHA1


def data_credit(data_config: Mapping | None) -> str:
    """The credit owed for a model's training data, from its recorded ``data_config``: the
    Tatoeba attribution for fra-eng, "" for data of no known licence (random tokens, a file of
    one's own, a model not trained here)."""
    return ATTRIBUTION if data_config and on_fra_eng(data_config) else ""


def describe_data(data_config: Mapping | None) -> str:
    """A short description of a run's or model's data, e.g. 'fra-eng (Tatoeba), ≤12 tokens'."""
    if not data_config:
        return "data unknown"
    if data_config.get("task") == "induction":  # made from its settings: no corpus read
        return induction_words(data_config)
    source = str(data_config.get("source", "fra-eng"))
    parts = ["fra-eng (Tatoeba)" if on_fra_eng(data_config) else Path(source).name]
    num_train, num_val = data_config.get("num_train"), data_config.get("num_val")
    if data_config.get("split") == "head" and (num_train or num_val):
        parts.append(f"first {num_train} + {num_val or 0} pairs" if num_train else "all pairs")
    if data_config.get("max_len"):
        parts.append(f"≤{data_config['max_len']} tokens")
    if data_config.get("tokenizer") == "bpe":
        parts.append(f"BPE pieces ({data_config.get('bpe_vocab', '?')})")
    return ", ".join(parts)
