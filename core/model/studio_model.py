"""The studio's own Transformer behind the one interface (``core.model.interface``).

``StudioModel`` answers every question the analysis asks of a model from the d2l
Transformer (``core.model.transformer``), its word or BPE vocabularies and its checkpoint's
metadata: tokens by the vocabularies, decoding by ``core.model.decode``, passes and hook sites
by the model's own forward (its order written once, there).

Shape key: B batch, S source tokens, T decoder steps, D model width, V target vocabulary.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import fields

import torch
import torch.nn.functional as F

from core.corpus.bpe import word_spans
from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model.blocks import MultiHeadAttention
from core.model.capabilities import STUDIO
from core.model.checked_translation import FRENCH_EXAMPLE
from core.model.checkpoints import data_config_of
from core.model.config import ModelConfig
from core.model.decode import (
    forced_translation,
    greedy_decode,
    prepare_source,
    translate,
    translate_batch,
)
from core.model.hooks import HookPoint
from core.model.interface import TranslationModel
from core.model.parts import (
    MAX_LEN,
    AttentionWeights,
    DecodeSettings,
    Source,
    StreamLayout,
    StreamSublayer,
    SublayerNorm,
    Translation,
    TranslationError,
    linear_parts,
    source_len,
)
from core.model.scores import evaluate_split
from core.model.studio_loading import load_checkpoint
from core.model.trainee import build_model
from core.model.transformer import Transformer

PROJECTED = (
    "each decoder layer's output (after its last AddNorm) through the output layer (decoder.dense)"
)
PROJECTED_PRE_LN = (
    "each decoder layer's output (after its last residual sum) through the final layer "
    "norm (decoder.final_ln), then the output layer (decoder.dense)"
)


def languages_of(meta: Mapping) -> tuple[str, str]:
    """(source, target) codes a studio checkpoint translates: ("en", "fr"), or ("fr", "en")
    for one trained the other way round (its data settings say)."""
    return ("fr", "en") if data_config_of(meta).direction == "fr-en" else ("en", "fr")


@functools.lru_cache(maxsize=256)
def _parameters(model_json: str) -> int:
    """Parameters of a model with this ModelConfig (built on the meta device)."""
    with torch.device("meta"):
        model = build_model(ModelConfig(**json.loads(model_json)))
    return sum(p.numel() for p in model.parameters())


def config_parameters(model: Mapping) -> int:
    """Parameters of a model of these sizes (a ModelConfig as a dict, vocabularies included)."""
    known = {f.name for f in fields(ModelConfig)}
    return _parameters(json.dumps({k: v for k, v in model.items() if k in known}, sort_keys=True))


def attention_module(m: StudioModel, kind: str, layer: int) -> MultiHeadAttention:
    """The MultiHeadAttention of one kind and layer of a studio model (ValueError for a wrong
    one)."""
    m.check_layer(kind, layer)
    block = (m.model.encoder if kind == "encoder" else m.model.decoder).layers[layer]
    return {
        "encoder": lambda: block.attention,
        "decoder_self": lambda: block.self_attention,
        "cross": lambda: block.cross_attention,
    }[kind]()


class StudioModel(TranslationModel):
    """A Transformer trained here, with its vocabularies and its checkpoint's metadata."""

    family = STUDIO
    start_id, eos_id, pad_id, unk_id = Vocab.bos_id, Vocab.eos_id, Vocab.pad_id, Vocab.unk_id
    source_label = "English sentence"  # the sentence box's label
    target_name = "French"  # the target language as a box names it

    def __init__(self, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, meta=None):
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.meta = dict(meta or {})
        self.reads_french = languages_of(self.meta)[0] == "fr"  # trained fr→en
        if self.reads_french:
            source, self.target_name = self.language_names
            self.source_label, self.example_sentence = f"{source} sentence", FRENCH_EXAMPLE

    @classmethod
    def load(cls, path, device="cpu") -> StudioModel:
        """A checkpoint file opened (CheckpointError in one line when it cannot be)."""
        lm = load_checkpoint(path, device)
        return cls(lm.model, lm.src_vocab, lm.tgt_vocab, lm.meta)

    @property
    def cfg(self):
        """The model's sizes."""
        return self.model.cfg

    @property
    def languages(self) -> tuple[str, str]:
        """("en", "fr"), or ("fr", "en") for a model trained the other way round."""
        return languages_of(self.meta)

    @property
    def pieces_name(self) -> str:
        """The studio's own subword vocabularies are BPE (core.corpus.bpe)."""
        return "BPE" if self.subword else "word"

    @property
    def subword(self) -> bool:
        """Whether a vocabulary of this model cuts words into pieces (BPE)."""
        return self.src_vocab.kind != "word" or self.tgt_vocab.kind != "word"

    # ------------------------------------------------------------------ tokens

    def source(self, sentence: str) -> Source:
        ids, tokens, unknown, notes = prepare_source(
            sentence, self.src_vocab, self.cfg.max_positions
        )
        return Source(ids, tokens, unknown, notes)

    def source_notes(self, words: Sequence[str]) -> list[str]:
        unknown = self.src_vocab.unknown(list(words))
        if not unknown:
            return []
        chars = ", the characters never seen in training" if self.src_vocab.kind == "bpe" else ""
        listed = ", ".join(dict.fromkeys(unknown))
        return [f"Not in the model's vocabulary (read as <unk>{chars}): {listed}."]

    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        kind = "bpe" if self.subword else "word"
        return source_len(list(words), kind, self.cfg.max_positions)

    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        return [*self.tgt_vocab.segment(tokenize(text or ""))[1], self.eos_id]

    def words_to_source(self, words: Sequence[str]) -> list[int]:
        """d2l's words of a source sentence as ids, the end token included."""
        return [*self.src_vocab.encode(list(words)), self.eos_id]

    def words_to_target(self, words: Sequence[str], target_lang=None) -> list[int]:
        """d2l's words of a target sentence as output ids, the end token included."""
        return [*self.tgt_vocab.encode(list(words)), self.eos_id]

    def word_pieces(self, words: Sequence[str], target: bool):
        tokens, ids = (self.tgt_vocab if target else self.src_vocab).segment(list(words))
        owner = [0] * len(tokens)
        for w, (a, b) in enumerate(word_spans(tokens)):
            owner[a:b] = [w] * (b - a)
        return ids, owner

    def source_tokens(self, ids: Sequence[int]) -> list[str]:
        return self.src_vocab.decode(ids)

    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        return self.tgt_vocab.decode(ids)

    def target_words(self, ids: Sequence[int]) -> list[str]:
        specials = {self.eos_id, self.start_id, self.pad_id}
        return self.tgt_vocab.words(self.tgt_vocab.decode([i for i in ids if i not in specials]))

    def scored_words(self, ids: Sequence[int]) -> list[str]:
        """Output ids up to the end token as d2l's words (what BLEU compares)."""
        ids = list(ids)
        ids = ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids
        return self.tgt_vocab.words(self.tgt_vocab.decode(ids))

    def target_token_id(self, token: str) -> int:
        return self.tgt_vocab.stoi.get(token, self.unk_id)

    def unknown_target_words(self, text: str) -> list[str]:
        return self.tgt_vocab.unknown(tokenize(text or ""))

    def tokens_key(self) -> object:
        if not self.subword:
            return "words"
        return hash((tuple(self.src_vocab.itos), tuple(self.tgt_vocab.itos)))

    # ------------------------------------------------------------------ decoding

    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        return translate(
            self.model,
            self.src_vocab,
            self.tgt_vocab,
            sentence,
            settings.beam_size,
            settings.alpha,
            settings.max_len,
            settings.topk,
        )

    def force(self, sentence: str, target: str, settings: DecodeSettings) -> Translation:
        return forced_translation(
            self.model, self.src_vocab, self.tgt_vocab, sentence, target, settings.topk
        )

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, max_len: int, target_lang: str | None = None, memory=None):
        out, _, _ = greedy_decode(self.model, src, max_len, scores=False, memory=memory)
        return out  # (B, T)

    def max_output(self, longest: int) -> int:
        """The longest output worth decoding for sources of ``longest`` tokens."""
        return min(MAX_LEN, self.cfg.max_positions - 1)

    def evaluate(self, split, max_sentences: int = 0, target_lang: str | None = None) -> dict:
        return evaluate_split(self.model, self.src_vocab, self.tgt_vocab, split, max_sentences)

    def translate_lines(self, lines: list[str], settings: DecodeSettings):
        outs, warnings, todo = [""] * len(lines), [], {}
        for i, line in enumerate(lines):
            try:
                source = self.source(line)
            except TranslationError as e:
                warnings.append(f"line {i + 1}: {e}")
                continue
            warnings += [f"line {i + 1}: {n}" for n in source.notes]
            todo[i] = self.src_vocab.words(source.tokens[:-1])  # without <eos>, pieces joined
        if settings.beam_size <= 1:
            done = translate_batch(
                self.model,
                self.src_vocab,
                self.tgt_vocab,
                list(todo.values()),
                max_len=settings.max_len,
            )
            for i, words in zip(todo, done):
                outs[i] = " ".join(words)
        else:
            for i in todo:
                outs[i] = self.translate(lines[i], settings).text
        return outs, warnings

    # ------------------------------------------------------------------ passes

    def masks(self, src, tgt_in):
        return self.model.src_mask(src), self.model.tgt_mask(tgt_in)

    def whole_target(self):
        return self.model.whole_target()

    def run(self, src, tgt_in, memory=None, need_weights: bool = False) -> torch.Tensor:
        if memory is None:
            logits, _ = self.model(src, tgt_in, need_weights)
            return logits  # (B, T, V)
        src_mask, tgt_mask = self.masks(src, tgt_in)
        logits, _, _ = self.model.decoder(tgt_in, memory, src_mask, tgt_mask, need_weights)
        return logits  # (B, T, V)

    def encode(self, src) -> torch.Tensor:
        return self.model.encode(src)[0]  # (B, S, D)

    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        src_mask, tgt_mask = self.masks(src, tgt_in)
        memory = self.encode(src) if memory is None else memory
        out, _, _ = self.model.decoder(tgt_in, memory, src_mask, tgt_mask, project=False)
        return out  # (B, T, D)

    def logits_of(self, hidden, weight=None) -> torch.Tensor:
        dense = self.model.decoder.dense
        if weight is None:
            return dense(hidden)  # (..., V)
        return F.linear(hidden.to(weight.dtype), weight, dense.bias)  # (..., V)

    def vocab_sizes(self) -> tuple[int, int]:
        return len(self.src_vocab), len(self.tgt_vocab)

    def output_weight(self) -> torch.Tensor:
        """(V, D) the output layer's weight."""
        return self.model.decoder.dense.weight

    def lens(self, stream) -> torch.Tensor:
        dec = self.model.decoder
        return dec.dense(dec.final_ln(stream))  # (..., V)

    def lens_words(self) -> str:
        return PROJECTED_PRE_LN if self.cfg.norm_first else PROJECTED

    def hook_points(self) -> dict[str, HookPoint]:
        return self.model.hook_points()

    # ------------------------------------------------------------------ structure

    def attention_weights(self, kind: str, layer: int) -> AttentionWeights:
        mha = attention_module(self, kind, layer)
        D, H = self.cfg.d_model, mha.num_heads
        parts = [linear_parts(m) for m in (mha.W_q, mha.W_k, mha.W_v, mha.W_o)]
        return AttentionWeights(*(t for pair in parts for t in pair), H, D // H, (D // H) ** -0.5)

    def sublayer_norm(self, kind: str, layer: int) -> SublayerNorm:
        self.check_layer(kind, layer)
        stack = self.model.encoder.layers if kind == "encoder" else self.model.decoder.layers
        block = stack[layer]
        addnorm = block.addnorm2 if kind == "cross" else block.addnorm1
        return SublayerNorm(self.cfg.norm_first, addnorm.ln)

    def stream_layout(self) -> StreamLayout:
        """The decoder: self-attention, cross-attention and the feed-forward, each in an
        AddNorm; a pre-LN one's final norm."""
        dec = self.model.decoder
        layers = [
            [
                StreamSublayer(
                    "self", layer.addnorm1.ln, f"decoder.{i}.self", layer.self_attention.W_o
                ),
                StreamSublayer(
                    "cross", layer.addnorm2.ln, f"decoder.{i}.cross", layer.cross_attention.W_o
                ),
                StreamSublayer("mlp", layer.addnorm3.ln),
            ]
            for i, layer in enumerate(dec.layers)
        ]
        pre = self.cfg.norm_first
        return StreamLayout(layers, pre, dec.final_ln if pre else None, [dec.dense])
