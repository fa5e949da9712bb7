"""Where the corpus comes from: d2l's fra-eng.zip (downloaded, checked, cached) or a local
file, read safely (size caps, zip members streamed) and parsed into sentence pairs."""

from __future__ import annotations

import functools
import hashlib
import io
import lzma
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PureWindowsPath
from typing import BinaryIO

from core.places import default_cache_dir, shown_path

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"

FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"

FRA_ENG_SHA1S = (  # fra-eng.zip archives of d2l's corpus, as a model records the file it read
    FRA_ENG_SHA1,  # d2l's download
    "0adb782e9f3deb1a51aacc4d92b4fdeb2d64b463",  # a repacked copy (the shipped models' corpus)
)

FRA_ENG_ENV = "FRA_ENG_ZIP"  # environment variable: a local copy of fra-eng.zip

MAX_FILE_BYTES = 200 * 1024 * 1024  # refuse corpora larger than this (zips: once unpacked)

READ_CHUNK = 1 << 20  # corpus files and zip members are read this many bytes at a time

MAX_LINES = 2_000_000  # refuse corpora of more lines than this (blank and malformed included)

MAX_PAIRS = 1_000_000  # refuse more sentence pairs than this (tiny pairs fill memory, not bytes)

MAX_LINE_CHARS = 10_000  # a longer line is skipped as malformed, never held whole

UNPACKS = "unpacks to more than"  # what a zip member over MAX_FILE_BYTES does

ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    NotImplementedError,
    RuntimeError,
    ValueError,
)

ProgressFn = Callable[[int, int | None], None]  # (bytes done, bytes total or None)


class DataError(Exception):
    """A corpus could not be found, fetched, verified or parsed; the message says why."""


def fra_eng_copy(cache_dir: Path | None = None) -> Path | None:
    """The local fra-eng.zip a run would read ($FRA_ENG_ZIP, else the cache), or None."""
    env = os.environ.get(FRA_ENG_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    cached = (cache_dir or default_cache_dir()) / "fra-eng.zip"
    return cached if cached.is_file() else None


def named_source(source: str, sha1: str | None) -> str:
    """The data source a model records, as ``--data`` names it: "fra-eng" for a file named
    fra-eng.zip whose recorded SHA-1 is a fra-eng archive's (``FRA_ENG_SHA1S``, or that of the
    copy "fra-eng" reads here: ``fra_eng_copy``); any other source unchanged."""
    if PureWindowsPath(source).name != "fra-eng.zip" or not sha1:
        return source
    copy = fra_eng_copy()
    known = {*FRA_ENG_SHA1S, *([file_sha1(copy)] if copy is not None else [])}
    return "fra-eng" if sha1 in known else source


def corpus_problem(source: str) -> str:
    """Why a corpus cannot be read without a download ('' when it can)."""
    if source != "fra-eng":
        return (
            ""
            if Path(source).expanduser().is_file()
            else f"the file {shown_path(source)} is missing"
        )
    if fra_eng_copy() is not None:
        return ""
    return (
        f"the fra-eng corpus is not on this machine (set {FRA_ENG_ENV} to a copy of "
        "fra-eng.zip, or, with network, train once on it to download it)"
    )


def sha1_of(path: Path) -> str:
    """Hex SHA-1 of a file, read in chunks."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _sha1_cached(path: str, mtime_ns: int, size: int) -> str:
    """SHA-1 of a file, remembered per path, modification time and size."""
    return sha1_of(Path(path))


def file_sha1(path) -> str:
    """The SHA-1 of a file's content, computed once per version of it ('' if unreadable)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ""
    return _sha1_cached(str(Path(path).resolve()), st.st_mtime_ns, st.st_size)


def reachable(url: str = FRA_ENG_URL, timeout: float = 2.0) -> bool:
    """Whether the host of ``url`` accepts a connection now (its name resolved and a TCP
    connection made within ``timeout`` seconds): False on a machine without network."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def download(url: str, dest: Path, sha1: str | None, progress: ProgressFn | None = None) -> Path:
    """Fetch ``url`` to ``dest`` (via a temp file), verify its SHA-1, return ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as resp, open(tmp, "wb") as out:
            total = resp.headers.get("Content-Length")
            total = int(total) if total else None
            done = 0
            while chunk := resp.read(1 << 16):
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"Could not download {url}: {e}. Check the network connection, or download "
            f"the file yourself and pass its path (or set {FRA_ENG_ENV})."
        ) from e
    if sha1 and (got := sha1_of(tmp)) != sha1:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"Checksum mismatch for {url}: expected sha1 {sha1}, got {got}. The download "
            "is corrupt or the file changed; try again or pass a local copy."
        )
    os.replace(tmp, dest)
    return dest


