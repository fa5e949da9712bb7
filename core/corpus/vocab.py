"""Word vocabularies: the special tokens and the word-level ``Vocab`` (d2l's)."""

from __future__ import annotations

from collections import Counter

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


SPECIALS = [PAD, BOS, EOS, UNK]


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

    kind = "word"  # core.corpus.bpe.BPEVocab: "bpe"

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
