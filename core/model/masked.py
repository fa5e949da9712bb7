"""An encoder-only masked language model (BERT, RoBERTa, DistilBERT, ELECTRA) behind the one
interface (``core.model.interface``): it fills the sentence's mask tokens.

``MaskedModel`` reads a sentence (its tokenizer's ``[CLS] … [SEP]``, ``<s> … </s>``) and
writes, at each mask token (``[MASK]``, ``<mask>``), its most likely token: that is its
"translation", with the candidates of each mask; a sentence without a mask is predicted at
every token, each read unmasked. Its one bidirectional self-attention is the *encoder* kind;
the rows of the predicted positions are shown as the other two kinds, as blocks of it (*cross*:
over the whole sentence; *decoder self*: over the predicted positions). One forward gives
every figure; attribution explains the filled token at each mask over the sentence (each mask
counted once, as the decoder input its row reads: ``OneStack.cut``, ``OneStack.once``);
patching reads two sentences' first mask (``core.attention.patching_question``); faithfulness
ranks the methods on validation sentences with one word hidden and filled (the masking
protocol: ``core.model.own_outputs``); what needs a translation (alignment, removing heads by
BLEU) says so in one line (``core.model.capabilities``).

Shape key: S sentence tokens, T predicted positions, L layers, H heads, D width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from core.model import hugging_face as hf
from core.model import lm_heads, sites
from core.model.capabilities import MASKED_LM
from core.model.hf_base import HFBase, OneAttention
from core.model.hooks import capture
from core.model.interface import TranslationModel
from core.model.one_sequence import at_outputs, without_padding
from core.model.parts import (
    AttentionMaps,
    DecodeSettings,
    SequenceHeads,
    Source,
    Translation,
    TranslationError,
    translation_of,
)
from core.model.record import Record, one_stack_of, one_stack_record, one_stack_sites

MASKED_SHARE = 0.15  # of a sentence's tokens masked for the masked-LM loss (BERT's share)


def _length(tgt_in: torch.Tensor | None) -> int | None:
    """How many predicted positions the decoder inputs (B, T) stand for (None: every one)."""
    return None if tgt_in is None else tgt_in.size(1)


@dataclass
class MaskedModel(OneAttention, HFBase, TranslationModel):
    """A BERT-like model and its tokenizer, filling mask tokens."""

    family = MASKED_LM
    one_sequence = True
    output_label = "Filled"
    loss_words = (
        "A masked language model is measured by its masked-LM loss: about 15 % of each "
        "sentence's tokens (at least one, evenly spaced) replaced by the mask token and predicted"
    )
    kinds_words = (
        "A masked language model has one bidirectional attention per layer: **encoder** = "
        "every token over every token. The rows of the predicted positions (the mask tokens) "
        "are shown as the other kinds: **cross** = over the whole sentence, **decoder self** = "
        "over the predicted positions."
    )

    # ------------------------------------------------------------------ what it is

    @property
    def mask_token(self) -> str:
        return str(self.tokenizer.mask_token)

    @property
    def example_sentence(self) -> str:
        return f"the boy is {self.mask_token} ."

    @property
    def source_label(self) -> str:
        return f"Sentence (type {self.mask_token} where the model should fill a word)"

    @property
    def target_name(self) -> str:
        return "filled words"

    @property
    def languages(self) -> tuple[str, str]:
        return "en", "en"

    @property
    def start_id(self) -> int:
        return int(self.tokenizer.cls_token_id)

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.sep_token_id)

    def layers(self, kind: str) -> int:
        return self.cfg.num_encoder_layers

    @property
    def depth(self) -> tuple[int, int]:
        return self.cfg.num_encoder_layers, self.cfg.num_encoder_layers

    @property
    def head_kinds(self) -> tuple[str, ...]:
        return ("encoder",)

    def source(self, sentence: str) -> Source:
        pieces = self.tokenizer((sentence or "").strip(), add_special_tokens=False)["input_ids"]
        if not pieces:  # nothing, or only what the tokenizer drops (zero-width, control)
            raise TranslationError("The sentence is empty: type a few words.")
        pad = self.tokenizer.convert_ids_to_tokens(self.pad_id)
        without_padding(pieces, self.pad_id, pad)  # a typed [PAD] left the pass's rows short
        return super().source(sentence)

    def positions(self, ids: Sequence[int]) -> list[int]:
        """The predicted positions: the mask tokens, or every token when there is none."""
        masks = [i for i, x in enumerate(ids) if x == self.mask_id]
        return masks or list(range(len(ids)))

    def decoder_inputs(self, out_ids: Sequence[int]) -> list[int]:
        return list(out_ids)  # no decoder: each prediction reads the sentence, not the last

    # ------------------------------------------------------------------ the one pass

    @torch.no_grad()
    def _forward(self, ids: Sequence[int]):
        """(logits (S, V), weights (L, H, S, S), hidden states L + 1 x (S, D)) of one sentence."""
        x = torch.tensor([list(ids)], device=self.device)  # (1, S)
        with self.evaluating():
            o = self.model(input_ids=x, output_attentions=True, output_hidden_states=True)
        return o.logits[0], torch.stack(o.attentions)[:, 0], [h[0] for h in o.hidden_states]

    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        src = self.source(sentence)
        logits, weights, _ = self._forward(src.ids)
        at = self.positions(src.ids)
        logp = logits[at].float().log_softmax(-1)  # (T, V)
        out = logp.argmax(-1).tolist()  # (T,)
        notes = []
        if not any(x == self.mask_id for x in src.ids):
            notes.append(
                f"No {self.mask_token} in the sentence: the model's prediction at every token, "
                "each read unmasked."
            )
        rows = weights[:, :, at]  # (L, H, T, S)
        return translation_of(
            source=src,
            out_ids=out,
            logp=logp,
            maps=AttentionMaps(weights, rows[..., at], rows),
            outputs=self.target_tokens(out),
            ended=False,  # no end token: every predicted position is shown
            decoder_inputs=[src.tokens[i] for i in at],
            words=hf.words_of(self, out),
            candidates=hf.candidates(self),
            topk=settings.topk,
            notes=notes,
        )

    # ------------------------------------------------------------------ passes

    def _states(self, src: torch.Tensor, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): each row's hidden states, at every token or the predicted."""
        rows = []
        for ids in src.tolist():
            ids = [x for x in ids if x != self.pad_id]
            _, _, hidden = self._forward(ids)
            at = list(range(len(ids))) if side == "encoder" else self.positions(ids)
            rows.append([h[at] for h in hidden])
        n = max(len(r[0]) for r in rows)
        return [
            torch.stack([nn.functional.pad(r[i], [0, 0, 0, n - len(r[i])]) for r in rows])
            for i in range(len(rows[0]))
        ]

    def stream(self, src, tgt_in, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): the hidden states (the embeddings' output, then each layer's),
        at every token (``encoder``) or at the predicted positions (``decoder``)."""
        return self._states(src, side)

    def output_positions(self, src, tgt_in) -> list[list[int]]:
        """Each row's first T predicted positions in its sentence (``positions``, padding left
        out; T of the (B, T) decoder inputs, as ``hidden`` reads them: a patching question's
        one input is the first mask)."""
        T = _length(tgt_in)
        return [self.positions([x for x in ids if x != self.pad_id])[:T] for ids in src.tolist()]

    def _batch(self, src: torch.Tensor, first: int | None = None) -> torch.Tensor:
        """(B, S, D) the last layer's output of a right-padded batch, under this thread's hooks
        (with gradients where enabled: the gradient score). Its token embeddings are the sites
        ``encoder.embed`` (each row's sentence) and ``decoder.embed`` (the ``first`` predicted
        positions, the same in every row: one sentence's integration points; the gradient
        methods give as many as the steps they ask), so a predicted position's token is read as
        a decoder input there."""
        rows = [[x for x in ids if x != self.pad_id] for ids in src.tolist()]
        at = self.positions(rows[0])
        steps = at[:first] if all(self.positions(r) == at for r in rows) else []
        sources = [slice(0, len(r)) for r in rows]
        with sites.LastOutput(self.model) as last, sites.placing(sources, steps):
            self.model.base_model(input_ids=src, attention_mask=(src != self.pad_id).long())
        return last.output

    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        states = self._batch(src, _length(tgt_in))  # (B, S, D)
        return at_outputs(states, self.output_positions(src, tgt_in))  # (B, T, D)

    def loss_pairs(self, src_ids, first_pairs) -> list[tuple[list[int], list[int]]]:
        return [self.loss_pair(ids) for ids in src_ids]  # the sentences alone, masked

    def loss_pair(self, ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """(the sentence with about 15 % of its tokens masked, at least one, evenly spaced;
        the masked tokens): the masked-LM loss's pair, the same every time."""
        inside = [i for i, x in enumerate(ids) if x not in self.tokenizer.all_special_ids]
        inside = inside or list(range(len(ids)))
        k = max(1, round(MASKED_SHARE * len(inside)))
        chosen = [inside[int((j + 0.5) * len(inside) / k)] for j in range(k)]
        masked = [self.mask_id if i in chosen else x for i, x in enumerate(ids)]
        return masked, [ids[i] for i in chosen]

    def encode(self, src) -> torch.Tensor:
        return self._states(src, "encoder")[-1]  # (B, S, D)

    def _head(self) -> nn.Module:
        """The masked-LM head: a transform (dense, activation, LayerNorm), then the decoder."""
        return self._architecture.output_head(self.model)  # BERT's cls, RoBERTa's lm_head

    def logits_of(self, hidden, weight=None) -> torch.Tensor:
        return self._head()(hidden)

    def lens_words(self) -> str:
        return (
            "each layer's output through the masked-LM head (dense, activation, LayerNorm, decoder)"
        )

    def masks(self, src, tgt_in):
        """(the sentence's real tokens (B, 1, 1, S), (B, 1, T, T) all True: every predicted
        position reads every other, in one pass)."""
        T = tgt_in.size(1)
        full = torch.ones(tgt_in.size(0), 1, T, T, dtype=torch.bool, device=src.device)
        return (src != self.pad_id)[:, None, None, :], full

    def record(self, src, tgt_in, out_ids=None) -> Record:
        """The record of one sentence's pass (the first row's): ``Record.one_stack`` over the
        sentence, its predicted positions as the decoder inputs, their logits, and the three kinds
        as blocks of it (``one_stack_record``)."""
        ids = [x for x in src[0].tolist() if x != self.pad_id]
        cache: dict = {}
        points = self.hook_points()
        names = [s for s in one_stack_sites(self.cfg.num_encoder_layers) if s in points]
        with self.hooks((s, capture(cache)) for s in names):
            logits, _, hidden = self._forward(ids)  # (S, V), L + 1 x (S, D)
        at = self.positions(ids)
        S = len(ids)
        every = torch.ones(1, 1, S, S, dtype=torch.bool, device=src.device)  # both ways
        whole = one_stack_of(cache, [h[None] for h in hidden], every, slice(0, S), at)
        masks = self.masks(src, tgt_in)
        return one_stack_record(whole, src, tgt_in, masks, logits[at][None], out_ids)

    # ------------------------------------------------------------------ one sequence

    def sequence_ids(self, src_ids, out_ids) -> list[int]:
        return list(src_ids)

    @torch.no_grad()
    def sequence_patterns(self, ids) -> torch.Tensor:
        return self._forward(ids)[1]  # (L, H, N, N)

    def start_ids(self) -> list[int]:
        return [self.start_id]

    def first_step(self, src_ids, out_ids) -> int:
        return self.positions(src_ids)[0]

    def sequence_heads(self, src_ids, out_ids, layer: int) -> tuple[SequenceHeads, list[str]]:
        self.check_layer("encoder", layer)
        ids = list(src_ids)
        return lm_heads.sequence_heads(self.model, ids, layer, causal=False), self.source_tokens(
            ids
        )