def resolve_corpus(
    source: str = "fra-eng",
    cache_dir: Path | None = None,
    progress: ProgressFn | None = None,
    url: str = FRA_ENG_URL,
    sha1: str = FRA_ENG_SHA1,
) -> Path:
    """Path of a readable corpus file: a local path, or fra-eng from env, cache or web."""
    if source != "fra-eng":
        path = Path(source).expanduser()
        if not path.is_file():
            raise DataError(f"Corpus file not found: {shown_path(path)}")
        return path
    env = os.environ.get(FRA_ENG_ENV)
    if env and not Path(env).is_file():
        raise DataError(f"{FRA_ENG_ENV} points to {shown_path(env)}, which is not a file.")
    found = fra_eng_copy(cache_dir)
    if found is not None:
        return found
    return download(url, (cache_dir or default_cache_dir()) / "fra-eng.zip", sha1, progress)


def _too_large(name: str, what: str = "is larger than") -> DataError:
    """The error for a corpus over MAX_FILE_BYTES."""
    return DataError(f"{name} {what} {MAX_FILE_BYTES / 2**20:g} MB; use a smaller corpus file.")


def _pairs_member(zf: zipfile.ZipFile, path: Path) -> zipfile.ZipInfo:
    """The archive's fra.txt, else its first .txt that is not an _about file."""
    infos = [i for i in zf.infolist() if i.filename.endswith(".txt") and "_about" not in i.filename]
    if not infos:
        raise DataError(f"{shown_path(path)} holds no .txt file of sentence pairs.")
    return next((i for i in infos if i.filename.endswith("fra.txt")), infos[0])


def _check_regular_file(path: Path) -> None:
    """DataError unless ``path`` is an existing regular file (not a folder or a device)."""
    if not path.exists():
        raise DataError(f"Corpus file not found: {shown_path(path)}")
    if path.is_dir():
        raise DataError(
            f"{shown_path(path)} is a folder: give the path of a .tsv, .txt or .zip file in it."
        )
    if not path.is_file():
        raise DataError(
            f"{shown_path(path)} is not a regular file (a device, pipe or socket?): give the "
            "path of a .tsv, .txt or .zip file."
        )


class _Capped(io.RawIOBase):
    """A binary stream that raises DataError once more than MAX_FILE_BYTES came out of it."""

    def __init__(self, stream: BinaryIO, name: str, what: str):
        super().__init__()
        self.stream, self.name, self.what, self.total = stream, name, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(min(len(buffer), MAX_FILE_BYTES + 1 - self.total))
        self.total += len(data)
        if self.total > MAX_FILE_BYTES:
            raise _too_large(self.name, self.what)
        buffer[: len(data)] = data
        return len(data)


def _text_lines(stream: BinaryIO, name: str) -> Iterator[str | None]:
    """The UTF-8 lines of a binary stream, read in chunks; None for a line over MAX_LINE_CHARS
    (read past, never held whole)."""
    text = io.TextIOWrapper(io.BufferedReader(stream, READ_CHUNK), "utf-8-sig", newline="\n")
    try:
        while line := text.readline(MAX_LINE_CHARS + 1):
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                while (rest := text.readline(MAX_LINE_CHARS + 1)) and not rest.endswith("\n"):
                    pass
                yield None
                continue
            yield line
    except UnicodeDecodeError as e:
        raise DataError(f"{name} is not UTF-8 text ({e}); save it as UTF-8.") from e


