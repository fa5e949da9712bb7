"""The decoder-only model the studio trains: a Llama-style ``DecoderTrainee`` built from a
``ModelConfig``, and ``build_model``, which picks it, the d2l Transformer or the encoder
(``core.model.encoder_trainee``) by ``cfg.arch``.

``DecoderTrainee`` wraps transformers' ``LlamaForCausalLM`` built from a config (RoPE, RMSNorm,
SwiGLU, grouped-query attention with ``num_kv_heads``; ``d_model`` is the hidden size, ``d_ff``
the SwiGLU width, ``num_decoder_layers`` the layers, ``dropout`` the attention dropout) over one
vocabulary whose specials are ``core.corpus.vocab.Vocab``'s (pad 0, bos 1, eos 2, unk 3). It
offers what the trainer and the checkpoints use of the Transformer (``cfg``, the state dict,
``loss_terms``) with the decoder-only convention: the model reads x = concat(src, tgt_in), the
source's right padding moved to its left (an attention mask and position ids skip it), and the
logits at the positions of tgt_in predict tgt_out: a translation pair (source + <eos>,
<bos> + target + <eos>) is read as ``source <eos> <bos> target`` with the loss on the target
and its <eos> only. ``greedy_decode`` continues ``source <eos> <bos>`` (a batch left-padded,
a key/value cache: BLEU at evaluations, ``core.model.decode.translate_batch``) and ``forced``
reads one sentence's prompt and output in one pass, its causal attention cut into the
encoder-decoder's three maps (the probe snapshots). For the circuit scores, ``patterns`` returns
every layer's attention weights of one pass (eager attention, for that call; training runs
SDPA, and the eager path on a CPU: ``core.model.attention_path``) and ``token_losses`` the loss of
each next token. Neither changes the module's mode: put it in eval mode for scores without
dropout. ``export_folder`` writes it as a
``save_pretrained`` folder (``core.model.trainee_folder``).

Shape key: B batch, S source tokens, T target tokens, N sequence, L layers, H heads, D model
width, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.corpus.vocab import Vocab
from core.model import trainee_folder
from core.model.attention_path import TRAINING_ATTENTION, attention_path, training_attention
from core.model.config import ModelConfig
from core.model.parts import AttentionMaps
from core.model.prompt import blocks
from core.model.transformer import Transformer

DECODER_ONLY = "decoder-only"  # ModelConfig.arch of this model
RMS_NORM_EPS = 1e-5  # Llama's
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
        with attention_path(self.lm, training_attention(x.device)):
            hidden = self.lm.model(
                input_ids=x, attention_mask=mask, position_ids=positions, use_cache=False
            ).last_hidden_state  # (B, S+T, D)
        steps = hidden[:, src.size(1) :]  # (B, T, D) at tgt_in
        rows = (tgt_out != self.cfg.pad_id).flatten().nonzero().squeeze(1)  # (N,) real tokens
        logits = self.lm.lm_head(steps.flatten(0, 1).index_select(0, rows))  # (N, V)
        target = tgt_out.flatten()[rows]  # (N,)
        ce = F.cross_entropy(logits, target, label_smoothing=label_smoothing)  # float32 in autocast
        return ce, ce.new_zeros(())

    def loss(self, src, tgt_in, tgt_out, label_smoothing: float = 0.0) -> torch.Tensor:
        """Mean cross-entropy of tgt_out (B, T) given src (B, S) and tgt_in (B, T)."""
        return self.loss_terms(src, tgt_in, tgt_out, label_smoothing)[0]

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int) -> torch.Tensor:
        """Greedy continuation of ``src <eos> <bos>`` with a key/value cache: src (B, S) ->
        ids (B, T), T <= max_len; rows after a sequence's <eos> are to be ignored."""
        x, mask, positions = self.joined(src, src.new_full((src.size(0), 1), Vocab.bos_id))
        if mask is None:  # nothing padded: every row starts at position 0
            mask = torch.ones_like(x)  # (B, S+1)
            positions = torch.arange(x.size(1), device=x.device).expand_as(x)  # (B, S+1)
        steps = max(1, min(max_len, self.cfg.max_positions - x.size(1)))
        out = self.lm(input_ids=x, attention_mask=mask, position_ids=positions, use_cache=True,
                      logits_to_keep=1)  # fmt: skip
        ys, done = [], torch.zeros(x.size(0), dtype=torch.bool, device=x.device)
        for _ in range(steps):
            nxt = out.logits[:, -1].argmax(-1)  # (B,)
            ys.append(nxt)
            done |= nxt == Vocab.eos_id
            if bool(done.all()) or len(ys) == steps:
                break
            mask = torch.cat([mask, mask.new_ones(x.size(0), 1)], dim=1)  # (B, t+1)
            positions = positions[:, -1:] + 1  # (B, 1)
            out = self.lm(input_ids=nxt[:, None], attention_mask=mask, position_ids=positions,
                          cache=out.cache, use_cache=True)  # fmt: skip
        return torch.stack(ys, dim=1)  # (B, T)

    def forced(self, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, AttentionMaps]:
        """src (1, S) ending in <eos>, tgt_in (1, T) from <bos>, no padding -> (logits (1, T, V)
        at tgt_in, the encoder-decoder's three maps as blocks of one eager pass's causal
        attention: the source over itself, tgt_in over itself and tgt_in over the source)."""
        x = torch.cat([src, tgt_in], dim=1)  # (1, S+T)
        with attention_path(self.lm, "eager"):  # the path that returns weights
            out = self.lm(input_ids=x, output_attentions=True, use_cache=False,
                          logits_to_keep=tgt_in.size(1))  # fmt: skip
        weights = torch.stack(out.attentions)  # (L, 1, H, S+T, S+T)
        return out.logits, AttentionMaps(
            **blocks(weights, slice(0, src.size(1)), slice(src.size(1), None))
        )

    def patterns(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, N), no padding -> every layer's attention weights (L, B, H, N, N)."""
        with attention_path(self.lm, "eager"):  # the path that returns weights
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


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model a ModelConfig describes: the d2l Transformer, the DecoderTrainee (arch
    "decoder-only") or the EncoderTrainee (arch "encoder"); the one place that asks which."""
    from core.model.encoder_trainee import ENCODER, EncoderTrainee

    if cfg.arch == ENCODER:
        return EncoderTrainee(cfg)
    return DecoderTrainee(cfg) if cfg.arch == DECODER_ONLY else Transformer(cfg)
