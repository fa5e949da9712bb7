"""The English-French corpus as training data: d2l preprocessing, vocabularies,
a split by unique English sentence, and length-bucketed batches.

Shape key: B batch, S source length, T target length (both padded per batch).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from core.corpus_source import DataError, ProgressFn, parse_pairs, read_text, resolve_corpus

ATTRIBUTION = (
    "English-French pairs from the Tatoeba Project (tatoeba.org), packaged by "
    "manythings.org/anki, licensed CC-BY 2.0 (France)."
)
D2L_TEST_PAIRS = [  # the sentences and references of d2l.ai chapter 11.7's check
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
]
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
TOKENIZERS = ("word", "bpe")  # d2l's word vocabulary, or byte-pair-encoded pieces
UNK_WARNING = 0.5  # warn when more than this share of the training tokens is <unk>
# what reading a damaged, encrypted or oddly compressed zip member can raise


@dataclass
class DataConfig:
    """Which corpus to read and how to turn it into training pairs."""

    source: str = "fra-eng"  # "fra-eng" (downloaded, cached) or a path to a .zip / .txt / .tsv
    max_len: int = 20  # longest sentence kept, in words and punctuation (before BPE), each side
    min_freq: int = 2  # words seen fewer times become <unk> (BPE: rarer merges are not made)
    max_vocab: int = 10000  # keep at most this many word types per language (specials included)
    split: str = "random"  # "random": by unique English sentence; "head": first rows as d2l
    # (d2l's "head" also builds the vocabularies from train + val rows, as the book does)
    val_fraction: float = 0.02  # share of unique English sentences held out for validation
    test_fraction: float = 0.02  # share held out for the final test (never trained on)
    num_train: int = 0  # "head" split: first rows for training (d2l: 512); 0 = no limit
    num_val: int = 0  # "head" split: next rows for validation (d2l: 128)
    max_pairs: int = 0  # read at most this many pairs from the file (0 = all)
    split_seed: int = 0  # seed of the split
    tokenizer: str = "word"  # "word": d2l's word vocabulary; "bpe": subword pieces (BPE)
    bpe_vocab: int = 8000  # BPE pieces per language, specials included (tokenizer "bpe")


# ----------------------------------------------------------------------------- text


def preprocess(text: str) -> str:
    """d2l preprocessing: no-break spaces to spaces, lower case, space before , . ! ?

    Also writes the typographic apostrophe (’) as ' so "j’ai" and "j'ai" are one word.
    """
    text = text.replace("\u202f", " ").replace("\xa0", " ").replace("\u2019", "'")
    text = text.lower().strip()
    out = []
    for i, ch in enumerate(text):
        if i > 0 and ch in ",.!?" and text[i - 1] != " ":
            out.append(" ")
        out.append(ch)
    return "".join(out)


def tokenize(text: str) -> list[str]:
    """Preprocess and split into word tokens."""
    return preprocess(text).split()


class Vocab:
    """Word-level vocabulary; ids 0..3 are <pad> <bos> <eos> <unk>."""

    def __init__(self, itos: list[str]):
        if itos[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}")
        self.itos = list(itos)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, sentences: list[list[str]], min_freq: int, max_size: int) -> Vocab:
        """Most frequent words seen at least ``min_freq`` times, ties broken alphabetically."""
        counts = Counter(tok for sent in sentences for tok in sent)
        words = sorted(
            (w for w, c in counts.items() if c >= min_freq and w not in SPECIALS),
            key=lambda w: (-counts[w], w),
        )
        return cls(SPECIALS + words[: max(0, max_size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.itos)

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    kind = "word"  # core.subword.BPEVocab: "bpe"

    def encode(self, tokens: list[str]) -> list[int]:
        """Words to ids (unknown words -> <unk>)."""
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def encode_many(self, sentences) -> list[list[int]]:
        """Ids of many tokenized sentences."""
        return [self.encode(s) for s in sentences]

    def segment(self, words) -> tuple[list[str], list[int]]:
        """(tokens the model reads, their ids): here the words themselves."""
        return list(words), self.encode(words)

    def pieces(self, words) -> list[str]:
        """The tokens the model reads for these words (a subword vocabulary cuts them)."""
        return list(words)

    def words(self, tokens) -> list[str]:
        """Tokens back to words (a subword vocabulary joins its pieces)."""
        return list(tokens)

    def unknown(self, words) -> list[str]:
        """The words this vocabulary reads as <unk>."""
        return [w for w in words if w not in self.stoi]

    def describe(self) -> str:
        """A short name of this vocabulary, e.g. "words, 6,000 types"."""
        return f"words, {len(self):,} types"

    def decode(self, ids) -> list[str]:
        """Ids to token strings."""
        return [self.itos[int(i)] for i in ids]


# ----------------------------------------------------------------------------- splits


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


def split_by_source(pairs, cfg: DataConfig) -> tuple[Split, Split, Split]:
    """Split so that all translations of one English sentence share a split."""
    if cfg.split == "head":
        n_train = cfg.num_train or len(pairs)
        n_val = cfg.num_val
        return Split(pairs[:n_train]), Split(pairs[n_train : n_train + n_val]), Split([])
    if cfg.split != "random":
        raise DataError(f"Unknown split '{cfg.split}': use 'random' or 'head'.")
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


def config_problems(cfg: DataConfig) -> list[str]:
    """Every reason the data settings are impossible, each naming its field."""
    problems = [
        f"{name} must be at least {low} (got {getattr(cfg, name)})"
        for name, low in (
            ("max_len", 1),
            ("min_freq", 1),
            ("max_vocab", len(SPECIALS) + 1),
            ("bpe_vocab", len(SPECIALS) + 1),
        )
        if getattr(cfg, name) < low
    ]
    problems += [
        f"{name} cannot be negative (got {getattr(cfg, name)}; 0 = no limit)"
        for name in ("num_train", "num_val", "max_pairs")
        if getattr(cfg, name) < 0
    ]
    problems += [
        f"{name} must be in [0, 1) (got {getattr(cfg, name)})"
        for name in ("val_fraction", "test_fraction")
        if not 0 <= getattr(cfg, name) < 1
    ]
    if not problems and cfg.val_fraction + cfg.test_fraction >= 1:
        problems.append("val_fraction + test_fraction must leave data to train on")
    if cfg.split not in ("random", "head"):
        problems.append(f"split must be 'random' or 'head' (got {cfg.split!r})")
    if cfg.tokenizer not in TOKENIZERS:
        problems.append(f"tokenizer must be 'word' or 'bpe' (got {cfg.tokenizer!r})")
    if not isinstance(cfg.source, str) or not cfg.source.strip():
        problems.append("source must name a corpus ('fra-eng' or a file)")
    return problems


def validate_config(cfg: DataConfig) -> None:
    """Raise DataError naming every impossible data setting."""
    problems = config_problems(cfg)
    if problems:
        raise DataError("Invalid data settings: " + "; ".join(problems) + ".")


@dataclass
class Splits:
    """The three splits of a corpus and a summary of what was read (no vocabularies yet)."""

    train: Split
    val: Split
    test: Split
    summary: dict


def load_splits(
    cfg: DataConfig, cache_dir: Path | None = None, progress: ProgressFn | None = None
) -> Splits:
    """Read, preprocess, filter and split, as ``cfg`` says (max_len counts words)."""
    validate_config(cfg)
    path = resolve_corpus(cfg.source, cache_dir, progress)
    raw, skipped = parse_pairs(read_text(path), str(path))
    if cfg.max_pairs:
        raw = raw[: cfg.max_pairs]
    tokenized = [(tokenize(s), tokenize(t)) for s, t in raw]
    pairs = [
        (s, t) for s, t in tokenized if 0 < len(s) <= cfg.max_len and 0 < len(t) <= cfg.max_len
    ]
    if not pairs:
        raise DataError(f"{path}: no pair is within max_len={cfg.max_len} tokens.")
    train, val, test = split_by_source(pairs, cfg)
    if not train.pairs:
        raise DataError(f"{path}: the split left no training pairs.")
    summary = {
        "path": str(path),
        "pairs_read": len(raw),
        "skipped_lines": skipped,
        "too_long": len(tokenized) - len(pairs),
        "train": len(train.pairs),
        "val": len(val.pairs),
        "test": len(test.pairs),
    }
    return Splits(train, val, test, summary)


def build_vocab(sentences: list[list[str]], cfg: DataConfig) -> Vocab:
    """The vocabulary ``cfg.tokenizer`` asks for, learnt from tokenized sentences."""
    if cfg.tokenizer == "bpe":
        from core.subword import BPEVocab

        return BPEVocab.train(sentences, cfg.bpe_vocab, cfg.min_freq)
    return Vocab.build(sentences, cfg.min_freq, cfg.max_vocab)


def load_corpus(
    cfg: DataConfig, cache_dir: Path | None = None, progress: ProgressFn | None = None
) -> Corpus:
    """Read, preprocess, filter, split and build vocabularies, as ``cfg`` says."""
    splits = load_splits(cfg, cache_dir, progress)
    train, val = splits.train, splits.val
    # d2l builds its vocabularies from all rows it reads (train + val); "head" mimics that
    seen = train.pairs + val.pairs if cfg.split == "head" else train.pairs
    src_vocab = build_vocab([s for s, _ in seen], cfg)
    tgt_vocab = build_vocab([t for _, t in seen], cfg)
    summary = {**splits.summary, "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    return Corpus(src_vocab, tgt_vocab, train, val, splits.test, summary)


def inspect_file(path: str | Path) -> dict:
    """Counts of usable and skipped lines of a pairs file, for showing before a launch."""
    path = Path(path)
    pairs, skipped = parse_pairs(read_text(path), str(path))
    return {"path": str(path), "usable": len(pairs), "skipped": skipped, "examples": pairs[:3]}


# ----------------------------------------------------------------------------- batches


def encode_pairs(
    split: Split, src_vocab: Vocab, tgt_vocab: Vocab
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(source ids + <eos>, <bos> + target ids + <eos>) arrays for each pair."""
    sources = src_vocab.encode_many([src for src, _ in split.pairs])
    targets = tgt_vocab.encode_many([tgt for _, tgt in split.pairs])
    return [
        (
            np.array(s + [Vocab.eos_id], dtype=np.int64),
            np.array([Vocab.bos_id] + t + [Vocab.eos_id], dtype=np.int64),
        )
        for s, t in zip(sources, targets)
    ]


