"""The encoder-only model the studio trains: a BERT-style masked language model over a pair's
two sentences, ``EncoderTrainee``.

``EncoderTrainee`` wraps transformers' ``BertForMaskedLM`` built from a ``BertConfig``
(``d_model`` the hidden size, ``num_encoder_layers`` the layers, ``num_heads`` the heads,
``d_ff`` the intermediate width, ``max_positions`` the position table, two token types,
``dropout`` as hidden and attention dropout) over one vocabulary whose specials are
``core.corpus.vocab.Vocab``'s (pad 0, bos 1, eos 2, unk 3) plus one id past it, the mask token
(``MASK``, id ``vocab_size``: the studio's vocabularies have none). It offers what the trainer
uses (``cfg``, the state dict, ``loss_terms``, ``parameter_groups``) with BERT's convention:
a pair (src = source ids + <eos>, tgt = <bos> + target ids + <eos>) is read as
``[CLS] english [SEP] french [SEP]`` (CLS = <bos>, SEP = <eos>; token type 0 for the English
part, 1 for the French), 15 % of its real tokens chosen (``MASKED_SHARE``, at least one per
pair) and replaced 80/10/10 by the mask, a random word, or themselves; the loss is the
cross-entropy of the chosen tokens alone. In training mode the choice draws from torch's
generator (the one the trainer seeds and saves: a resumed run masks as an unbroken one would);
in eval mode from a generator of its own seeded by ``EVAL_MASK_SEED``, so that every
evaluation masks the same tokens and its losses compare. ``export_folder`` writes it as a
``save_pretrained`` folder (``core.model.trainee_folder``). For the circuit scores
(``core.training.circuits``), ``patterns`` returns every layer's attention weights of one pass
over a sequence read as one sentence (eager attention, for that call; the loss pass runs SDPA,
and the eager path on a CPU, as the decoder's: ``core.model.attention_path``) and
``token_losses`` each token's masked-LM loss with that token alone masked (its
pseudo-likelihood: both sides in view).

Shape key: B batch, S source tokens, T target tokens, N the joined sequence (1 + S + T),
M masked tokens, L layers, D model width, V vocabulary (the mask included).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.corpus.batches import batches
from core.corpus.vocab import SPECIALS, Vocab
from core.model import attention_path as path
from core.model.config import ModelConfig

ENCODER = "encoder"  # ModelConfig.arch of this model
MASK = "[MASK]"  # the mask token, id vocab_size (one past the studio's vocabulary)
MASKED_SHARE = 0.15  # of a pair's real tokens chosen for the loss (BERT's)
MASK_SPLIT = (0.8, 0.1)  # of the chosen: replaced by the mask, by a random word (rest: kept)
EVAL_MASK_SEED = 1234  # the fixed mask of evaluation (the same tokens at every evaluation)
LAYER_NORM_EPS = 1e-12  # BERT's
ALIGN_REFUSED = "An encoder has no cross-attention to supervise: train it without align."


def bert_config(cfg: ModelConfig):
    """transformers' BertConfig of an encoder ModelConfig (its vocabulary and the mask)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=cfg.tgt_vocab_size + 1,  # the mask token past the studio's vocabulary
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.num_encoder_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.d_ff,
        max_position_embeddings=cfg.max_positions,
        type_vocab_size=2,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        layer_norm_eps=LAYER_NORM_EPS,
        pad_token_id=Vocab.pad_id,
        attn_implementation=path.TRAINING_ATTENTION,
    )


