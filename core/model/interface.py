"""One way into every model: what the analysis, the commands and the pages may ask of a model,
whatever its family, and the few methods an adapter must implement to be asked.

``TranslationModel`` is the interface; ``core.model.studio_model.StudioModel`` (the studio's
own Transformer), ``core.model.hf_model.HFModel`` (a Hugging Face encoder-decoder),
``core.model.prompted.PromptedModel`` (a decoder-only model) and ``core.model.masked.MaskedModel``
(a masked one) are its adapters, and ``core.model.opened.open_model`` returns one of them.
Everything outside ``core/model`` reads a model only through it.

What an adapter implements, and nothing else (``abstractmethod``, listed first in the class):
its tokens (``source``, ``target_ids``, ``words_to_source`` / ``words_to_target``,
``word_pieces``, ``target_tokens``, ``target_words``, ``target_token_id``,
``unknown_target_words``, ``tokens_key``, ``token_count``, ``vocab_sizes``), its decoding
(``translate``), its pass (``hidden``, ``logits_of``, ``output_weight``, ``hook_points``,
``lens_words``) and its attention's parts (``attention_weights``, ``sublayer_norm``).

What the door derives from them, once: the source's shown tokens, its framing and notes, the
words BLEU scores, the special ids, the logits of a pass (``run``), the logit lens (``lens``),
the masks, many lines translated (``translate_lines``), the
longest output worth decoding, a sentence pair in pieces (``word_pair``), a prompted model's
template positions (``prompt_positions``, beside the class), a one-stack model's weights over
ids of its own (``token_weights``, beside it), the record and the
embeddings path (``core.model.passes``), removing heads (``core.model.head_gates``) and a
one-stack model's questions (``core.model.one_sequence``), declined by a model of two stacks.
An adapter overrides a derived method where its model computes it otherwise (the studio's own
decoding batches many lines; a model with a final norm has it in its lens); what a kind of
model cannot do (``encode`` without an encoder, ``greedy`` and ``force`` without a decoder) the
door refuses in one line, and ``supports`` (``core.model.capabilities``) says before. What one
step's stream passes through (``stream_layout``) each adapter says of its own modules; the
door refuses it for a model that does not.

Shape key: B batch, S source tokens, T decoder steps, D model width, H heads, Dh head width,
V target vocabulary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, contextmanager

import torch
from torch import nn

from core.corpus.text import tokenize
from core.model import capabilities, parts
from core.model.config import ModelConfig
from core.model.head_gates import HeadGates
from core.model.hooks import HookPoint
from core.model.one_sequence import OneSequence
from core.model.parts import (
    MAX_LEN,
    AttentionWeights,
    DecodeSettings,
    Source,
    StreamLayout,
    StreamTermsError,
    SublayerNorm,
    Translation,
    TranslationError,
    WordPair,
)
from core.model.passes import Passes
from core.model.record import KINDS

LANGUAGE_NAMES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish"}
NO_ENCODER = "This model has no encoder: it reads its source in its one sequence."
NO_DECODER = "This model writes no output step by step: it has no decoder to decode with."
NO_SCORE = "This model writes no translation of its own: it has no translation to score."
NO_FORCE = "This model writes no translation of its own: it has no translation to rate."


class TranslationModel(Passes, HeadGates, OneSequence, ABC):
    """A model as the studio reads it (the adapters: ``StudioModel``, ``HFModel``,
    ``PromptedModel``, ``MaskedModel``)."""

    family: str  # "studio" or "hugging face"
    model: nn.Module  # the torch module
    cfg: ModelConfig  # its sizes in the studio's terms (layers, heads, width, positions)
    meta: dict  # what its checkpoint or folder says of it
    subword: bool  # whether its tokenizer cuts words into pieces
    pieces_name: str  # what its pieces are, for people: "BPE", "SentencePiece", "WordPiece"…
    source_label: str  # the sentence box's label ("English sentence", "Source sentence (en)")
    target_name: str  # the target language as a box names it ("French", "fr")
    example_sentence: str = "i'm home ."  # what the sentence box shows before a user types
    reads_prompt: bool = False  # a decoder-only model translating by a prompt template
    output_label: str = "Translation"  # what its output is called on the pages

    # ------------------------------------------------------------------ what it is

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language names, or ("source", "target") when unknown."""
        return self.meta.get("source_lang") or "source", self.meta.get("target_lang") or "target"

    @property
    def device(self) -> torch.device:
        """Where its weights are."""
        return next(self.model.parameters()).device

    def evaluating(self) -> AbstractContextManager[nn.Module]:
        """Its torch module in eval mode inside the block (dropout off), its mode restored
        after, always; gradients are left as they are (the gradient methods need them)."""
        return parts.evaluating(self.model)

    @property
    def model_type(self) -> str:
        """Its architecture's name ("studio", or a Hugging Face ``model_type``)."""
        return self.meta.get("model_type", self.family)

    @property
    def language_names(self) -> tuple[str, str]:
        """(source, target) languages as people name them: "English", "French"; a code
        without a name stays a code ("de"); English and French where the model does not say
        (the studio's own direction, and what every view assumed before)."""
        src, tgt = self.languages
        if (src, tgt) == ("source", "target"):
            return "English", "French"
        return LANGUAGE_NAMES.get(src, src), LANGUAGE_NAMES.get(tgt, tgt)

    def with_prompt(self, template: str) -> TranslationModel:
        """This model reading ``template`` (a prompted language model's; ``core.model.prompt``);
        a model that reads no prompt is itself."""
        return self

    @property
    def view_key(self) -> str:
        """What, beside its file, sets what this model computes: "" unless it reads a
        prompt (its template's hash then); results cached per model file add it."""
        return ""

    def supports(self, what: str) -> str | None:
        """Why this model cannot do ``what`` (a section, method or setting), in one line;
        None when it can."""
        return capabilities.problem(self.family, self.model_type, what, self.meta.get("task", ""))

    def layers(self, kind: str) -> int:
        """How many layers hold attention of ``kind``."""
        enc = kind in ("encoder", "encoder_stream")
        return self.cfg.num_encoder_layers if enc else self.cfg.num_decoder_layers

    start_id: int  # the decoder's first input
    eos_id: int  # the end token
    pad_id: int  # padding
    unk_id: int | None  # the unknown token (None: the tokenizer has none)
    mask_id: int | None = None  # the mask token (None: the tokenizer has none)

    # ------------------------------------------------------------------ what an adapter implements

    @abstractmethod
    def source(self, sentence: str) -> Source:
        """A sentence as the encoder reads it; TranslationError when it cannot be read."""

    @abstractmethod
    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        """A target text as the decoder's output ids, the end token included (``first``: the
        language code a multilingual model's output began with)."""

    @abstractmethod
    def words_to_source(self, words: Sequence[str]) -> list[int]:
        """A source sentence written in d2l's words ("i'm home .") as ids, specials included."""

    @abstractmethod
    def words_to_target(self, words: Sequence[str], target_lang: str | None = None) -> list[int]:
        """A target sentence in d2l's words as output ids, the end token (and a multilingual
        model's ``target_lang`` code first) included."""

    @abstractmethod
    def word_pieces(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """(piece ids, the word index of each piece) of pre-tokenized words, no specials."""

    @abstractmethod
    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        """Target ids as shown tokens (the studio's convention: ``##`` continues a word)."""

    @abstractmethod
    def target_words(self, ids: Sequence[int]) -> list[str]:
        """Target ids as words (pieces joined, specials left out)."""

    @abstractmethod
    def target_token_id(self, token: str) -> int:
        """The id of a target token as ``target_tokens`` shows it (the unknown id if none)."""

    @abstractmethod
    def unknown_target_words(self, text: str) -> list[str]:
        """Words of ``text`` the model reads (partly) as its unknown token."""

    @abstractmethod
    def tokens_key(self) -> object:
        """Equal for two models exactly when they cut every sentence into the same pieces
        (word-level models share the words, whatever their vocabularies)."""

    @abstractmethod
    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        """The most tokens (with the end token) the model reads, or writes (``target``), for
        ``text`` (``words``: d2l's tokens of it): what a translation's memory is sized by."""

    @abstractmethod
    def vocab_sizes(self) -> tuple[int, int]:
        """(source, target) ids the embeddings accept: 0 .. n - 1 on each side."""

    @abstractmethod
    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        """A translation with every map, by the model's own decoding (no input checks)."""

    @abstractmethod
    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        """(B, T, D) the decoder's output before the vocabulary projection (``decoder.out``);
        ``memory``: the (B, S, D) encoder output, given instead of encoding."""

    @abstractmethod
    def logits_of(self, hidden: torch.Tensor, weight: torch.Tensor | None = None):
        """(..., V) logits of decoder outputs (..., D) as the model makes them (``weight``:
        the projection's weight already cast, for many calls)."""

    @abstractmethod
    def output_weight(self) -> torch.Tensor:
        """(V, D) the output layer's weight (what ``logits_of`` may be given cast)."""

    @abstractmethod
    def lens_words(self) -> str:
        """What ``lens`` applies, in words."""

    @abstractmethod
    def hook_points(self) -> dict[str, HookPoint]:
        """{site name: hook point} (``core.model.hooks``)."""

    @abstractmethod
    def attention_weights(self, kind: str, layer: int) -> AttentionWeights:
        """One attention module's projections (ValueError for a layer it does not have)."""

    @abstractmethod
    def sublayer_norm(self, kind: str, layer: int) -> SublayerNorm:
        """The norm around one attention sub-layer."""

    # ------------------------------------------------------------------ tokens (derived)

    def source_tokens(self, ids: Sequence[int]) -> list[str]:
        """Source ids as shown tokens: as ``target_tokens`` shows them, for a model of one
        vocabulary."""
        return self.target_tokens(ids)

    def source_notes(self, words: Sequence[str]) -> list[str]:
        """What a user should know of a source sentence's words (d2l's tokens) beyond the
        translation's own notes: the words a word vocabulary lacks (none for a tokenizer)."""
        return []

    def framing(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """(the specials before, the specials after) a sentence; the ones after start with
        the end token (nothing before, the end token after, where a model adds no others)."""
        return [], [self.eos_id]

    def scored_words(self, ids: Sequence[int]) -> list[str]:
        """Output ids up to the end token as d2l's words: what BLEU compares with the
        corpus's references."""
        ids = list(ids)
        ids = ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids
        return tokenize(" ".join(self.target_words(ids)))

    def special_ids(self) -> set[int]:
        """Ids that belong to no word (the end token, language codes; not the unknown one)."""
        return {self.eos_id, self.start_id, self.pad_id}

    def language_codes(self) -> list[str]:
        """A multilingual model's target language codes (none for one target language)."""
        return list(self.meta.get("language_codes") or [])

    def language_code(self, language: str = "fr") -> str | None:
        """A multilingual model's code for ``language`` (``__fr__``, ``fra_Latn``); None for
        a model of one target language."""
        return None

    def language_id(self, code: str | None) -> int | None:
        """The id forced as the first output for a language code (None: nothing forced)."""
        return None

    def word_pair(self, src_words: Sequence[str], tgt_words: Sequence[str]) -> WordPair:
        """A pair of pre-tokenized sentences as the model reads them, each piece knowing its
        word (a gold alignment's pair; a multilingual model's French code forced first)."""
        s_ids, s_owner = self.word_pieces(src_words, target=False)
        t_ids, t_owner = self.word_pieces(tgt_words, target=True)
        s_pre, s_post = self.framing(src_words, target=False)
        t_pre, t_post = self.framing(tgt_words, target=True)
        first = self.language_id(self.language_code("fr"))
        t_pre = ([first] if first is not None and t_pre[:1] != [first] else []) + t_pre
        return WordPair(
            s_pre + s_ids + s_post,
            t_pre + t_ids + t_post[:1],
            s_owner,
            t_owner,
            len(s_pre),
            len(t_pre),
        )

    def decoder_inputs(self, out_ids: Sequence[int]) -> list[int]:
        """The decoder's inputs for an output: the start token + out_ids[:-1]."""
        return [self.start_id, *list(out_ids)[:-1]]

    # ------------------------------------------------------------------ decoding (derived)

    def force(self, sentence: str, target: str, settings: DecodeSettings) -> Translation:
        """A target the user gave, teacher-forced after the sentence, with every map and each
        token's probability and rank (TranslationError for a model that writes none)."""
        raise TranslationError(NO_FORCE)

    def greedy(self, src: torch.Tensor, max_len: int, target_lang: str | None = None, memory=None):
        """(B, T) greedy output ids of (B, S) padded sources (the start token left out, each
        row cut nowhere: read up to its end token), under the hooks that are on; ``memory``:
        the (B, S, D) encoder output, given instead of encoding (ValueError for a model that
        writes no output step by step)."""
        raise ValueError(NO_DECODER)

    def max_output(self, longest: int) -> int:
        """The longest output worth decoding for sources of ``longest`` tokens (a head
        removed can make a model repeat itself to the end): 1.5x plus 5 (French runs about
        1.2x English in pieces), at most MAX_LEN; a trained model stops well before."""
        return min(MAX_LEN, longest + longest // 2 + 5, self.cfg.max_positions - 1)

    def evaluate(self, split, max_sentences: int = 0, target_lang: str | None = None) -> dict:
        """BLEU of greedy translations (all references, d2l's words), the output's unknown
        share, the mean teacher-forced loss per token and sentences per second on a split
        (ValueError for a model that writes no translation to score)."""
        raise ValueError(NO_SCORE)

    def translate_lines(self, lines: list[str], settings: DecodeSettings):
        """Translations of ``lines`` in order ("" where one cannot be translated), warnings."""
        outs, notes = [""] * len(lines), []
        for i, line in enumerate(lines):
            try:
                t = self.translate(line, settings)
            except TranslationError as e:
                notes.append(f"line {i + 1}: {e}")
                continue
            outs[i] = t.text
            notes += [f"line {i + 1}: {w}" for w in t.warnings]
        return outs, notes

    # ------------------------------------------------------------------ passes (derived)

    def masks(self, src: torch.Tensor, tgt_in: torch.Tensor):
        """(src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T)): what each query may attend (the
        source's real tokens; each decoder step, itself and the steps before)."""
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
        return (src != self.pad_id)[:, None, None, :], causal.expand(tgt_in.size(0), 1, T, T)

    def run(self, src, tgt_in, memory=None, need_weights: bool = False) -> torch.Tensor:
        """(B, T, V) logits of a teacher-forced batch (``memory``: the encoder's output,
        given instead of running the encoder; ``need_weights`` computes the attention weights
        (the ``pattern`` sites), where a model computes them only when asked)."""
        return self.logits_of(self.hidden(src, tgt_in, memory))  # (B, T, V)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S, D) the encoder's output (ValueError for a model without one)."""
        raise ValueError(NO_ENCODER)

    def lens(self, stream: torch.Tensor) -> torch.Tensor:
        """(..., V) logits of a residual stream (..., D) through what follows the last layer:
        the final norm (where a model has one: it overrides this) and the output layer."""
        return self.logits_of(stream)

    @property
    def depth(self) -> tuple[int, int]:
        """(encoder layers, decoder layers)."""
        return self.cfg.num_encoder_layers, self.cfg.num_decoder_layers

    # ------------------------------------------------------------------ heads (HeadGates)

    @contextmanager
    def whole_target(self):
        """Within the block, in this thread, teacher-forced passes let every decoder position
        see the whole target (Garg et al.'s full-context reading of a head trained to align);
        ValueError for a model that reads causal passes only."""
        raise ValueError("Reading with the whole target visible: the studio's own models only.")
        yield  # pragma: no cover

    # ------------------------------------------------------------------ structure

    def stream_layout(self) -> StreamLayout:
        """What one output step's stream passes through, layer by layer: each sub-layer's norm,
        hook site and output projection, the final norm and the output layer's modules (what
        ``core.model.stream_terms`` takes apart); an adapter whose stream can be taken apart
        says, the door refuses for any other (StreamTermsError)."""
        raise StreamTermsError("This model does not say what its stream passes through.")

    def check_layer(self, kind: str, layer: int) -> None:
        """ValueError in words for a kind or layer this model does not have."""
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; use {', '.join(KINDS)}")
        n = self.layers(kind)
        if not 0 <= layer < n:
            side = "encoder" if kind == "encoder" else "decoder"
            raise ValueError(f"Layer {layer}: this model has {n} {side} layers (0..{n - 1}).")


def prompt_positions(m: TranslationModel) -> int | None:
    """P: the positions a prompted decoder-only model's pass reads besides a source and its
    decoder inputs (its template's tokens, ``sequence_spans`` of no source and no output);
    None for a model that reads no prompt."""
    if not m.reads_prompt:
        return None
    return m.sequence_spans(0, 0)[1].stop


def known_token_id(m: TranslationModel, token: str) -> int | None:
    """The id of a target token as ``target_tokens`` shows it; None when the model reads it as
    its stand-in for a token it lacks (its unknown token; its end token where it has no unknown
    token) without that being the token asked for."""
    tid = m.target_token_id(token)
    stand_in = m.unk_id if m.unk_id is not None else m.eos_id
    return None if tid == stand_in and token not in m.target_tokens([tid]) else tid


def token_weights(m: TranslationModel, ids: Sequence[int]) -> torch.Tensor:
    """(L, H, N, N) every head's weights over a sequence of the model's own ids read alone, no
    prompt around them (head roles' random tokens read twice), by its own forward, no gradient
    kept; ValueError for a model of two stacks, which reads a source and an output instead
    (``core.model.kind_weights.twice_weights`` reads each of its stacks)."""
    with torch.no_grad():
        return m.sequence_patterns(ids)  # (L, H, N, N)