def _zip_lines(path: Path) -> Iterator[str | None]:
    """The lines of a zip archive's pairs member, its declared and actual size capped."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = _pairs_member(zf, path)
            name = f"{shown_path(path)}:{info.filename}"
            if info.file_size > MAX_FILE_BYTES:  # declared size; the read below is capped too
                raise _too_large(name, UNPACKS)
            with zf.open(info) as member:
                yield from _text_lines(_Capped(member, name, UNPACKS), name)
    except ZIP_ERRORS as e:
        raise DataError(f"{shown_path(path)} is a damaged or unsupported zip archive ({e}).") from e


def corpus_lines(path: Path) -> Iterator[str | None]:
    """The lines of a corpus file (.zip: its fra.txt or first .txt), streamed and capped:
    at most MAX_FILE_BYTES (unpacked) and MAX_LINES lines; None stands for a line too long."""
    path = Path(path)
    try:
        _check_regular_file(path)
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _too_large(shown_path(path))
        if path.suffix.lower() == ".zip" or zipfile.is_zipfile(path):
            lines = _zip_lines(path)
        else:
            lines = _file_lines(path)
        for count, line in enumerate(lines, start=1):
            if count > MAX_LINES:
                raise DataError(
                    f"{shown_path(path)} has more than {MAX_LINES:,} lines; use a smaller "
                    "corpus file."
                )
            yield line
    except OSError as e:
        raise DataError(
            f"{shown_path(path)} cannot be read ({e.strerror or e}): check that it is a file "
            "you may read."
        ) from e


def _file_lines(path: Path) -> Iterator[str | None]:
    """The lines of a plain text file, capped at MAX_FILE_BYTES."""
    with path.open("rb") as f:
        yield from _text_lines(_Capped(f, shown_path(path), "is larger than"), shown_path(path))


BARS = re.compile(r" *\|\|\| *")  # the other way to separate a pair: "english ||| french"


def pair_columns(line: str) -> list[str]:
    """The columns of a sentence-pair line, the one reader of every pair the studio takes (a
    corpus, ``core.align --data``, ``core.attribute --input``, an aligner's pairs, gold sets):
    cut at its TABs where it has any (``source<TAB>target[<TAB>...]``), else at its ``|||``
    (``source ||| target [||| ...]``, the spaces around them dropped)."""
    line = line.rstrip("\r\n")
    return line.split("\t") if "\t" in line else BARS.split(line)


def split_pair(line: str | None) -> tuple[str, str] | None:
    """(source, target) of a 'source<TAB>target' or 'source ||| target' line (further
    columns ignored); None for a malformed line."""
    if line is None:
        return None
    cols = pair_columns(line)
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None
    return cols[0], cols[1]


def corpus_pairs(path: Path, counts: dict) -> Iterator[tuple[str, str]]:
    """The sentence pairs of a corpus file, streamed; ``counts`` gets "pairs" and "skipped".

    More than MAX_PAIRS pairs is a DataError (stop reading sooner, e.g. at ``max_pairs``).
    """
    counts.update(pairs=0, skipped=0)
    for line in corpus_lines(path):
        if line is not None and not line.strip():
            continue
        pair = split_pair(line)
        if pair is None:
            counts["skipped"] += 1
            continue
        counts["pairs"] += 1
        if counts["pairs"] > MAX_PAIRS:
            raise DataError(
                f"{shown_path(path)} has more than {MAX_PAIRS:,} sentence pairs; set max_pairs "
                f"(at most {MAX_PAIRS:,}) or use a smaller corpus file."
            )
        yield pair


def counted(n: int, word: str, words: str | None = None) -> str:
    """``n`` and a noun in the right number: '1 line', '2 lines', '1,000 pairs'."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def no_pairs(name: str, skipped: int) -> DataError:
    """The error for a corpus without one usable pair."""
    return DataError(
        f"{name} has no usable sentence pairs: each line needs "
        f"'source<TAB>target' or 'source ||| target' ({counted(skipped, 'malformed line')} "
        "skipped)."
    )


def parse_pairs(text: str, name: str = "corpus") -> tuple[list[tuple[str, str]], int]:
    """The (source, target) pairs of ``text`` (``split_pair``) and the count of skipped lines."""
    pairs, skipped = [], 0
    for line in io.StringIO(text):
        if line.strip():
            pair = split_pair(line)
            skipped += pair is None
            pairs += [pair] if pair else []
    if not pairs:
        raise no_pairs(name, skipped)
    return pairs, skipped