def packed(parts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, n_i) id tensors -> (their rows joined, real ids first, as long as the
    longest (B, N); the index of the part each place comes from (B, N), -1 at padding)."""
    ids = torch.cat(parts, dim=1)  # (B, N)
    part = torch.cat([torch.full_like(p, i) for i, p in enumerate(parts)], dim=1)  # (B, N)
    real = ids != pad_id  # (B, N)
    order = torch.sort((~real).int(), dim=1, stable=True).indices  # (B, N) real first, in order
    n = int(real.sum(1).max())  # the longest row: the columns after it are padding alone
    ids, part = ids.gather(1, order[:, :n]), part.gather(1, order[:, :n])  # (B, N) each
    return ids, part.masked_fill(ids == pad_id, -1)


class EncoderTrainee(nn.Module):
    """A BERT-style masked language model over a pair's two sentences, trained here."""

    decodes = False  # fills masks, writes no translation: a run measures its masked-LM loss

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.arch != ENCODER:
            raise ValueError(f"EncoderTrainee builds arch {ENCODER!r} (got {cfg.arch!r})")
        from transformers import BertForMaskedLM

        self.cfg = cfg
        self.lm = BertForMaskedLM(bert_config(cfg))

    @property
    def mask_id(self) -> int:
        """The mask token's id: one past the studio's vocabulary."""
        return self.cfg.tgt_vocab_size

    def joined(self, src, tgt_out) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) source + <eos>, tgt_out (B, T) target + <eos>, right-padded ->
        (ids ``<bos> src tgt_out`` with the padding at the end (B, N), token types (B, N):
        1 on the French, 0 elsewhere)."""
        cls = src.new_full((src.size(0), 1), Vocab.bos_id)  # (B, 1)
        ids, part = packed([cls, src, tgt_out], self.cfg.pad_id)  # (B, N) each
        return ids, (part == 2).long()

    def masked(
        self, ids: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, N) -> (the inputs with BERT's masking (B, N), the labels (B, N): the
        chosen tokens' ids, -100 elsewhere). About ``MASKED_SHARE`` of the words (never a
        special) are chosen, at least one per row that has a word; of them 80 % read the
        mask, 10 % a random word, 10 % themselves."""
        words = ids >= len(SPECIALS)  # (B, N) no pad, <bos>, <eos>, <unk>
        draw = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, N)
        chosen = words & (draw < MASKED_SHARE)  # (B, N)
        least = draw.masked_fill(~words, 2.0).argmin(1, keepdim=True)  # (B, 1) a row's one
        none = ~chosen.any(1, keepdim=True) & words.any(1, keepdim=True)  # (B, 1)
        chosen |= none & (torch.arange(ids.size(1), device=ids.device) == least)  # (B, N)
        how = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, N)
        randoms = torch.randint(
            len(SPECIALS), self.mask_id, ids.shape, generator=generator, device=ids.device
        )  # (B, N)
        inputs = torch.where(chosen & (how < MASK_SPLIT[0]), self.mask_id, ids)  # (B, N)
        swap = chosen & (how >= MASK_SPLIT[0]) & (how < sum(MASK_SPLIT))  # (B, N)
        inputs = torch.where(swap, randoms, inputs)  # (B, N)
        return inputs, ids.masked_fill(~chosen, -100)

    def mask_generator(self, device: torch.device) -> torch.Generator | None:
        """None in training (torch's own stream), else a new one seeded by EVAL_MASK_SEED."""
        if self.training:
            return None
        return torch.Generator(device=device).manual_seed(EVAL_MASK_SEED)

    def masked_pass(self, src, tgt_out) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (M, V) at the chosen tokens of the masked pairs, their ids (M,)): one pass
        on the attention ``core.model.attention_path.training_attention`` picks (eager on a CPU)."""
        ids, types = self.joined(src, tgt_out)  # (B, N) each
        inputs, labels = self.masked(ids, self.mask_generator(ids.device))  # (B, N) each
        with path.attention_path(self.lm, path.training_attention(ids.device)):
            hidden = self.lm.bert(
                input_ids=inputs,
                attention_mask=(ids != self.cfg.pad_id).long(),
                token_type_ids=types,
            ).last_hidden_state  # (B, N, D)
        rows = (labels != -100).flatten().nonzero().squeeze(1)  # (M,)
        logits = self.lm.cls(hidden.flatten(0, 1).index_select(0, rows))  # (M, V)
        return logits, labels.flatten()[rows]

    def loss_terms(
        self, src, tgt_in, tgt_out, label_smoothing: float = 0.0, align=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean cross-entropy of the chosen tokens of ``[CLS] src tgt_out``, 0): the
        Transformer's terms (tgt_in unread: tgt_out holds the French and its <eos>) without an
        alignment loss (``align`` given: ValueError, there is no cross-attention)."""
        if align is not None:
            raise ValueError(ALIGN_REFUSED)
        logits, target = self.masked_pass(src, tgt_out)  # (M, V), (M,)
        if not len(target):  # no word to mask in the whole batch (all <unk>): nothing to learn
            return logits.float().sum(), logits.new_zeros((), dtype=torch.float32)
        ce = F.cross_entropy(logits.float(), target, label_smoothing=label_smoothing)
        return ce, ce.new_zeros(())

    def loss(self, src, tgt_in, tgt_out, label_smoothing: float = 0.0) -> torch.Tensor:
        """Mean cross-entropy of the masked tokens of the pairs src (B, S), tgt_out (B, T)."""
        return self.loss_terms(src, tgt_in, tgt_out, label_smoothing)[0]

    @torch.no_grad()
    def fill_accuracy(self, encoded, batch_size: int = 256) -> float:
        """Share of the chosen tokens of encoded pairs (the fixed evaluation mask) whose most
        likely token is the right one; the module's mode is kept."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        right = total = 0
        try:
            for src, tgt in batches(encoded, batch_size, shuffle=False):
                logits, target = self.masked_pass(src.to(device), tgt[:, 1:].to(device))
                right += int((logits.argmax(-1) == target).sum())
                total += target.numel()
        finally:
            self.train(was_training)
        return right / max(total, 1)

    def patterns(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, N), no padding, token type 0 -> every layer's attention weights
        (L, B, H, N, N) of one eager pass (the one path that returns weights), then SDPA again."""
        with path.attention_path(self.lm, "eager"):
            out = self.lm.bert(input_ids=ids, output_attentions=True)
        return torch.stack(out.attentions)  # (L, B, H, N, N)

    def token_losses(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, N), no padding -> (B, N-1) cross-entropy of tokens 1 .. N-1, each with that
        token alone replaced by the mask (one pass per token, all in one batch)."""
        B, N = ids.shape
        at = torch.arange(1, N, device=ids.device)  # (N-1,) the token each copy masks
        inputs = ids[:, None, :].repeat(1, N - 1, 1)  # (B, N-1, N)
        inputs[:, at - 1, at] = self.mask_id
        hidden = self.lm.bert(input_ids=inputs.flatten(0, 1)).last_hidden_state  # (B(N-1), N, D)
        hidden = hidden.view(B, N - 1, N, -1)[:, at - 1, at]  # (B, N-1, D) at the masks
        logits = self.lm.cls(hidden)  # (B, N-1, V)
        target = ids[:, 1:]  # (B, N-1)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="none")
        return losses.view(target.shape)  # (B, N-1)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameters by group, in the order of the forward pass (``core.training.monitor``):
        the embeddings, each encoder layer, the output layer (the masked-LM head's transform
        and bias; its weights are the tied embedding's)."""
        groups = {"embedding": list(self.lm.bert.embeddings.parameters())}
        for i, layer in enumerate(self.lm.bert.encoder.layer):
            groups[f"encoder {i}"] = list(layer.parameters())
        seen = {id(p) for p in groups["embedding"]}
        groups["output layer"] = [p for p in self.lm.cls.parameters() if id(p) not in seen]
        return groups

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
