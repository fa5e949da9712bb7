"""The logit lens of the decoder: what each decoder layer would output if it were the last.

For every output step, each decoder layer's output (the output of its last AddNorm, after
the FFN) is passed through the model's output layer, ``decoder.dense``; with a pre-LN
model (``norm_first``) through ``decoder.final_ln`` first, as the model does after its last
layer. d2l's AddNorm is post-LN, so each layer's output is already layer-normed and nothing
else is applied (nostalgebraist 2020 projects the unnormed residual stream of a pre-LN
model through the final norm: the same thing here). The last layer's lens is the model's
own output distribution (tested). The translation is fed back by teacher forcing, so step t
reads the tokens the model itself wrote before it.

Shape key: L decoder layers, T output steps, V target vocabulary, K top words kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from core.model import hf_inside
from core.model import hugging_face as hf
from core.model.checkpoints import LoadedModel
from core.model.decode import Translation
from core.model.opened import is_hugging_face
from core.model.record import teacher_forced
from core.model.transformer import Transformer

TOP_K = 5  # words kept per layer and step
LENS_COLORS = ("prob", "rank")  # what a lens chart's colour shows: the chosen word's prob or rank
PROJECTED = (
    "each decoder layer's output (after its last AddNorm) through the output layer (decoder.dense)"
)
PROJECTED_PRE_LN = (
    "each decoder layer's output (after its last residual sum) through the final layer "
    "norm (decoder.final_ln), then the output layer (decoder.dense)"
)


@dataclass
class LogitLens:
    """Per decoder layer and output step: the top words and the chosen word's rank."""

    output_tokens: list[str]  # T words the model chose (what each step produced)
    decoder_inputs: list[str]  # T words each step read: <bos> + output[:-1]
    top_words: list[list[list[str]]]  # (L, T, K) most likely words, best first
    top_probs: np.ndarray  # (L, T, K) their probabilities
    chosen_rank: np.ndarray  # (L, T) rank of the chosen word among all V words (0 = top)
    chosen_prob: np.ndarray  # (L, T) probability of the chosen word
    projected: str  # what was projected, in words

    @property
    def layers(self) -> int:
        """L, the number of decoder layers."""
        return int(self.chosen_rank.shape[0])

    def rows(self) -> list[dict]:
        """One JSON-able row per output step, every layer's top words and the chosen rank."""
        return [
            {
                "step": t,
                "reads": self.decoder_inputs[t],
                "chosen": word,
                "layers": [
                    {
                        "layer": layer,
                        "top": [
                            [w, round(float(p), 6)]
                            for w, p in zip(self.top_words[layer][t], self.top_probs[layer, t])
                        ],
                        "chosen_rank": int(self.chosen_rank[layer, t]),
                        "chosen_prob": round(float(self.chosen_prob[layer, t]), 6),
                    }
                    for layer in range(self.layers)
                ],
            }
            for t, word in enumerate(self.output_tokens)
        ]


def projected_words(model: Transformer) -> str:
    """What the lens projects, in words (pre-LN models go through the final layer norm)."""
    return PROJECTED_PRE_LN if model.cfg.norm_first else PROJECTED


@torch.no_grad()
def lens_log_probs(model: Transformer, outputs: list[torch.Tensor]) -> torch.Tensor:
    """L x (1, T, D) decoder layer outputs -> (L, T, V) log-probabilities of the next word."""
    dec = model.decoder
    stacked = torch.cat(outputs)  # (L, T, D)
    return dec.dense(dec.final_ln(stacked)).float().log_softmax(-1)  # (L, T, V)


def _hf_lens(hm, t: Translation) -> tuple[torch.Tensor, Callable, str]:
    """A Hugging Face model's lens: (L, T, V) log-probs, ids -> tokens, what it projects."""
    device = next(hm.model.parameters()).device
    src = torch.tensor([t.src_ids], device=device)  # (1, S)
    start = hm.model.config.decoder_start_token_id
    dec = torch.tensor([[start, *t.out_ids[:-1]]], device=device)  # (1, T)
    outputs, _ = hf_inside.decoder_layer_outputs(hm, src, dec)
    words = hf_inside.lens_projection(hm.model)
    return hf_inside.lens_log_probs(hm, outputs), lambda ids: hf.shown_tokens(hm, ids), words


def logit_lens(lm: LoadedModel, t: Translation, k: int = TOP_K) -> LogitLens:
    """The lens of a translation: top ``k`` words and the chosen word's rank, per layer × step
    (a Hugging Face model's through its own final norm and lm_head)."""
    if is_hugging_face(lm):
        logp, decode, projected = _hf_lens(lm, t)
    else:
        p = teacher_forced(lm.model, t.src_ids, t.out_ids)
        logp = lens_log_probs(lm.model, p.decoder_outputs)  # (L, T, V)
        decode, projected = lm.tgt_vocab.decode, projected_words(lm.model)
    chosen = torch.tensor(t.out_ids, device=logp.device)  # (T,)
    chosen_logp = logp.gather(-1, chosen.expand(logp.size(0), -1)[..., None])  # (L, T, 1)
    rank = (logp > chosen_logp).sum(-1)  # (L, T)
    top_logp, top_ids = logp.topk(min(k, logp.size(-1)), dim=-1)  # (L, T, K)
    words = [[decode(row.tolist()) for row in layer] for layer in top_ids]
    return LogitLens(
        list(t.output_tokens),
        list(t.decoder_inputs),
        words,
        top_logp.exp().cpu().numpy().astype(np.float32),
        rank.cpu().numpy(),
        chosen_logp[..., 0].exp().cpu().numpy().astype(np.float32),
        projected,
    )
