"""Inside one head: its query and key vectors, their products, scores, mask and softmax.

bertviz's "neuron view" for the three kinds of an encoder-decoder, on any model: one
``query_key_view`` reads one layer's heads as every family gives them
(``core.model.record.layer_heads``). A model of two stacks's q and k are recomputed with its
own projections from what the attention read in a teacher-forced pass over the translation
(its record), with the relative-position bias a T5 adds; a one-stack model's span the whole
sequence it reads, rotated as it rotates them (RoPE), with ALiBi's bias, a sliding window,
a soft cap and the heads that share keys. The weights are rebuilt step by step, scaled as the
model scales (1/√d, or 1 for T5); tests check they equal the model's own maps, masks included.

Shape key: Tq queries, Tk keys, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.attention.kinds import kind_labels
from core.model.interface import TranslationModel
from core.model.parts import Translation
from core.model.record import Record, layer_heads


class InsideHeadError(ValueError):
    """A layer, head or token outside this model or translation; the message says which."""


@dataclass
class HeadScores:
    """One head of one layer over every query: q, k, scaled scores, mask and weights."""

    q: torch.Tensor  # (Tq, Dh) queries
    k: torch.Tensor  # (Tk, Dh) keys
    scores: torch.Tensor  # (Tq, Tk) q·k / sqrt(Dh) (+ a position bias), before the mask
    mask: torch.Tensor  # (Tq, Tk) boolean, True = may attend
    weights: torch.Tensor  # (Tq, Tk) softmax over the allowed keys, exactly 0 where masked
    scale: float = 0.0  # what q·k is multiplied by (0: 1/sqrt(Dh))
    bias: torch.Tensor | None = None  # (Tq, Tk) a relative-position bias added (T5)


@dataclass
class QueryKey:
    """One query of one head, taken apart: what the q·k view draws."""

    kind: str  # "encoder", "decoder_self" or "cross"
    layer: int
    head: int
    query: int  # the query's position among query_tokens
    query_tokens: list[str]  # Tq tokens of the queries (rows of the head's map)
    key_tokens: list[str]  # Tk tokens of the keys
    q: np.ndarray  # (Dh,) the query vector
    keys: np.ndarray  # (Tk, Dh) every key vector
    products: np.ndarray  # (Tk, Dh) q ⊙ k_j: each row sums to q·k_j
    scores: np.ndarray  # (Tk,) q·k_j / sqrt(Dh), before the mask
    mask: np.ndarray  # (Tk,) True where the query may attend to key j
    weights: np.ndarray  # (Tk,) the softmax over the allowed keys, 0 where masked
    scale: float = 0.0  # what q·k is multiplied by (0: 1/sqrt(Dh), the paper's)
    bias: np.ndarray | None = None  # (Tk,) a position bias added to q·k (T5, ALiBi)
    unrotated: np.ndarray | None = None  # (Tk,) scores of q and k before RoPE rotates them
    sharing: list[int] | None = None  # query heads reading the same key/value head (GQA)
    window: int | None = None  # a sliding window: the keys a query sees at most
    softcap: float | None = None  # the scores soft-capped, c·tanh(s/c) (Gemma 2)
    first: int = 0  # the query a view starts at: the first output step (a prompt's last token)

    @property
    def head_width(self) -> int:
        """Dh, the head's width: the scores are divided by its square root."""
        return int(self.q.shape[0])

    @property
    def score_words(self) -> str:
        """How a score is made, e.g. 'q·k / √64' or 'q·k + position bias (no 1/√d)'."""
        plain = not self.scale or abs(self.scale - self.head_width**-0.5) < 1e-9
        words = (
            f"q·k / √{self.head_width}"
            if plain
            else ("q·k (no 1/√d)" if self.scale == 1.0 else f"q·k × {self.scale:.3g}")
        )
        words += " + position bias" if self.bias is not None else ""
        if self.softcap:
            words = f"{self.softcap:g}·tanh(({words}) / {self.softcap:g})"
        return words + (" (q, k rotated: RoPE)" if self.unrotated is not None else "")

    def to_json(self) -> dict:
        """Plain lists, for ``python -m core.inside_head``."""
        rounded = {
            name: np.round(getattr(self, name).astype(np.float64), 6).tolist()
            for name in ("q", "keys", "scores", "weights")
        }
        return {
            "kind": self.kind,
            "layer": self.layer,
            "head": self.head,
            "query": self.query,
            "query_token": self.query_tokens[self.query],
            "key_tokens": self.key_tokens,
            "head_width": self.head_width,
            "mask": self.mask.tolist(),
            "score": self.score_words,
            "bias": None if self.bias is None else np.round(self.bias, 6).tolist(),
            **rounded,
            **self._position_fields(),
        }

    def _position_fields(self) -> dict:
        """What else shaped the scores: the scores before RoPE, the heads sharing this one's
        keys, the sliding window, the scores' soft cap (None where the model has none)."""
        unrotated = self.unrotated
        unrotated = (
            None if unrotated is None else np.round(unrotated.astype(np.float64), 6).tolist()
        )
        return {
            "unrotated_scores": unrotated,
            "sharing_keys": self.sharing,
            "window": self.window,
            "softcap": self.softcap,
        }


