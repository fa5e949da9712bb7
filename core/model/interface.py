"""One way into every model: what the analysis, the commands and the pages may ask of a model,
whatever its family.

``TranslationModel`` is the interface; ``core.model.studio_model.StudioModel`` (the studio's
own Transformer) and ``core.model.hf_model.HFModel`` (a Hugging Face encoder-decoder) are its
adapters, and ``core.model.opened.open_model`` returns one of them. Everything outside
``core/model`` reads a model only through it:

- what it reads and writes: ``languages`` (codes), ``language_names`` (for people),
  ``source_label``, ``example_sentence``;
- tokens both ways: ``source`` (a sentence as ids, pieces, unknown flags and notes),
  ``target_ids``, ``source_tokens`` / ``target_tokens`` (the studio's convention: ``##``
  continues a word), ``target_words``, ``special_ids``;
- decoding: ``translate`` (greedy or beam, every map), ``force`` (a target the user gave),
  ``greedy`` (many padded sources at once, under whatever hooks are on);
- passes: ``run`` (logits; the encoder's output may be given), ``encode``, ``hidden``,
  ``record`` (one teacher-forced pass with every site, ``core.model.record``; ``patterns``
  and ``stream`` keep only the weights or one stack's stream, for many sentences), the
  embeddings path (``embeddings`` and ``log_probs_from_embeddings``: the exact function of
  the token embeddings that the ids path computes, by hooks on the embedding sites); its
  layers run again from any layer's input, a stream given, up to any later layer
  (``core.model.layer_runs.layer_calls``, TransformerLens's ``start_at_layer`` /
  ``stop_at_layer``: one mechanism for every family);
- hook sites (``hook_points``, ``hooks``: ``core.model.hooks``), and on them removing heads
  (``core.model.head_gates``: ``heads_removed``, ``rows_gated``: each head's output scaled
  before W_o, per thread);
- what the decompositions need: each attention's weights (``attention_weights``) and the
  norm around it (``sublayer_norm``), the output layer (``logits_of``, ``lens``);
- what it cannot do, in one line (``supports``, from ``core.model.capabilities``);
- its module in eval mode for a block (``evaluating()``: dropout off, the mode restored after);
- a one-stack model's whole sequence (``core.model.one_sequence``: its ids, weights, the q·k
  of one layer), which a model of two stacks declines in one line.

Shape key: B batch, S source tokens, T decoder steps, D model width, H heads, Dh head width,
V target vocabulary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress

import torch
from torch import nn

from core.model import capabilities, parts
from core.model.config import ModelConfig
from core.model.head_gates import HeadGates
from core.model.hooks import Hook, HookPoint, StopForward, capture, hooked, replace_with, stop_at
from core.model.one_sequence import OneSequence
from core.model.parts import (
    AttentionWeights,
    DecodeSettings,
    Source,
    SublayerNorm,
    Translation,
    WordPair,
)
from core.model.record import KINDS, Record, attention_site, from_cache, recorded_sites

LANGUAGE_NAMES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish"}


class TranslationModel(HeadGates, OneSequence, ABC):
    """A model as the studio reads it (the adapters: ``StudioModel``, ``HFModel``)."""

    family: str  # "studio" or "hugging face"
    model: nn.Module  # the torch module
    cfg: ModelConfig  # its sizes in the studio's terms (layers, heads, width, positions)
    meta: dict  # what its checkpoint or folder says of it
    subword: bool  # whether its tokenizer cuts words into pieces
    pieces_name: str  # what its pieces are, for people: "BPE", "SentencePiece", "WordPiece"…
    trained_here: bool  # trained by the studio: its corpus, splits and history are known
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

    # ------------------------------------------------------------------ tokens

    start_id: int  # the decoder's first input
    eos_id: int  # the end token
    pad_id: int  # padding
    unk_id: int | None  # the unknown token (None: the tokenizer has none)
    mask_id: int | None = None  # the mask token (None: the tokenizer has none)

    @abstractmethod
    def source(self, sentence: str) -> Source:
        """A sentence as the encoder reads it; TranslationError when it cannot be read."""

    @abstractmethod
    def source_notes(self, words: Sequence[str]) -> list[str]:
        """What a user should know of a source sentence's words (d2l's tokens) beyond the
        translation's own notes: the words a word vocabulary lacks."""

    @abstractmethod
    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        """A target text as the decoder's output ids, the end token included (``first``: the
        language code a multilingual model's output began with)."""

    @abstractmethod
    def source_tokens(self, ids: Sequence[int]) -> list[str]:
        """Source ids as shown tokens."""

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
    def framing(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """(the specials before, the specials after) a sentence; the ones after start with
        the end token."""

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

    @abstractmethod
    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        """Target ids as shown tokens."""

    @abstractmethod
    def target_words(self, ids: Sequence[int]) -> list[str]:
        """Target ids as words (pieces joined, specials left out)."""

    @abstractmethod
    def scored_words(self, ids: Sequence[int]) -> list[str]:
        """Output ids up to the end token as d2l's words: what BLEU compares with the
        corpus's references."""

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
    def special_ids(self) -> set[int]:
        """Ids that belong to no word (the end token, language codes; not the unknown one)."""

    @abstractmethod
    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        """The most tokens (with the end token) the model reads, or writes (``target``), for
        ``text`` (``words``: d2l's tokens of it): what a translation's memory is sized by."""

    def decoder_inputs(self, out_ids: Sequence[int]) -> list[int]:
        """The decoder's inputs for an output: the start token + out_ids[:-1]."""
        return [self.start_id, *list(out_ids)[:-1]]

    # ------------------------------------------------------------------ decoding

    @abstractmethod
    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        """A translation with every map, by the model's own decoding (no input checks)."""

    @abstractmethod
    def force(self, sentence: str, target: str, settings: DecodeSettings) -> Translation:
        """A target the user gave, teacher-forced after the sentence, with every map and each
        token's probability and rank."""

    @abstractmethod
    def greedy(self, src: torch.Tensor, max_len: int, target_lang: str | None = None, memory=None):
        """(B, T) greedy output ids of (B, S) padded sources (the start token left out, each
        row cut nowhere: read up to its end token), under the hooks that are on; ``memory``:
        the (B, S, D) encoder output, given instead of encoding."""

    @abstractmethod
    def max_output(self, longest: int) -> int:
        """The longest output worth decoding for sources of ``longest`` tokens (a head
        removed can make a model repeat itself to the end)."""

    @abstractmethod
    def evaluate(self, split, max_sentences: int = 0, target_lang: str | None = None) -> dict:
        """BLEU of greedy translations (all references, d2l's words), the output's unknown
        share, the mean teacher-forced loss per token and sentences per second on a split."""

    @abstractmethod
    def translate_lines(self, lines: list[str], settings: DecodeSettings):
        """Translations of ``lines`` in order ("" where one cannot be translated), warnings."""

    # ------------------------------------------------------------------ passes

    @abstractmethod
    def masks(self, src: torch.Tensor, tgt_in: torch.Tensor):
        """(src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T)): what each query may attend."""

    @abstractmethod
    def run(self, src, tgt_in, memory=None, need_weights: bool = False) -> torch.Tensor:
        """(B, T, V) logits of a teacher-forced batch (``memory``: the encoder's output,
        given instead of running the encoder); ``need_weights`` computes the attention
        weights (the ``pattern`` sites)."""

    @abstractmethod
    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S, D) the encoder's output."""

    @abstractmethod
    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        """(B, T, D) the decoder's output before the vocabulary projection (``decoder.out``)."""

    @abstractmethod
    def logits_of(self, hidden: torch.Tensor, weight: torch.Tensor | None = None):
        """(..., V) logits of decoder outputs (..., D) as the model makes them (``weight``:
        the projection's weight already cast, for many calls)."""

    @abstractmethod
    def output_weight(self) -> torch.Tensor:
        """(V, D) the output layer's weight (what ``logits_of`` may be given cast)."""

    @abstractmethod
    def lens(self, stream: torch.Tensor) -> torch.Tensor:
        """(..., V) logits of a residual stream (..., D) through what follows the last layer:
        the final norm (if any) and the output layer."""

    @abstractmethod
    def lens_words(self) -> str:
        """What ``lens`` applies, in words."""

    @abstractmethod
    def hook_points(self) -> dict[str, HookPoint]:
        """{site name: hook point} (``core.model.hooks``)."""

    def hooks(self, pairs: Iterable[tuple[str, Hook]]):
        """A context with these (site, hook) pairs on, in this thread."""
        return hooked(self.hook_points(), pairs)

    def record(self, src, tgt_in, out_ids=None) -> Record:
        """One teacher-forced pass of (B, S) sources and (B, T) decoder inputs, every site
        kept (the caller chooses eval mode and gradients; ``out_ids`` the tokens predicted)."""
        cache: dict = {}
        points = self.hook_points()
        sites = [s for s in recorded_sites(*self.depth) if s in points]
        with self.hooks((s, capture(cache)) for s in sites):
            logits = self.run(src, tgt_in, need_weights=True)
        return from_cache(cache, src, tgt_in, self.masks(src, tgt_in), logits, self.depth, out_ids)

    def captured(self, src, tgt_in, sites: Sequence[str]) -> dict[str, torch.Tensor]:
        """Only the named sites of one teacher-forced pass (``record`` keeps every site: a
        caller reading a few of many sentences keeps a fraction of its memory)."""
        cache: dict = {}
        with self.hooks((s, capture(cache)) for s in sites):
            self.run(src, tgt_in, need_weights=True)  # the record's arithmetic, to the bit
        return cache

    def patterns(self, src, tgt_in, kinds: Sequence[str] = KINDS) -> dict[str, torch.Tensor]:
        """{kind: (L, B, H, Tq, Tk)}: the weights of one teacher-forced pass, as ``record``'s."""
        names = {
            k: [f"{attention_site(k, i)}.pattern" for i in range(self.layers(k))] for k in kinds
        }
        cache = self.captured(src, tgt_in, [n for ns in names.values() for n in ns])
        return {k: torch.stack([cache[n] for n in ns]) for k, ns in names.items()}

    def stream(self, src, tgt_in, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): one stack's residual stream in a teacher-forced pass, as
        ``record(...).stream(side)``."""
        last = self.depth[0 if side == "encoder" else 1] - 1
        sites = [*(f"{side}.{i}.in" for i in range(last + 1)), f"{side}.{last}.out"]
        cache = self.captured(src, tgt_in, sites)
        return [cache[s] for s in sites]

    def forced(self, src_ids: Sequence[int], out_ids: Sequence[int]) -> Record:
        """The record of one sentence: ``out_ids`` teacher-forced after ``src_ids``, in eval
        mode; its ``logp`` is each output token's log-probability."""
        src, tgt_in, out = self.forced_batch(src_ids, out_ids)
        with self.evaluating(), torch.no_grad():
            return self.record(src, tgt_in, out)

    def forced_batch(self, src_ids: Sequence[int], out_ids: Sequence[int]):
        """((1, S) source, (1, T) decoder inputs, (1, T) outputs) of one sentence;
        ValueError when there is no output."""
        if not len(out_ids):
            raise ValueError("There is no output to feed the decoder: translate a sentence first.")
        src = torch.tensor([list(src_ids)], device=self.device)  # (1, S)
        tgt_in = torch.tensor([self.decoder_inputs(out_ids)], device=self.device)  # (1, T)
        return src, tgt_in, torch.tensor([list(out_ids)], device=self.device)  # (1, T)

    @property
    def depth(self) -> tuple[int, int]:
        """(encoder layers, decoder layers)."""
        return self.cfg.num_encoder_layers, self.cfg.num_decoder_layers

    # ------------------------------------------------------------------ embeddings path

    @torch.no_grad()
    def embeddings(self, src, tgt_in) -> tuple[torch.Tensor, torch.Tensor]:
        """((B, S, D), (B, T, D)) the token embeddings the stacks read (the embedding
        modules' outputs: a √D scale the model applies after them is not in them)."""
        seen: dict = {}
        pairs = [("encoder.embed", capture(seen)), ("decoder.embed", stop_at(seen))]
        with self.hooks(pairs), suppress(StopForward):
            self.run(src, tgt_in)
        return seen["encoder.embed"], seen["decoder.embed"]

    def log_probs_from_embeddings(self, src, tgt_in, src_emb, tgt_emb) -> torch.Tensor:
        """(B, T, V) log-probabilities with the token embeddings (B, S, D), (B, T, D) put in
        place of the ids' own (``src``/``tgt_in`` (1, .) or (B, .) ids, for positions and
        masks): exactly the function the ids path computes, whatever the family scales."""
        B = src_emb.size(0)
        src, tgt_in = src.expand(B, -1), tgt_in.expand(B, -1)
        pairs = [("encoder.embed", replace_with(src_emb)), ("decoder.embed", replace_with(tgt_emb))]
        with self.hooks(pairs):
            return self.run(src, tgt_in).float().log_softmax(-1)

    @abstractmethod
    def vocab_sizes(self) -> tuple[int, int]:
        """(source, target) ids the embeddings accept: 0 .. n - 1 on each side."""

    def log_probs_at(self, src, tgt_in, src_emb, tgt_emb, steps) -> torch.Tensor:
        """(B, P, V) log-probabilities at P chosen steps of every row, with the token
        embeddings (B, S, D), (B, T, D) put in place as ``log_probs_from_embeddings`` does (its
        (B, T, V) at those steps, without projecting the other steps onto the vocabulary;
        ``tgt_in`` and ``tgt_emb`` may stop after the last step asked, as a causal decoder's
        later steps change none of the earlier ones)."""
        B = src_emb.size(0)
        src, tgt_in = src.expand(B, -1), tgt_in.expand(B, -1)
        pairs = [("encoder.embed", replace_with(src_emb)), ("decoder.embed", replace_with(tgt_emb))]
        with self.hooks(pairs):
            hidden = self.hidden(src, tgt_in)  # (B, T, D)
        return self.logits_of(hidden[:, steps]).float().log_softmax(-1)  # (B, P, V)

    # ------------------------------------------------------------------ heads (HeadGates)

    @contextmanager
    def whole_target(self):
        """Within the block, in this thread, teacher-forced passes let every decoder position
        see the whole target (Garg et al.'s full-context reading of a head trained to align);
        ValueError for a model that reads causal passes only."""
        raise ValueError("Reading with the whole target visible: the studio's own models only.")
        yield  # pragma: no cover

    # ------------------------------------------------------------------ structure

    @abstractmethod
    def attention_weights(self, kind: str, layer: int) -> AttentionWeights:
        """One attention module's projections (ValueError for a layer it does not have)."""

    @abstractmethod
    def sublayer_norm(self, kind: str, layer: int) -> SublayerNorm:
        """The norm around one attention sub-layer."""

    def check_layer(self, kind: str, layer: int) -> None:
        """ValueError in words for a kind or layer this model does not have."""
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; use {', '.join(KINDS)}")
        n = self.layers(kind)
        if not 0 <= layer < n:
            side = "encoder" if kind == "encoder" else "decoder"
            raise ValueError(f"Layer {layer}: this model has {n} {side} layers (0..{n - 1}).")
