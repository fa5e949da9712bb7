"""Which corpus to read and how to cut it: ``DataConfig`` and its problems."""

from __future__ import annotations

from dataclasses import dataclass

from core.config_fields import too_large, type_problems
from core.corpus.source import MAX_PAIRS, DataError
from core.corpus.vocab import SPECIALS

TOKENIZERS = ("word", "bpe")  # d2l's word vocabulary, or byte-pair-encoded pieces
SPLITS = ("random", "head")  # by unique English sentence, or the first rows as d2l
TASKS = ("translation", "induction", "lm")  # DataConfig.task: pairs, random tokens twice, or text
DIRECTIONS = ("en-fr", "fr-en")  # which side of each pair the model reads and which it writes
UPPER = {  # the most each field may be: what the machine and the model can hold
    "max_len": 200,  # words per sentence (the Translate page reads at most 60)
    "min_freq": 1_000_000,
    "max_vocab": 200_000,  # word types per language (the output layer grows with it)
    "bpe_vocab": 100_000,  # pieces per language
    "num_train": MAX_PAIRS,
    "num_val": MAX_PAIRS,
    "max_pairs": MAX_PAIRS,  # a corpus is read up to this many pairs at most
    "split_seed": 2**32 - 1,
    "induction_length": 512,
    "context_length": 4096,
    "induction_min_length": 512,
    "induction_tokens": 100_000,
    "induction_sequences": 10_000_000,
}
INDUCTION_TOKENS = 20_000_000  # the most random tokens (sequences x length) the task may hold


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
    direction: str = "en-fr"  # "fr-en": each pair read the other way round, after the split
    # (which stays by English sentence: both directions hold out the same test pairs)
    task: str = "translation"  # "induction": random tokens read twice, loss on the repeat
    context_length: int = 128  # lm task: tokens per context, the corpus's sentences packed
    shared_vocab: bool = False  # one vocabulary learnt from both sides (a one-stack model's)
    induction_length: int = 16  # induction task: random tokens in each copy, at most
    induction_min_length: int = 4  # induction task: at least (each sequence's length is drawn)
    induction_tokens: int = 256  # induction task: random token types (specials apart)
    induction_sequences: int = 20000  # induction task: training sequences (validation: 256)

    def problems(self) -> list[str]:
        """Every reason these data settings are impossible, each naming its field ([] if none)."""
        return type_problems(self) or self.value_problems()

    def validate(self) -> None:
        """Raise DataError with every one of ``problems()``."""
        if problems := self.problems():
            raise DataError("Invalid data settings: " + "; ".join(problems) + ".")

    def value_problems(self) -> list[str]:
        """Why each field's value is impossible (fields of the right types only)."""
        problems = [
            f"{name} must be at least {low} (got {getattr(self, name)})"
            for name, low in (
                ("max_len", 1),
                ("min_freq", 1),
                ("max_vocab", len(SPECIALS) + 1),
                ("bpe_vocab", len(SPECIALS) + 1),
            )
            if getattr(self, name) < low
        ]
        problems += [
            f"{name} cannot be negative (got {getattr(self, name)}; 0 = no limit)"
            for name in ("num_train", "num_val", "max_pairs")
            if getattr(self, name) < 0
        ]
        problems += [
            f"{name} must be in [0, 1) (got {getattr(self, name)})"
            for name in ("val_fraction", "test_fraction")
            if not 0 <= getattr(self, name) < 1
        ]
        if self.split_seed < 0:
            problems.append(f"split_seed cannot be negative (got {self.split_seed})")
        problems += too_large(self, UPPER)
        if not problems and self.val_fraction + self.test_fraction >= 1:
            problems.append("val_fraction + test_fraction must leave data to train on")
        if self.split not in SPLITS:
            problems.append(f"split must be 'random' or 'head' (got {self.split!r})")
        if self.tokenizer not in TOKENIZERS:
            problems.append(f"tokenizer must be 'word' or 'bpe' (got {self.tokenizer!r})")
        if self.direction not in DIRECTIONS:
            problems.append(f"direction must be 'en-fr' or 'fr-en' (got {self.direction!r})")
        if self.task not in TASKS:
            problems.append(f"task must be one of {TASKS} (got {self.task!r})")
        problems += [
            f"{name} must be at least {low} (got {getattr(self, name)})"
            for name, low in (
                ("induction_length", 2),
                ("context_length", 2),
                ("induction_min_length", 2),
                ("induction_tokens", 2),
                ("induction_sequences", 1),
            )
            if getattr(self, name) < low
        ]
        if self.induction_min_length > self.induction_length:
            problems.append(
                f"induction_min_length ({self.induction_min_length}) must be at most "
                f"induction_length ({self.induction_length})"
            )
        if self.task == "induction" and self.induction_sequences * self.induction_length > (
            INDUCTION_TOKENS
        ):
            problems.append(
                f"induction_sequences x induction_length must be at most {INDUCTION_TOKENS:,} "
                f"random tokens (got {self.induction_sequences * self.induction_length:,})"
            )
        if not isinstance(self.source, str) or not self.source.strip():
            problems.append("source must name a corpus ('fra-eng' or a file)")
        return problems
