"""A decoder-only language model (GPT-2, Llama, Qwen2, Mistral, Gemma) behind the one
interface (``core.model.interface``), translating by a prompt (``core.model.prompt``).

``PromptedModel`` reads a sentence into its template's English span, continues the prompt
greedily to the end of the line, and answers every question the interface asks in the
encoder-decoder's terms: the "source" is the English span, the "decoder inputs" the last
template id and the output before each step, and the three kinds of attention are the three
blocks of each layer's one causal self-attention (``prompt.blocks``). A batch runs whole
sequences, each row's source left-padded (attention mask and positions skip the padding, so
a row reads as it would alone and every row's decoder inputs sit at the last positions), and
the interface's answers are cut from it: logits and the residual stream at the decoder inputs
(``decoder``) or the source (``encoder``), the blocks of the weights; the hook sites are
placed the same way (``sites``). The tokens are the tokenizer's
(``core.model.hugging_face``), as for ``HFModel``: both share ``core.model.hf_base``.

Its ``record`` keeps the whole sequence of one pass (``Record.one_stack``: each layer's one
attention and output), and ``attention_weights`` and ``sublayer_norm`` give its one
attention's projections and norm, so rollout, norm-based, ALTI+ and value zeroing read it as
they read every family (``core.attribution``). What it does not do yet: decoding by beam
search (greedy decoding is shown, with a note that says so).

Shape key: B batch, S source pieces, T decoder steps, N prompt + output ids, L layers, H heads,
D model width, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import nn

from core.model import hugging_face as hf
from core.model import lm_heads, lm_sites, sites
from core.model.architectures import architecture_of, softcap
from core.model.capabilities import LANGUAGE_MODEL, NO_PROMPT, TRAINED_PROMPT
from core.model.hf_base import HFBase, OneAttention, as_text
from core.model.hooks import capture
from core.model.interface import TranslationModel
from core.model.one_sequence import unpadded, without_padding
from core.model.parts import (
    DEFAULT_LANGUAGES,
    DEFAULT_TEMPLATE,
    DecodeSettings,
    SequenceHeads,
    Source,
    Translation,
    TranslationError,
)
from core.model.prompt import (
    TRAINED_LAYOUT,
    Pass,
    PromptLayout,
    layout_of,
)
from core.model.prompt import template_problem as _template_problem
from core.model.prompted_decoding import continue_prompts, decode_with_maps, translation
from core.model.record import Record, one_stack_of, one_stack_record, one_stack_sites

NEWLINE, TAB = "Ċ", "ĉ"  # byte-level BPE's characters for "\n" and "\t" (GPT-2's byte map)
LINE_END = "⏎"  # a new line as shown (a boundary token: core.attention.kinds)


@dataclass
class PromptedModel(OneAttention, HFBase, TranslationModel):
    """A decoder-only model and its tokenizer, translating by ``template``."""

    template: str = DEFAULT_TEMPLATE  # the prompt: any text holding {src} once
    ends: frozenset = field(default_factory=frozenset)  # ids that end the line (and the text)
    family = LANGUAGE_MODEL
    reads_prompt = True
    one_sequence = True
    loss_words = (
        "A language model is measured by the loss of each sentence's first reference after "
        "its prompt (its prompted translations with every head removed would take four "
        "times as long)"
    )
    kinds_words = (
        "A decoder-only model has one causal attention per layer. Read as an encoder-decoder: "
        "**encoder** = the sentence's tokens over the sentence (causal: the upper triangle is "
        "0), **decoder self** = the output's steps over the output, **cross** = the output's "
        "steps over the sentence. A row need not sum to 1: the rest of its weight is on the "
        "template's other tokens (often the first one)."
    )

    # ------------------------------------------------------------------ what it is

    def with_prompt(self, template: str) -> PromptedModel:
        """The same model (its modules shared) reading ``template`` ("" = the default);
        TranslationError in one line for a template that cannot make a prompt."""
        template = template or DEFAULT_TEMPLATE
        if problem := _template_problem(template):
            raise TranslationError(problem)
        if template == self.template:
            return self
        if not self.layout.reads_source:
            raise TranslationError(NO_PROMPT)
        if self.meta.get("layout") == TRAINED_LAYOUT:
            raise TranslationError(TRAINED_PROMPT)
        other = dataclasses.replace(self, template=template)
        other.layout  # noqa: B018 - cut now: TranslationError for too little after {src}
        return other

    @property
    def view_key(self) -> str:
        return "prompt:" + hashlib.sha1(self.template.encode("utf-8")).hexdigest()[:16]

    @property
    def languages(self) -> tuple[str, str]:
        return DEFAULT_LANGUAGES if self.template == DEFAULT_TEMPLATE else ("source", "target")

    @property
    def source_label(self) -> str:
        return "English sentence (read into the prompt)"

    @property
    def target_name(self) -> str:
        return "French"

    @cached_property
    def layout(self) -> PromptLayout:
        """The ids this model's template puts around a source (``prompt.layout_of``)."""
        return layout_of(self.tokenizer, self.template, self.meta)

    @property
    def start_id(self) -> int:
        return self.layout.after[-1]

    @cached_property
    def eos_id(self) -> int:
        """The new line as it follows a word (what ends a translation), else the end of text."""
        last = self.tokenizer("a\n", add_special_tokens=False)["input_ids"][-1]
        ends_line = "\n" in self.tokenizer.decode([last])
        return int(last if ends_line else self.tokenizer.eos_token_id)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else self.tokenizer.eos_token_id
        return int(pad if pad is not None else 0)

    def layers(self, kind: str) -> int:
        return self.cfg.num_decoder_layers

    @property
    def depth(self) -> tuple[int, int]:
        return self.cfg.num_decoder_layers, self.cfg.num_decoder_layers

    # ------------------------------------------------------------------ tokens

    def _pieces(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _room(self) -> int:
        """The most source pieces a prompt may hold and still leave room for the output."""
        return self.cfg.max_positions - len(self.layout.before) - len(self.layout.after) - 64

    def source(self, sentence: str) -> Source:
        if not self.layout.reads_source:
            return Source([], [], [], [NO_PROMPT])
        if not (sentence or "").strip():
            raise TranslationError("The sentence is empty: type a few words to translate.")
        pieces = self._typed(self.layout.gap + sentence.strip())
        room, notes = max(self._room(), 1), []
        if len(pieces) > room:  # the template leaves this much of the model's positions
            notes.append(f"The sentence has {len(pieces)} tokens; only the first {room} were used.")
        ids = self.layout.source_ids(pieces[:room])
        return Source(ids, self.source_tokens(ids), [False] * len(ids), notes)

    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        return len(self._pieces(text)) + 1 + (0 if target else len(self.layout.before))

    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        return self._typed(" " + text.strip())[: self.cfg.max_positions // 2] + [self.eos_id]

    def _typed(self, text: str) -> list[int]:
        """The pieces of typed text (TranslationError where it holds the padding token)."""
        pad = self.tokenizer.convert_ids_to_tokens(self.pad_id)
        return without_padding(self._pieces(text), self.pad_id, pad)

    def words_to_source(self, words: Sequence[str]) -> list[int]:
        return self.source(as_text(words)).ids

    def words_to_target(self, words: Sequence[str], target_lang=None) -> list[int]:
        return self.target_ids(as_text(words))

    def word_pieces(self, words: Sequence[str], target: bool):
        """(piece ids, the word of each piece): each word cut alone after a space (the
        source's first word after the template's own lead-in), no specials."""
        ids, owner = [], []
        for i, word in enumerate(words):
            lead = " " if target or i else self.layout.gap
            pieces = self._pieces(lead + word)
            ids += pieces
            owner += [i] * len(pieces)
        return ids, owner

    def framing(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """Nothing before either sentence (the template is around the source, not in it);
        after the source the template's first id, after the target the end of the line."""
        return [], [self.eos_id if target else self.layout.after[0]]

    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        """Shown tokens (``hf.shown_tokens``), a byte-level new line or tab drawn as ⏎ or ⇥:
        the template's line ends are tokens of their own here."""
        shown = (t.replace(NEWLINE, LINE_END).replace(TAB, "⇥") for t in hf.shown_tokens(self, ids))
        return [LINE_END if t == "##" + LINE_END else t for t in shown]  # a line end stands alone

    def target_words(self, ids: Sequence[int]) -> list[str]:
        return hf.words_of(self, self._cut(ids))

    def _cut(self, ids: Sequence[int]) -> list[int]:
        """Ids before the first that ends the line."""
        ids = list(ids)
        return next((ids[:i] for i, x in enumerate(ids) if x in self.ends), ids)

    def language_code(self, language: str = "fr") -> str | None:
        return None

    def language_id(self, code: str | None) -> int | None:
        return None

    # ------------------------------------------------------------------ decoding

    @torch.no_grad()
    def continuation(self, prompt: Sequence[int], max_len: int) -> list[int]:
        """Greedy ids after ``prompt``, up to and including the first that ends the line, at
        most ``max_len`` (and the model's positions)."""
        return continue_prompts(self, [list(prompt)], max_len)[0]

    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        lm = self.with_prompt(settings.prompt) if settings.prompt else self
        source = lm.source(sentence)
        src = source.ids
        out, passed = decode_with_maps(lm, src, settings.max_len)
        ended = out and out[-1] in lm.ends
        notes = source.notes + (
            [] if ended else [f"Stopped at {len(out)} tokens before the line ended."]
        )
        if settings.beam_size > 1:
            notes.append("Beam search is not built for prompted models: greedy decoding shown.")
        return translation(lm, src, out, settings.topk, notes, passed=passed)

    def force(self, sentence: str, target: str, settings: DecodeSettings) -> Translation:
        if not (target or "").strip():
            raise TranslationError("The target is empty: type the translation to explain.")
        lm = self.with_prompt(settings.prompt) if settings.prompt else self
        return translation(
            lm, lm.source(sentence).ids, lm.target_ids(target), settings.topk, [], True
        )

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, max_len: int, target_lang: str | None = None, memory=None):
        rows = continue_prompts(self, [self.layout.prompt(s) for s in self._rows(src)], max_len)
        out = torch.full((len(rows), max(map(len, rows), default=1)), self.pad_id)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out.to(self.device)  # (B, T)

    def max_output(self, longest: int) -> int:
        """1.5x the longest source plus 5 (as an encoder-decoder's: French runs about 1.2x
        English in pieces), within half the model's positions."""
        return min(longest + longest // 2 + 5, self.cfg.max_positions // 2)

    # ------------------------------------------------------------------ passes

    def _rows(self, ids: torch.Tensor) -> list[list[int]]:
        """Each row of (B, .) padded ids without its trailing padding."""
        return unpadded(ids, self.pad_id)

    def _pass(self, src, tgt_in, weights=False, states=False, logits=True) -> Pass:
        """One pass of a padded batch: each row's prompt and decoder inputs, its source left-
        padded so that every row's decoder inputs sit at the same positions, the last ones
        (``weights``: every attention's; ``states``: every layer's input; ``logits``: at the
        decoder inputs only)."""
        rows_s, rows_t = self._rows(src), self._rows(tgt_in)
        S, T = max(map(len, rows_s)), max(map(len, rows_t))
        n_before = len(self.layout.before)
        N = self.layout.spans(S, T)[1].stop
        ids = torch.full((len(rows_s), N), self.pad_id, device=self.device)  # (B, N)
        mask = torch.zeros_like(ids)
        for b, (s, t) in enumerate(zip(rows_s, rows_t)):
            seq = self.layout.sequence(s, t)
            ids[b, S - len(s) : S - len(s) + len(seq)] = torch.tensor(seq)
            mask[b, S - len(s) : S - len(s) + len(seq)] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, N)
        sources = [slice(n_before + S - len(s), n_before + S) for s in rows_s]
        steps = self.layout.spans(S, T)[1]  # the last T positions
        with sites.LastOutput(self.model) as last, sites.placing(sources, steps):
            o = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                           output_attentions=weights, output_hidden_states=states,
                           use_cache=False, logits_to_keep=T if logits else 1)  # fmt: skip
        stream = [*(o.hidden_states[:-1] if states else ()), last.output]  # (L +) 1 x (B, N, D)
        attentions = torch.stack(o.attentions) if weights else None  # (L, B, H, N, N)
        return Pass(o.logits if logits else None, attentions, stream, sources, steps)

    def run(self, src, tgt_in, memory=None, need_weights: bool = False) -> torch.Tensor:
        return self._pass(src, tgt_in).logits  # (B, T, V)

    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        p = self._pass(src, tgt_in, logits=False)
        return lm_sites.final_norm(self.model)(p.stream[-1][:, p.steps])  # (B, T, D)

    def patterns(self, src, tgt_in, kinds: Sequence[str] = ("encoder", "decoder_self", "cross")):
        """{kind: (L, B, H, Tq, Tk)}: each row's blocks, its source's columns first."""
        p = self._pass(src, tgt_in, weights=True, logits=False)
        S = src.size(1)
        out = {}
        for kind in kinds:
            rows = [p.block(kind, b, S) for b in range(src.size(0))]  # B x (L, H, Tq, Tk)
            out[kind] = torch.stack(rows, dim=1)  # (L, B, H, Tq, Tk)
        return out

    def stream(self, src, tgt_in, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): the residual stream at the source (``encoder``, each row's
        source first) or the decoder inputs (``decoder``): each layer's input, then the last
        layer's output (before the final norm)."""
        p = self._pass(src, tgt_in, states=True, logits=False)
        if side == "decoder":
            return [h[:, p.steps] for h in p.stream]
        return [p.at_source(h, src.size(1)) for h in p.stream]

    def record(self, src, tgt_in, out_ids=None) -> Record:
        """The record of one sentence's pass over its whole sequence (``Record.one_stack``:
        each layer's one attention, its output, where the source and the decoder inputs sit;
        the first row's, as ``forced`` gives one), its logits at the decoder inputs, and the
        three kinds as blocks of it (``one_stack_record``)."""
        cache: dict = {}
        points = self.hook_points()
        names = [s for s in one_stack_sites(self.cfg.num_decoder_layers) if s in points]
        with self.hooks((s, capture(cache)) for s in names):
            p = self._pass(src, tgt_in, weights=True, states=True)
        N = p.stream[0].size(1)
        causal = torch.ones(N, N, dtype=torch.bool, device=src.device).tril()[None, None]
        # (1, 1, N, N); a sliding window (Mistral) reads fewer: its weights are 0 beyond it
        whole = one_stack_of(cache, p.stream, causal, p.sources[0], p.steps)
        masks = self.masks(src, tgt_in)
        return one_stack_record(whole, src, tgt_in, masks, p.logits, out_ids)

    def logits_of(self, hidden, weight=None) -> torch.Tensor:
        head = self.model.get_output_embeddings()
        if weight is None:
            logits = head(hidden)  # (..., V)
        else:
            logits = nn.functional.linear(hidden.to(weight.dtype), weight, head.bias)
        cap = self._final_softcap()
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def _final_softcap(self) -> float | None:
        """The logits' soft cap c, c·tanh(z/c), as the model's own forward applies (Gemma 2)."""
        return softcap(architecture_of(self.model), self.model.config, "final_logit")

    def lens(self, stream) -> torch.Tensor:
        return self.logits_of(lm_sites.final_norm(self.model)(stream))

    def lens_words(self) -> str:
        norm = type(lm_sites.final_norm(self.model)).__name__
        cap = self._final_softcap()
        capped = f", then the soft cap {cap:g}·tanh(z/{cap:g})" if cap else ""
        return f"each layer's output through the final norm ({norm}) and lm_head{capped}"

    @property
    def head_kinds(self) -> tuple[str, ...]:
        return ("decoder_self",)  # one attention per layer: its heads are the model's heads

    # ------------------------------------------------------------------ structure

    def sequence_heads(self, src_ids, out_ids, layer: int) -> tuple[SequenceHeads, list[str]]:
        self.check_layer("decoder_self", layer)
        ids = self.sequence_ids(src_ids, out_ids)
        return lm_heads.sequence_heads(self.model, ids, layer), self.source_tokens(ids)

    def sequence_ids(self, src_ids, out_ids) -> list[int]:
        return self.layout.sequence(list(src_ids), self.decoder_inputs(list(out_ids)))

    @torch.no_grad()
    def sequence_patterns(self, ids) -> torch.Tensor:
        x = torch.tensor([list(ids)], device=self.device)  # (1, N)
        with self.evaluating():
            weights = self.model(
                input_ids=x, output_attentions=True, logits_to_keep=1, use_cache=False
            ).attentions  # one pass: no cache to build
        return torch.stack(weights)[:, 0]  # (L, H, N, N)

    def start_ids(self) -> list[int]:
        return self.tokenizer("")["input_ids"]

    def sequence_spans(self, S: int, T: int) -> tuple[slice, slice]:
        return self.layout.spans(S, T)

    def first_step(self, src_ids, out_ids) -> int:
        return len(self.sequence_ids(src_ids, out_ids)) - len(out_ids)
