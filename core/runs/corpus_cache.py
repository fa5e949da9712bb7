"""The corpus a run trains on, prepared once per content and data settings and kept on disk
(``.corpora`` under the runs folder).

Its splits, vocabularies (the BPE tokenizer learnt) and encoded pairs are kept, so a second
run of the same corpus and data settings starts in seconds. An entry is keyed by the corpus
file's SHA-1 and every data setting but the file's path; it is one ``.npz`` file (JSON text
and integer arrays, never a pickle) written to a temporary file and renamed, so two trainers
preparing it at once each leave a whole one. The folder is kept under budget.CORPORA_BYTES,
the least recently used going first. A failure to read or write an entry only costs the
time of preparing the corpus again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from core.corpus.batches import encode_pairs
from core.corpus.bpe import BPEVocab, vocab_from_meta
from core.corpus.config import DataConfig
from core.corpus.induction import induction_corpus
from core.corpus.packed import packed_corpus
from core.corpus.source import ProgressFn, file_sha1, resolve_corpus
from core.corpus.splits import Corpus, Split, load_splits, vocabularies
from core.corpus.vocab import Vocab
from core.places import corpora_root
from core.runs.budget import CORPORA_BYTES
from core.runs.disk_cache import prune

FORMAT = 1  # what an entry holds; a new number makes every older entry a miss
SPLIT_NAMES = ("train", "val", "test")
ENCODED = ("train", "val")  # the splits whose encoded pairs are kept (the trainer's)
Phase = Callable[[str], None]  # told what the preparation does now, in words

READING = "reading the corpus"
CACHED = "reading the corpus prepared by an earlier run (cached)"
ENCODING = "encoding the pairs (cached next time)"
MAKING = "making the random sequences of the induction task"


def learning_words(cfg: DataConfig) -> str:
    """What learning the vocabularies is called while it runs."""
    what = "learning BPE" if cfg.tokenizer == "bpe" else "building the vocabularies"
    return f"{what} (cached next time)"


def corpus_key(path: Path, cfg: DataConfig) -> str | None:
    """The key of a corpus file read with ``cfg``: its content and every data setting but
    its path (None when the file cannot be read)."""
    sha1 = file_sha1(path)
    if not sha1:
        return None
    settings = {k: v for k, v in asdict(cfg).items() if k != "source"}
    text = json.dumps({"format": FORMAT, "sha1": sha1, "data": settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def prepared_corpus(
    cfg: DataConfig,
    progress: ProgressFn | None = None,
    phase: Phase | None = None,
    folder: Path | None = None,
) -> Corpus:
    """``cfg``'s corpus read, split, with its vocabularies and the training and validation
    pairs encoded: from the cache when an earlier run prepared it, else prepared and kept
    (the induction task's is made, never cached: ``core.corpus.induction``; the lm task's
    pairs packed into contexts: ``core.corpus.packed``). ``phase`` hears each step's words;
    ``progress`` follows a download."""
    tell = phase or (lambda words: None)
    cfg.validate()
    if cfg.task == "induction":  # made from its settings in a moment: nothing read or kept
        tell(MAKING)
        return induction_corpus(cfg)
    corpus = sentence_pairs(cfg, progress, tell, folder)
    return packed_corpus(corpus, cfg.context_length) if cfg.task == "lm" else corpus


def sentence_pairs(
    cfg: DataConfig, progress: ProgressFn | None, tell: Phase, folder: Path | None
) -> Corpus:
    """``cfg``'s corpus of sentence pairs, encoded: from the cache, else prepared and kept."""
    path = resolve_corpus(cfg.source, progress=progress)  # downloads fra-eng when needed
    key, folder = corpus_key(path, cfg), folder or corpora_root()
    entry = folder / f"{key}.npz" if key else None
    if entry is not None and entry.is_file():
        tell(CACHED)
        if (corpus := read_entry(entry, path)) is not None:
            return corpus
    tell(READING)
    splits = load_splits(cfg)
    tell(learning_words(cfg))
    corpus = vocabularies(splits, cfg)
    tell(ENCODING)
    corpus.ids = {
        n: encode_pairs(getattr(corpus, n), corpus.src_vocab, corpus.tgt_vocab) for n in ENCODED
    }
    if entry is not None:
        write_entry(entry, corpus)
    return corpus


