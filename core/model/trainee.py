"""The decoder-only model the studio trains: a Llama-style ``DecoderTrainee`` built from a
``ModelConfig``, and ``build_model``, which picks it or the d2l Transformer by ``cfg.arch``.

``DecoderTrainee`` wraps transformers' ``LlamaForCausalLM`` built from a config (RoPE, RMSNorm,
SwiGLU, grouped-query attention with ``num_kv_heads``; ``d_model`` is the hidden size, ``d_ff``
the SwiGLU width, ``num_decoder_layers`` the layers, ``dropout`` the attention dropout) over one
vocabulary whose specials are ``core.corpus.vocab.Vocab``'s (pad 0, bos 1, eos 2, unk 3). It
offers what the trainer and the checkpoints use of the Transformer (``cfg``, the state dict,
``loss_terms``) with the decoder-only convention: the model reads x = concat(src, tgt_in), the
source's right padding moved to its left (an attention mask and position ids skip it), and the
logits at the positions of tgt_in predict tgt_out. For the circuit scores, ``patterns`` returns
every layer's attention weights of one pass (eager attention, for that call; training runs
SDPA) and ``token_losses`` the loss of each next token. Neither changes the module's mode:
put it in eval mode for scores without dropout. ``export_folder`` writes it as a
``save_pretrained`` folder (``core.model.trainee_folder``).

Shape key: B batch, S source tokens, T target tokens, N sequence, L layers, H heads, D model
width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from core.corpus.vocab import Vocab
from core.model import trainee_folder
from core.model.config import ModelConfig
from core.model.transformer import Transformer

DECODER_ONLY = "decoder-only"  # ModelConfig.arch of this model
RMS_NORM_EPS = 1e-5  # Llama's
TRAINING_ATTENTION = "sdpa"  # the fused path; "eager" only where weights are returned
export_folder = trainee_folder.export_folder  # a trainee as a save_pretrained folder (its module)
ALIGN_REFUSED = "A decoder-only model has no cross-attention to supervise: train it without align."


def llama_config(cfg: ModelConfig):
    """transformers' LlamaConfig of a decoder-only ModelConfig (special ids of ``Vocab``)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=cfg.tgt_vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.num_decoder_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads or cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        attention_dropout=cfg.dropout,
        rms_norm_eps=RMS_NORM_EPS,
        tie_word_embeddings=False,
        pad_token_id=Vocab.pad_id,
        bos_token_id=Vocab.bos_id,
        eos_token_id=Vocab.eos_id,
        attn_implementation=TRAINING_ATTENTION,
    )


def left_padded(src: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) right-padded ids -> (the same ids left-padded (B, S), True at real ids (B, S))."""
    S = src.size(1)
    shift = (src == pad_id).sum(1, keepdim=True)  # (B, 1) padding of each row
    at = torch.arange(S, device=src.device) - shift  # (B, S) where each place reads from
    real = at >= 0  # (B, S)
    ids = src.gather(1, at.clamp(min=0)).masked_fill(~real, pad_id)  # (B, S)
    return ids, real


class DecoderTrainee(nn.Module):
    """A Llama-style decoder-only language model, trained by the studio's trainer."""

    decodes = True  # continues its prompt token by token: a translation run measures BLEU

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.arch != DECODER_ONLY:
            raise ValueError(f"DecoderTrainee builds arch {DECODER_ONLY!r} (got {cfg.arch!r})")
        from transformers import LlamaForCausalLM

        self.cfg = cfg
        self.lm = LlamaForCausalLM(llama_config(cfg))

    def joined(self, src, tgt_in) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(x (B, S+T), attention mask (B, S+T) | None, position ids (B, S+T) | None): the
        source left-padded, then tgt_in; no mask and no positions where nothing is padded."""
        left, real = left_padded(src, self.cfg.pad_id)  # (B, S) each
        x = torch.cat([left, tgt_in], dim=1)  # (B, S+T)
        mask = torch.cat([real, tgt_in != self.cfg.pad_id], dim=1)  # (B, S+T)
        if bool(mask.all()):
            return x, None, None  # plain causal attention: SDPA's fastest path
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, S+T) skip the left padding
        return x, mask.long(), positions

    def forward(self, src, tgt_in) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V) at the positions of tgt_in."""
        x, mask, positions = self.joined(src, tgt_in)
        out = self.lm(input_ids=x, attention_mask=mask, position_ids=positions, use_cache=False,
                      logits_to_keep=tgt_in.size(1))  # fmt: skip
        return out.logits  # (B, T, V)

    def loss_terms(
        self, src, tgt_in, tgt_out, label_smoothing: float = 0.0, align=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean cross-entropy of tgt_out's non-pad tokens, 0): the Transformer's terms
        without an alignment loss (``align`` given: ValueError, there is no cross-attention)."""
        if align is not None:
            raise ValueError(ALIGN_REFUSED)
        x, mask, positions = self.joined(src, tgt_in)
        hidden = self.lm.model(
            input_ids=x, attention_mask=mask, position_ids=positions, use_cache=False
        ).last_hidden_state  # fmt: skip  (B, S+T, D)
        steps = hidden[:, src.size(1) :]  # (B, T, D) at tgt_in
        rows = (tgt_out != self.cfg.pad_id).flatten().nonzero().squeeze(1)  # (N,) real tokens
        logits = self.lm.lm_head(steps.flatten(0, 1).index_select(0, rows))  # (N, V)
        target = tgt_out.flatten()[rows]  # (N,)
        ce = F.cross_entropy(logits, target, label_smoothing=label_smoothing)  # float32 in autocast
        return ce, ce.new_zeros(())

    def loss(self, src, tgt_in, tgt_out, label_smoothing: float = 0.0) -> torch.Tensor:
        """Mean cross-entropy of tgt_out (B, T) given src (B, S) and tgt_in (B, T)."""
        return self.loss_terms(src, tgt_in, tgt_out, label_smoothing)[0]

    @contextmanager
    def _eager(self) -> Iterator[None]:
        """Eager attention inside the block (the one path that returns weights), then back."""
        self.lm.set_attn_implementation("eager")
        try:
            yield
        finally:
            self.lm.set_attn_implementation(TRAINING_ATTENTION)

    def patterns(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, N), no padding -> every layer's attention weights (L, B, H, N, N)."""
        with self._eager():
            out = self.lm(input_ids=ids, output_attentions=True, use_cache=False, logits_to_keep=1)
        return torch.stack(out.attentions)  # (L, B, H, N, N)

    def token_losses(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, N), no padding -> (B, N-1) cross-entropy of each next token (1 .. N-1)."""
        logits = self.lm(input_ids=ids, use_cache=False).logits[:, :-1]  # (B, N-1, V)
        target = ids[:, 1:]  # (B, N-1)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="none")
        return losses.view(target.shape)  # (B, N-1)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameters by group, in the order of the forward pass (``core.training.monitor``):
        the embedding, each decoder layer, the final norm, the output layer."""
        inner = self.lm.model
        groups = {"embedding": list(inner.embed_tokens.parameters())}
        for i, layer in enumerate(inner.layers):
            groups[f"decoder {i}"] = list(layer.parameters())
        groups["final norm"] = list(inner.norm.parameters())
        groups["output layer"] = list(self.lm.lm_head.parameters())
        return groups

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def build_model(cfg: ModelConfig) -> Transformer | DecoderTrainee:
    """The model a ModelConfig describes: the d2l Transformer, or (arch "decoder-only") the
    DecoderTrainee; the one place that asks which."""
    return DecoderTrainee(cfg) if cfg.arch == DECODER_ONLY else Transformer(cfg)