def pad_batch(seqs: list[np.ndarray], length: int | None = None) -> torch.Tensor:
    """Right-pad id arrays with <pad> into one (B, max len) tensor (or truncate to length)."""
    width = length or max(len(s) for s in seqs)
    out = np.full((len(seqs), width), Vocab.pad_id, dtype=np.int64)  # (B, width)
    for i, s in enumerate(seqs):
        out[i, : min(len(s), width)] = s[:width]
    return torch.from_numpy(out)


def batch_indices(
    lengths: list[int],
    batch_size: int,
    shuffle: bool,
    seed: int,
    bucket: bool = True,
    pool: int = 64,
) -> list[list[int]]:
    """Groups of example indices; with ``bucket`` similar lengths share a batch."""
    idx = list(range(len(lengths)))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(idx)
    if bucket:
        size = batch_size * pool
        chunks = [idx[i : i + size] for i in range(0, len(idx), size)]
        idx = [j for c in chunks for j in sorted(c, key=lambda k: lengths[k])]
    batches = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def batches(
    encoded: list[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    bucket: bool = True,
    fixed_len: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (src (B, S), tgt (B, T)) id tensors; tgt holds <bos> ... <eos>.

    With ``bucket`` batches are padded only to their longest sentence; ``fixed_len``
    pads (and truncates) everything to one length, as d2l's ``num_steps`` does.
    """
    lengths = [max(len(s), len(t)) for s, t in encoded]
    for group in batch_indices(lengths, batch_size, shuffle, seed, bucket and not fixed_len):
        src = pad_batch([encoded[i][0] for i in group], fixed_len)  # (B, S)
        tgt = pad_batch([encoded[i][1] for i in group], fixed_len and fixed_len + 1)  # (B, T)
        yield src, tgt


def rank_batches(
    encoded: list[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    seed: int,
    bucket: bool = True,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, int]]:
    """One training process's share of each shuffled batch of ``batch_size * world_size`` pairs.

    Every process builds the same global batches (same seed), then keeps every
    ``world_size``-th pair from its ``rank`` on, so the processes of one step train on
    sentences of one length bucket. Yields (src (b, S), tgt (b, T + 1), target tokens here,
    target tokens of the global batch); a process left without a pair (a last batch smaller
    than ``world_size``) gets the batch's first pair, counted as 0 tokens. Alone
    (``world_size`` 1) it yields what ``batches`` does.
    """
    lengths = [max(len(s), len(t)) for s, t in encoded]
    for group in batch_indices(lengths, batch_size * world_size, True, seed, bucket):
        mine = group[rank::world_size]
        here = sum(len(encoded[i][1]) - 1 for i in mine)  # <bos> is input only
        total = sum(len(encoded[i][1]) - 1 for i in group)
        mine = mine or group[:1]
        src = pad_batch([encoded[i][0] for i in mine])  # (b, S)
        tgt = pad_batch([encoded[i][1] for i in mine])  # (b, T + 1)
        yield src, tgt, here, total


def unk_warnings(corpus: Corpus, data_cfg: DataConfig) -> list[str]:
    """A warning for each side whose training tokens are mostly <unk> (too few words kept)."""
    warnings = []
    for side, vocab, column in (("source", corpus.src_vocab, 0), ("target", corpus.tgt_vocab, 1)):
        ids = [i for s in vocab.encode_many([p[column] for p in corpus.train.pairs]) for i in s]
        share = sum(i == Vocab.unk_id for i in ids) / max(len(ids), 1)
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
