"""A corpus read into splits: pairs filtered by length, split by unique English sentence,
and the vocabularies learnt from the training split."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.corpus.bpe import BPEVocab
from core.corpus.config import SPLITS, DataConfig
from core.corpus.source import DataError, ProgressFn, corpus_pairs, no_pairs, resolve_corpus
from core.corpus.text import tokenize
from core.corpus.vocab import SPECIALS, Vocab
from core.places import shown_path

TICK_EVERY = 5_000  # pairs read between two calls of load_splits' tick
UNK_WARNING = 0.5  # warn when more than this share of the training tokens is <unk>


@dataclass
class Split:
    """Tokenized pairs of one split (no special tokens)."""

    pairs: list[tuple[list[str], list[str]]] = field(default_factory=list)

    def groups(self) -> list[tuple[list[str], list[list[str]]]]:
        """Unique source sentences, each with all of its reference translations."""
        refs: dict[tuple[str, ...], list[list[str]]] = {}
        for src, tgt in self.pairs:
            refs.setdefault(tuple(src), []).append(tgt)
        return [(list(src), r) for src, r in refs.items()]


@dataclass
class Corpus:
    """Vocabularies, the three splits and a summary of what was read."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train: Split
    val: Split
    test: Split
    summary: dict
    # "train" / "val": each pair's (source ids + <eos>, <bos> + target ids + <eos>) arrays
    # (core.corpus.batches.encode_pairs) in these vocabularies, where they were made already
    ids: dict = field(default_factory=dict)

    def use_vocabs(self, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
        """Read the corpus with these vocabularies (a checkpoint's, or the first process's);
        its encoded pairs are kept only when the vocabularies are the same."""
        same = all(
            a.itos == b.itos
            and getattr(a, "tokenizer_json", None) == getattr(b, "tokenizer_json", None)
            for a, b in ((self.src_vocab, src_vocab), (self.tgt_vocab, tgt_vocab))
        )
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        if not same:
            self.ids = {}


def split_by_source(pairs, cfg: DataConfig) -> tuple[Split, Split, Split]:
    """Split so that all translations of one English sentence share a split."""
    if cfg.split == "head":
        n_train = cfg.num_train or len(pairs)
        n_val = cfg.num_val
        return Split(pairs[:n_train]), Split(pairs[n_train : n_train + n_val]), Split([])
    if cfg.split != "random":
        raise DataError(f"Unknown split '{cfg.split}': use one of {', '.join(SPLITS)}.")
    sources = sorted({tuple(s) for s, _ in pairs})
    random.Random(cfg.split_seed).shuffle(sources)
    n_val = round(len(sources) * cfg.val_fraction)
    n_test = round(len(sources) * cfg.test_fraction)
    where = {s: "val" for s in sources[:n_val]}
    where.update({s: "test" for s in sources[n_val : n_val + n_test]})
    parts = {"train": Split(), "val": Split(), "test": Split()}
    for src, tgt in pairs:
        parts[where.get(tuple(src), "train")].pairs.append((src, tgt))
    return parts["train"], parts["val"], parts["test"]


def reading_way(split: Split, cfg: DataConfig) -> Split:
    """A split's pairs as the model reads them: (English, French), or swapped for "fr-en"."""
    if cfg.direction == "fr-en":
        return Split([(t, s) for s, t in split.pairs])
    return split


def validation_pairs_at_most(usable: int, cfg: DataConfig) -> int:
    """The most validation pairs a corpus of ``usable`` pairs can give under ``cfg``'s split,
    known before it is read: "head", the ``num_val`` rows after the training rows;
    "random", ``val_fraction`` of its English sentences (no more than one per pair)."""
    limit = min(usable, cfg.max_pairs or usable)
    if cfg.split == "head":
        return max(0, min(cfg.num_val, limit - (cfg.num_train or limit)))
    return round(limit * cfg.val_fraction)


NO_VALIDATION = (  # what a run without validation pairs goes without (core.training.loop)
    "no validation loss or BLEU, so best.pt is simply the latest checkpoint, and head "
    "importance, faithfulness and the projector have no validation sentences to read"
)


@dataclass
class Splits:
    """The three splits of a corpus and a summary of what was read (no vocabularies yet)."""

    train: Split
    val: Split
    test: Split
    summary: dict


def load_splits(
    cfg: DataConfig,
    cache_dir: Path | None = None,
    progress: ProgressFn | None = None,
    tick: Callable[[], None] | None = None,
) -> Splits:
    """Read, preprocess, filter and split, as ``cfg`` says (max_len counts words); ``tick``
    is called every TICK_EVERY pairs read (a heavy job's deadline check)."""
    cfg.validate()
    path = resolve_corpus(cfg.source, cache_dir, progress)
    counts: dict = {}
    pairs, read = [], 0  # streamed: the raw text is never held whole
    for source, target in itertools.islice(corpus_pairs(path, counts), cfg.max_pairs or None):
        read += 1
        if tick and read % TICK_EVERY == 0:
            tick()  # a heavy job's deadline (core.measure.progress.check_time)
        s, t = tokenize(source), tokenize(target)
        if 0 < len(s) <= cfg.max_len and 0 < len(t) <= cfg.max_len:
            pairs.append((s, t))
    if not read:
        raise no_pairs(shown_path(path), counts["skipped"])
    if not pairs:
        raise DataError(f"{shown_path(path)}: no pair is within max_len={cfg.max_len} tokens.")
    train, val, test = (reading_way(s, cfg) for s in split_by_source(pairs, cfg))
    if not train.pairs:
        raise DataError(f"{shown_path(path)}: the split left no training pairs.")
    summary = {
        "path": str(path),
        "pairs_read": read,
        "skipped_lines": counts["skipped"],
        "too_long": read - len(pairs),
        "train": len(train.pairs),
        "val": len(val.pairs),
        "test": len(test.pairs),
        "direction": cfg.direction,
    }
    return Splits(train, val, test, summary)


def summary_words(summary: dict) -> str:
    """A corpus summary for people (the trainer's log): "tiny.tsv: 30 pairs read (0 skipped
    lines, 0 too long); 28 train, 1 validation, 1 test; vocabularies 49 English, 56 French"."""
    get = lambda key: summary.get(key, "?")  # noqa: E731 - a log line tolerates a missing key
    if summary.get("task") == "induction":  # made, not read (core.corpus.induction)
        return (
            f"induction: {get('train')} training and {get('val')} validation sequences of "
            f"{get('induction_min_length')}-{get('induction_length')} random tokens "
            f"(of {get('induction_tokens')}) read twice"
        )
    words = (
        f"{Path(str(get('path'))).name}: {get('pairs_read')} pairs read ({get('skipped_lines')} "
        f"skipped lines, {get('too_long')} too long); {get('train')} train, {get('val')} "
        f"validation, {get('test')} test"
    )
    if "src_vocab" in summary:
        src, tgt = (
            ("French", "English") if summary.get("direction") == "fr-en" else ("English", "French")
        )
        if summary.get("shared_vocab"):
            words += f"; one vocabulary of {get('src_vocab')} ({src} and {tgt})"
        else:
            words += f"; vocabularies {get('src_vocab')} {src}, {get('tgt_vocab')} {tgt}"
    if summary.get("task") == "lm":
        words += (
            f"; packed in {get('train_contexts')} training and {get('val_contexts')} "
            f"validation contexts of {get('context_length')} tokens"
        )
    return words


def build_vocab(sentences: list[list[str]], cfg: DataConfig) -> Vocab:
    """The vocabulary ``cfg.tokenizer`` asks for, learnt from tokenized sentences."""
    if cfg.tokenizer == "bpe":
        return BPEVocab.train(sentences, cfg.bpe_vocab, cfg.min_freq)
    return Vocab.build(sentences, cfg.min_freq, cfg.max_vocab)


def vocabularies(splits: Splits, cfg: DataConfig) -> Corpus:
    """The corpus of these splits with the vocabularies ``cfg`` asks for, learnt from its
    training pairs (d2l builds them from all rows it reads, train + val: "head" mimics that);
    with ``shared_vocab`` one vocabulary learnt from both sides, the same object for both."""
    train, val = splits.train, splits.val
    seen = train.pairs + val.pairs if cfg.split == "head" else train.pairs
    if cfg.shared_vocab:  # one vocabulary of both languages, read and written by one stack
        src_vocab = tgt_vocab = build_vocab([s for s, _ in seen] + [t for _, t in seen], cfg)
    else:
        src_vocab = build_vocab([s for s, _ in seen], cfg)
        tgt_vocab = build_vocab([t for _, t in seen], cfg)
    summary = {**splits.summary, "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    if cfg.shared_vocab:
        summary["shared_vocab"] = True
    return Corpus(src_vocab, tgt_vocab, train, val, splits.test, summary)


def load_corpus(
    cfg: DataConfig, cache_dir: Path | None = None, progress: ProgressFn | None = None
) -> Corpus:
    """Read, preprocess, filter, split and build vocabularies, as ``cfg`` says."""
    return vocabularies(load_splits(cfg, cache_dir, progress), cfg)


def inspect_file(path: str | Path) -> dict:
    """Counts of usable and skipped lines of a pairs file, for showing before a launch."""
    path = Path(path)
    counts: dict = {}
    examples = []  # streamed: only the first three pairs are kept
    for pair in corpus_pairs(path, counts):
        examples += [pair] if len(examples) < 3 else []
    if not examples:
        raise no_pairs(shown_path(path), counts["skipped"])
    return {
        "path": str(path),
        "usable": counts["pairs"],
        "skipped": counts["skipped"],
        "examples": examples,
    }


def unk_share(corpus: Corpus, vocab: Vocab, column: int) -> float:
    """The share of <unk> among one side's training tokens (from its encoded pairs, when the
    corpus has them: <bos> and <eos> not counted)."""
    encoded = corpus.ids.get("train")
    if encoded:
        unknown = sum(int((pair[column] == Vocab.unk_id).sum()) for pair in encoded)
        specials = 1 + column  # source + <eos>; <bos> + target + <eos>
        return unknown / max(sum(len(pair[column]) - specials for pair in encoded), 1)
    ids = [i for s in vocab.encode_many([p[column] for p in corpus.train.pairs]) for i in s]
    return sum(i == Vocab.unk_id for i in ids) / max(len(ids), 1)


def unk_warnings(corpus: Corpus, data_cfg: DataConfig) -> list[str]:
    """A warning for each side whose training tokens are mostly <unk> (too few words kept)."""
    warnings = []
    for side, vocab, column in (("source", corpus.src_vocab, 0), ("target", corpus.tgt_vocab, 1)):
        share = unk_share(corpus, vocab, column)
        if share <= UNK_WARNING:
            continue
        remedy = (
            "raise --max-vocab (the form's max_vocab)"
            if len(vocab) >= data_cfg.max_vocab
            else "lower --min-freq (the form's min_freq)"
        )
        words = len(vocab) - len(SPECIALS)
        warnings.append(
            f"{share:.0%} of the training {side} tokens are <unk> (vocabulary of {words} "
            f"word{'' if words == 1 else 's'} at min_freq {data_cfg.min_freq}): "
            f"{remedy} or use more data."
        )
    return warnings