def head_scores(m: TranslationModel, p: Record, kind: str, layer: int, head: int) -> HeadScores:
    """One head's q, k, scores, mask and weights for every query of a recorded pass."""
    try:
        weights = m.attention_weights(kind, layer)
    except ValueError as e:  # a layer outside the model
        raise InsideHeadError(str(e)) from e
    if not 0 <= head < weights.heads:
        raise InsideHeadError(
            f"Head {head}: this model has {weights.heads} heads per layer (0..{weights.heads - 1})."
        )
    a = p.attention[kind][layer]
    with torch.no_grad():
        q, k = weights.head_queries_keys(a.queries[0].float(), a.keys[0].float(), head)
    bias = None if a.position_bias is None else a.position_bias[0, head].float()  # (Tq, Tk)
    scores = q @ k.transpose(-2, -1) * weights.scale  # (Tq, Tk)
    if bias is not None:
        scores = scores + bias
    mask = a.mask.expand(1, 1, q.size(0), k.size(0))[0, 0]  # (Tq, Tk)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (Tq, Tk)
    w = filled.softmax(dim=-1).masked_fill(~mask, 0.0)  # (Tq, Tk)
    return HeadScores(q, k, scores, mask, w, weights.scale, bias)


def query_key_view(
    m: TranslationModel, t: Translation, kind: str, layer: int, head: int, query: int
) -> QueryKey:
    """The q·k view of one query of one head, for a translation fed back by teacher forcing,
    on any model (``core.model.record.layer_heads``): a one-stack model's over the whole
    sequence it reads (prompt and output, or its sentence), q and k rotated as the model
    rotates them, the scores before rotation beside them, the heads sharing its keys."""
    kind_labels(kind)  # raises for an unknown kind
    try:
        view = layer_heads(m, t, kind, layer)
    except ValueError as e:  # a layer outside the model
        raise InsideHeadError(str(e)) from e
    s, queries, keys = view.heads, view.query_tokens, view.key_tokens
    if not 0 <= head < s.q.size(0):
        raise InsideHeadError(
            f"Head {head}: this model has {s.q.size(0)} heads per layer (0..{s.q.size(0) - 1})."
        )
    if not 0 <= query < len(queries):
        raise InsideHeadError(
            f"Query {query} is outside this {view.kind} map: it has {len(queries)} query "
            f"tokens (0..{len(queries) - 1})."
        )
    kv = s.kv_head(head)
    q, k = s.q[head, query].float(), s.k[kv].float()  # (Dh,), (Tk, Dh)
    bias = None if s.bias is None else s.bias[head, query].float()  # (Tk,) T5's, ALiBi's
    scores = k @ q * s.scale + (0.0 if bias is None else bias)  # (Tk,)
    if s.softcap:  # Gemma 2: c·tanh(s/c)
        scores = s.softcap * torch.tanh(scores / s.softcap)
    plain = s.k_plain[kv].float() @ s.q_plain[head, query].float() * s.scale  # (Tk,)
    mask = s.mask[query]  # (Tk,)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    weights = weights.masked_fill(~mask, 0.0)  # (Tk,)
    arrays = (q, k, q * k, scores, weights, plain)
    q_, k_, products, scores_, weights_, plain_ = (
        a.cpu().numpy().astype(np.float32) for a in arrays
    )
    return QueryKey(
        view.kind, layer, head, query, list(queries), list(keys), q_, k_, products,
        scores_, mask.cpu().numpy(), weights_, s.scale,
        None if bias is None else bias.cpu().numpy().astype(np.float32),
        plain_ if s.rotary else None,
        s.sharing(head), s.window, s.softcap, view.first,
    )  # fmt: skip
