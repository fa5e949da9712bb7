"""What the three Hugging Face adapters (``HFModel``, ``PromptedModel``, ``MaskedModel``) share:
a model and its tokenizer, read by the tokenizer, the family's row of the table and its hook
sites; a mixin that is no adapter itself (as inseq's ``HuggingfaceModel`` is to its
encoder-decoder and decoder-only models).

``HFBase`` holds the fields, the tokens as its tokenizer cuts them (a sentence with the
tokenizer's own specials around it, as an encoder or a masked model reads it: a decoder-only
model overrides those it reads in its prompt), the vocabulary's ids, the output layer's
weight and BLEU on a split by batched greedy decoding; each adapter adds what its kind computes.
``OneAttention`` adds what the two one-stack adapters share: their one attention per layer.

Shape key: V vocabulary, D model width.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from core.corpus.bpe import LONE_START, PREFIX
from core.model import batched, lm_heads, sites
from core.model import hugging_face as hf
from core.model.architectures import Architecture, architecture_of, part
from core.model.bleu import corpus_bleu
from core.model.config import ModelConfig
from core.model.hooks import HookPoint
from core.model.parts import AttentionWeights, Source, StreamLayout, StreamSublayer, SublayerNorm
from core.model.record import attention_site

ATTENTION_WORDS = {"decoder_self": "self", "cross": "cross"}  # a stream sub-layer's attention


def as_text(words: Sequence[str]) -> str:
    """d2l's words back to a sentence: no space before , . ! ? and a capital first letter."""
    text = re.sub(r" ([,.!?])", r"\1", " ".join(words))
    return text[:1].upper() + text[1:]


