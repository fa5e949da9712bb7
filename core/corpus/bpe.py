"""Subword vocabularies: byte-pair encoding (BPE) trained with the ``tokenizers`` library.

A BPE vocabulary reads the same d2l-preprocessed words as the word vocabulary, and cuts
each word into pieces; a piece that continues a word starts with ``##`` ("mangeons" ->
"mange", "##ons"), so rare words and names are spelled out instead of becoming <unk>.
Only characters never seen in training are <unk>. The trained tokenizer travels inside
every checkpoint as its JSON text (``checkpoint_entries``), so a model reads text exactly as it
was trained to.

Training breaks ties between equally frequent merges in an arbitrary order, so two
trainings on one corpus can differ in rare pieces: under torchrun the first process's
tokenizer is sent to the others (``core.train``), and a resumed run reads the checkpoint's.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.corpus.vocab import SPECIALS, Vocab

PREFIX = "##"  # marks a piece that continues the word before it


class BPEVocab(Vocab):
    """A vocabulary of BPE pieces; ids 0..3 are <pad> <bos> <eos> <unk> as in ``Vocab``."""

    kind = "bpe"

    def __init__(self, tokenizer_json: str):
        from tokenizers import Tokenizer

        self.tokenizer_json = tokenizer_json
        try:
            self.tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception
            raise ValueError(f"its BPE tokenizer is damaged ({str(e)[:120]})") from None
        size = self.tokenizer.get_vocab_size()
        super().__init__([self.tokenizer.id_to_token(i) for i in range(size)])

    @classmethod
    def train(cls, sentences: Sequence[Sequence[str]], size: int, min_freq: int) -> BPEVocab:
        """Learn at most ``size`` pieces (specials included) from tokenized sentences."""
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tokenizer = Tokenizer(models.BPE(unk_token=SPECIALS[3], continuing_subword_prefix=PREFIX))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.BpeTrainer(
            vocab_size=size,
            min_frequency=min_freq,
            special_tokens=SPECIALS,
            continuing_subword_prefix=PREFIX,
            show_progress=False,
        )
        tokenizer.train_from_iterator((" ".join(s) for s in sentences), trainer)
        return cls(tokenizer.to_str())

    def segment(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        """(pieces, ids) of words; an unknown character shows as itself, its id as <unk>."""
        if not words:
            return [], []
        enc = self.tokenizer.encode(list(words), is_pretokenized=True)
        pieces = []
        for piece, i, word, (start, end) in zip(enc.tokens, enc.ids, enc.word_ids, enc.offsets):
            if i == self.unk_id:  # spell the character out, so the page can flag it
                piece = ("" if start == 0 else PREFIX) + words[word][start:end]
            pieces.append(piece)
        return pieces, list(enc.ids)

    def encode(self, tokens: list[str]) -> list[int]:
        """Words to piece ids."""
        return self.segment(tokens)[1]

    def encode_many(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Piece ids of many tokenized sentences at once (in parallel)."""
        todo = [list(s) for s in sentences]
        done = self.tokenizer.encode_batch([s for s in todo if s], is_pretokenized=True)
        out, it = [], iter(done)
        for s in todo:
            out.append(list(next(it).ids) if s else [])
        return out

    def word_ids_many(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """For each sentence, the index of the word each of its pieces comes from."""
        todo = [list(s) for s in sentences]
        done = iter(self.tokenizer.encode_batch([s for s in todo if s], is_pretokenized=True))
        return [list(next(done).word_ids) if s else [] for s in todo]

    def pieces(self, words: Sequence[str]) -> list[str]:
        """The pieces the model reads for these words."""
        return self.segment(words)[0]

    def words(self, tokens: Sequence[str]) -> list[str]:
        """Pieces joined back into words."""
        return join_pieces(tokens)

    def unknown(self, words: Sequence[str]) -> list[str]:
        """The words holding a character this vocabulary has never seen."""
        ids = self.tokenizer.encode_batch([[w] for w in words], is_pretokenized=True)
        return [w for w, enc in zip(words, ids) if self.unk_id in enc.ids]

    def describe(self) -> str:
        """A short name of this vocabulary, e.g. "BPE, 6,000 pieces"."""
        return f"BPE, {len(self):,} pieces"


LONE_START = "\u2423"  # ␣: a SentencePiece piece that is the word-start mark alone (shown so)


def word_spans(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each word among pieces: a piece starting with ``##`` joins the last.

    Special tokens (<bos>, <eos>, ...) are words of their own.
    """
    spans: list[tuple[int, int]] = []
    for i, tok in enumerate(tokens):
        joins = spans and tok.startswith(PREFIX) and tokens[i - 1] not in SPECIALS
        if joins and len(tok) > len(PREFIX):
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


def join_pieces(tokens: Sequence[str]) -> list[str]:
    """The words of a list of pieces: each word's pieces joined, their ``##`` dropped (and a
    lone word-start mark, LONE_START, before a word's letters)."""
    words = []
    for a, b in word_spans(tokens):
        word = "".join(t.removeprefix(PREFIX) if i else t for i, t in enumerate(tokens[a:b]))
        words.append(word[1:] if b - a > 1 and word.startswith(LONE_START) else word)
    return words


def vocab_from_meta(itos: Sequence[str], tokenizer: str | None) -> Vocab:
    """A vocabulary back from a checkpoint (``tokenizer``: the BPE JSON text, or None)."""
    if tokenizer is None:
        return Vocab(list(itos))
    vocab = BPEVocab(tokenizer)
    if vocab.itos != list(itos):
        raise ValueError("its BPE tokenizer does not match its vocabulary")
    return vocab


def checkpoint_vocabs(ckpt: dict) -> tuple[Vocab, Vocab]:
    """The (source, target) vocabularies a checkpoint dict records."""
    tokenizers = ckpt.get("tokenizers") or {}
    if not isinstance(tokenizers, dict):
        raise ValueError(f"its tokenizers are a {type(tokenizers).__name__}, not a mapping")
    return (
        vocab_from_meta(ckpt["src_vocab"], tokenizers.get("src")),
        vocab_from_meta(ckpt["tgt_vocab"], tokenizers.get("tgt")),
    )


def checkpoint_entries(src_vocab: Vocab, tgt_vocab: Vocab) -> dict:
    """The checkpoint keys that record two vocabularies (and their tokenizers, if BPE)."""
    out = {"src_vocab": list(src_vocab.itos), "tgt_vocab": list(tgt_vocab.itos)}
    tokenizers = {
        side: vocab.tokenizer_json
        for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab))
        if isinstance(vocab, BPEVocab)
    }
    if tokenizers:
        out["tokenizers"] = tokenizers
    return out