def vocab_entry(vocab: Vocab) -> dict:
    """A vocabulary as JSON: its tokens, and its BPE tokenizer when it has one."""
    out = {"itos": list(vocab.itos)}
    if isinstance(vocab, BPEVocab):
        out["tokenizer"] = vocab.tokenizer_json
    return out


def joined(split: Split) -> list[list[str]]:
    """A split's pairs as [source, target] lines of space-joined tokens (no token holds a
    space: core.corpus.text.tokenize splits on them)."""
    return [[" ".join(src), " ".join(tgt)] for src, tgt in split.pairs]


def encoded_arrays(name: str, pairs: list) -> dict[str, np.ndarray]:
    """One split's encoded pairs as four flat arrays: each side's ids and lengths."""
    out = {}
    for column, side in enumerate(("src", "tgt")):
        seqs = [pair[column] for pair in pairs]
        out[f"{name}_{side}"] = (
            np.concatenate(seqs).astype(np.int32) if seqs else np.zeros(0, np.int32)
        )
        out[f"{name}_{side}_len"] = np.array([len(s) for s in seqs], dtype=np.int64)
    return out


def write_entry(entry: Path, corpus: Corpus, limit: int = CORPORA_BYTES) -> None:
    """Keep a prepared corpus (temporary file, then rename), then the folder within
    ``limit`` bytes; failures are ignored (a cache only saves time)."""
    meta = {
        "format": FORMAT,
        "summary": {k: v for k, v in corpus.summary.items() if k != "path"},
        "vocab": {"src": vocab_entry(corpus.src_vocab), "tgt": vocab_entry(corpus.tgt_vocab)},
        "pairs": {n: joined(getattr(corpus, n)) for n in SPLIT_NAMES},
    }
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    for name in ENCODED:
        arrays.update(encoded_arrays(name, corpus.ids.get(name) or []))
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
        if tmp.stat().st_size > limit:
            tmp.unlink()
            return  # larger than the whole cache: not kept
        os.replace(tmp, entry)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    prune(entry.parent, limit, keep=entry, pattern="*.npz")


def split_ids(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Flat ids cut back into one int64 array per sentence (views of one array)."""
    if int(lengths.sum()) != flat.size:
        raise ValueError("the ids do not add up to their lengths")
    ids, ends = flat.astype(np.int64), np.cumsum(lengths).tolist()
    return [ids[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def read_entry(entry: Path, path: Path) -> Corpus | None:
    """The corpus an entry holds (its summary naming ``path``, the file read now), or None
    when it is unreadable or not of this FORMAT."""
    try:
        with np.load(entry, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes())
            if meta.get("format") != FORMAT:
                return None
            ids = {}
            for name in ENCODED:
                src = split_ids(data[f"{name}_src"], data[f"{name}_src_len"])
                tgt = split_ids(data[f"{name}_tgt"], data[f"{name}_tgt_len"])
                ids[name] = list(zip(src, tgt))
        splits = {
            n: Split([(s.split(), t.split()) for s, t in meta["pairs"][n]]) for n in SPLIT_NAMES
        }
        vocabs = [
            vocab_from_meta(v["itos"], v.get("tokenizer"))
            for v in (meta["vocab"]["src"], meta["vocab"]["tgt"])
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if any(len(ids[n]) != len(splits[n].pairs) for n in ENCODED):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)  # used now: the last to go
    summary = {**meta["summary"], "path": str(path)}
    return Corpus(*vocabs, splits["train"], splits["val"], splits["test"], summary, ids)