@dataclass
class HFBase:
    """A Hugging Face model and its tokenizer: what every Hugging Face adapter reads alike."""

    model: nn.Module  # the transformers model, eager attention, eval mode
    tokenizer: object  # its AutoTokenizer
    cfg: ModelConfig  # its sizes in the studio's terms (for budgets and head pickers)
    meta: dict = field(default_factory=dict)  # family, model type, languages, parameters
    subword = True  # its tokenizer cuts words into pieces

    @property
    def pieces_name(self) -> str:
        """The tokenizer's algorithm as people name it ("SentencePiece", "BPE"…)."""
        return self.meta.get("pieces") or "subword"

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else (self.model.config.pad_token_id or 0))

    @property
    def unk_id(self) -> int | None:
        return self.tokenizer.unk_token_id

    @property
    def mask_id(self) -> int | None:
        return self.tokenizer.mask_token_id

    def vocab_sizes(self) -> tuple[int, int]:
        n = self.model.get_input_embeddings().num_embeddings
        return n, n

    @property
    def _architecture(self) -> Architecture:
        """Its family's row of the table (``core.model.architectures``)."""
        return architecture_of(self.model)

    def output_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight

    def hook_points(self) -> dict[str, HookPoint]:
        return sites.install(self.model, self._architecture)

    def stream_layout(self) -> StreamLayout:
        """Its decoder (or one stack), from its row of the table: each attention's norm, site
        and output projection, the feed-forward's norm, the final norm and the output head's
        leaf modules."""
        row = self._architecture
        side = None if len(row.stacks) == 1 else "decoder"
        stack = row.stack(side)
        kinds = ("decoder_self", "cross") if stack.cross_attention else ("decoder_self",)
        module = sites.stack(self.model, side)
        layers = []
        for i, layer in enumerate(sites.layers_of(module)):
            subs = [
                StreamSublayer(
                    ATTENTION_WORDS[kind],
                    sites.sublayer_norm(layer, kind),
                    attention_site(kind, i),
                    sites.output_projection_of(layer, kind),
                )
                for kind in kinds
            ]
            layers.append([*subs, StreamSublayer("mlp", part(layer, stack.mlp_norm))])
        final = part(module, stack.final_norm) if stack.final_norm else None
        leaves = [x for x in row.output_head(self.model).modules() if not list(x.children())]
        return StreamLayout(layers, row.norm == "pre", final, leaves)

    def evaluate(self, split, max_sentences: int = 0, target_lang: str | None = None) -> dict:
        """As the studio's models are evaluated (``core.model.scores.evaluate_split``), by
        batched greedy decoding and forced passes (``core.model.batched``): the unknown share
        counted in output pieces, the loss per piece."""
        groups = split.groups()
        groups = groups[: max_sentences or len(groups)]
        sources = [self.words_to_source(src) for src, _ in groups]
        pairs = [
            (s, self.words_to_target(ref, target_lang))
            for s, (_, refs) in zip(sources, groups)
            for ref in refs
        ]
        start = time.perf_counter()
        outputs = batched.greedy_outputs(self, sources, target_lang)
        seconds = time.perf_counter() - start
        ended = [row[: row.index(self.eos_id)] if self.eos_id in row else row for row in outputs]
        pieces = [i for row in ended for i in row if i != self.pad_id]
        return {
            "bleu": corpus_bleu(
                [self.scored_words(row) for row in outputs], [r for _, r in groups]
            ),
            "unk_share": sum(i == self.unk_id for i in pieces) / max(len(pieces), 1),
            "loss": batched.mean_loss(self, pairs),
            "sentences": len(groups),
            "sentences_per_s": len(groups) / max(seconds, 1e-9),
        }

    # ------------------------------------------------------------------ tokens

    def source(self, sentence: str) -> Source:
        ids = hf.encode_source(self, sentence)[0].tolist()
        unknown = [i == self.unk_id for i in ids]
        notes = ["Some words are not in the model's vocabulary (read as unknown)."]
        return Source(ids, self.source_tokens(ids), unknown, notes if any(unknown) else [])

    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        kind = {"text_target": text} if target else {"text": text}
        limit = self.cfg.max_positions
        ids = self.tokenizer(**kind, truncation=True, max_length=limit)["input_ids"]
        return len(ids) + (1 if target else 0)  # a multilingual model's language code

    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        ids = hf.target_ids(self, text, None)
        codes = set(self.tokenizer.convert_tokens_to_ids(self.meta.get("language_codes", [])))
        if first is not None and first in codes and ids[:1] != [first]:
            ids = [first, *ids][: self.cfg.max_positions - 1]
        return ids

    def words_to_source(self, words: Sequence[str]) -> list[int]:
        limit = self.cfg.max_positions
        return self.tokenizer(as_text(words), truncation=True, max_length=limit)["input_ids"]

    def words_to_target(self, words: Sequence[str], target_lang=None) -> list[int]:
        return hf.target_ids(self, as_text(words), target_lang)

    def word_pieces(self, words: Sequence[str], target: bool):
        """(piece ids, the word of each piece) of pre-tokenized words: each word cut alone
        (with the leading space a byte-level BPE expects), no specials."""
        ids, owner = [], []
        spaced = self.meta.get("tokens") == "byte-level"
        for i, word in enumerate(words):
            text = f" {word}" if spaced and i else word
            kwargs = {"text_target": text} if target else {"text": text}
            encoded = self.tokenizer(**kwargs, add_special_tokens=False)["input_ids"]
            ids += encoded
            owner += [i] * len(encoded)
        return ids, owner

    def framing(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """(the specials before, the specials after) the tokenizer puts around a sentence;
        the ones after always start with the end token."""
        text = " ".join(words)
        kwargs = {"text_target": text} if target else {"text": text}
        whole = self.tokenizer(**kwargs)["input_ids"]
        bare = self.tokenizer(**kwargs, add_special_tokens=False)["input_ids"]
        lead = next(
            (i for i in range(len(whole) - len(bare) + 1) if whole[i : i + len(bare)] == bare), 0
        )
        prefix, suffix = whole[:lead], whole[lead + len(bare) :]
        if not suffix or suffix[0] != self.eos_id:
            suffix = [self.eos_id, *suffix]
        return prefix, suffix

    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        return hf.shown_tokens(self, ids)

    def target_words(self, ids: Sequence[int]) -> list[str]:
        return hf.words_of(self, ids)

    def target_token_id(self, token: str) -> int:
        marked = [mark + token for mark in hf.WORD_STARTS]  # shown without its word-start mark
        if self.meta.get("tokens", "pieces") == "pieces":  # shown as the tokenizer writes it
            raw = [token, *marked]
        elif token == LONE_START:  # the mark alone
            raw = list(hf.WORD_STARTS)
        elif token.startswith(PREFIX):  # a piece continuing a word
            raw = [token[len(PREFIX) :]]
        else:  # a word's first piece before its continuing twin ('s' is '▁s', '##s' is 's')
            raw = [*marked, token]
        unk = self.unk_id
        for candidate in raw:
            tid = self.tokenizer.convert_tokens_to_ids(candidate)
            if tid is not None and tid != unk:
                return int(tid)
        return int(unk if unk is not None else self.eos_id)

    def unknown_target_words(self, text: str) -> list[str]:
        return hf.unknown_target_words(self, text)

    def tokens_key(self) -> object:
        return ("tokenizer", id(self.tokenizer))  # its own tokenizer, its own specials

    def special_ids(self) -> set[int]:
        return set(self.tokenizer.all_special_ids) - {self.unk_id}

    def language_code(self, language: str = "fr") -> str | None:
        codes = self.meta.get("language_codes") or []
        starts = (language, {"fr": "fra", "en": "eng", "de": "deu"}.get(language, language))
        return next((c for c in codes if c.strip("_<>").lower().startswith(starts)), None)

    def language_id(self, code: str | None) -> int | None:
        return hf.forced_bos(self, code)


class OneAttention:
    """A one-stack Hugging Face model's one attention per layer (``PromptedModel``,
    ``MaskedModel``): every kind is a block of it, so its heads are gated at its one site and
    its projections and norm are the same whatever the kind."""

    def gate_site(self, kind: str, layer: int) -> str:
        return f"decoder.{layer}.self.z"  # its one attention's heads (``sites``' names)

    def attention_weights(self, kind: str, layer: int) -> AttentionWeights:
        self.check_layer(kind, layer)
        return lm_heads.attention_weights(self.model, layer)  # its one attention, any kind

    def sublayer_norm(self, kind: str, layer: int) -> SublayerNorm:
        self.check_layer(kind, layer)
        return lm_heads.sublayer_norm(self.model, layer)
