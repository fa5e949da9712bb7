"""The logit lens of the decoder: what each decoder layer would output if it were the last.

For every output step, each decoder layer's output (after the FFN sub-layer) is passed
through what the model applies after its last layer (``TranslationModel.lens``): the final
norm of a pre-LN model, then the output layer (a Hugging Face model's ``lm_head``, T5's
rescaling, ``final_logits_bias``). d2l's AddNorm is post-LN, so each layer's output is already
layer-normed and nothing else is applied (nostalgebraist 2020 projects the unnormed residual
stream of a pre-LN model through the final norm: the same thing here). The last layer's lens
is the model's own output distribution (tested). The translation is fed back by teacher
forcing, so step t reads the tokens the model itself wrote before it. A model that writes no
output step by step (a masked language model, ``supports("decoding")``) has one stack and one
pass: each row is then a predicted position (a mask token), each layer's lens its guess there.

Shape key: L decoder layers, T output steps, V target vocabulary, K top words kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.model.interface import TranslationModel
from core.model.parts import Translation

TOP_K = 5  # words kept per layer and step
LENS_COLORS = ("prob", "rank")  # what a lens chart's colour shows: the chosen word's prob or rank


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
    decodes: bool = True  # rows are output steps of a decoder (False: a masked LM's positions)

    @property
    def stack_words(self) -> str:
        """What a column is: "decoder layer", or "layer" of a model of one stack."""
        return "decoder layer" if self.decodes else "layer"

    @property
    def row_words(self) -> str:
        """What a row is: "output step", or a masked LM's "masked position"."""
        return "output step" if self.decodes else "masked position"

    @property
    def layers(self) -> int:
        """L, the number of decoder layers."""
        return int(self.chosen_rank.shape[0])

    def settled(self) -> list[int | None]:
        """Per output step, the first layer from which on the chosen word is every layer's top
        word (None: not even the last layer's, e.g. an end token a model was made to write)."""
        top = self.chosen_rank == 0  # (L, T)
        return [
            next((i for i in range(self.layers) if top[i:, t].all()), None)
            for t in range(len(self.output_tokens))
        ]

    def early(self) -> int:
        """How many chosen words are the top word from a layer before the last on."""
        return sum(s is not None and s < self.layers - 1 for s in self.settled())

    def summary(self) -> dict:
        """What the page's caption states: what was projected, the steps, and how many chosen
        words are the top word from a layer before the last on."""
        return {
            "projected": self.projected,
            "steps": len(self.output_tokens),
            "early": self.early(),
        }

    def rows(self) -> list[dict]:
        """One JSON-able row per output step: every layer's top words and the chosen word's rank,
        the layer the chosen word settles at (``settled``) and the caption's ``summary``."""
        settled, summary = self.settled(), self.summary()
        return [
            {
                "step": t,
                "reads": self.decoder_inputs[t],
                "chosen": word,
                "settled": settled[t],
                "summary": summary,
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


@torch.no_grad()
def lens_log_probs(m: TranslationModel, outputs: list[torch.Tensor]) -> torch.Tensor:
    """L x (1, T, D) decoder layer outputs -> (L, T, V) log-probabilities of the next word,
    through what the model applies after its last layer (``TranslationModel.lens``)."""
    return m.lens(torch.cat(outputs)).float().log_softmax(-1)  # (L, T, V)


def logit_lens(m: TranslationModel, t: Translation, k: int = TOP_K) -> LogitLens:
    """The lens of a translation: top ``k`` words and the chosen word's rank, per layer × step
    (through the model's own final norm and output layer)."""
    src = torch.tensor([t.src_ids], device=m.device)  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(t.out_ids)], device=m.device)  # (1, T)
    with m.evaluating(), torch.no_grad():
        outputs = m.stream(src, tgt_in, "decoder")[1:]  # L x (1, T, D): each layer's output
    logp = lens_log_probs(m, outputs)  # (L, T, V)
    chosen = torch.tensor(t.out_ids, device=logp.device)  # (T,)
    chosen_logp = logp.gather(-1, chosen.expand(logp.size(0), -1)[..., None])  # (L, T, 1)
    rank = (logp > chosen_logp).sum(-1)  # (L, T)
    top_logp, top_ids = logp.topk(min(k, logp.size(-1)), dim=-1)  # (L, T, K)
    words = [[m.target_tokens(row.tolist()) for row in layer] for layer in top_ids]
    return LogitLens(
        list(t.output_tokens),
        list(t.decoder_inputs),
        words,
        top_logp.exp().cpu().numpy().astype(np.float32),
        rank.cpu().numpy(),
        chosen_logp[..., 0].exp().cpu().numpy().astype(np.float32),
        m.lens_words(),
        m.supports("decoding") is None,
    )
