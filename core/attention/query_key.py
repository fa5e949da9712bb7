"""Inside one head: its query and key vectors, their products, scores, mask and softmax.

bertviz's "neuron view" for the three kinds of an encoder-decoder, on any model. One head's
q and k are recomputed with the model's own projections (``TranslationModel.
attention_weights``) from what the attention read in a teacher-forced pass over the
translation (``core.model.record``): its queries' and keys' inputs, and the relative-position
bias a T5 adds. The weights are rebuilt step by step, scaled as the model scales (1/√d, or 1
for T5); a test checks they equal the model's own maps within 1e-5, masks included.

Shape key: Tq queries, Tk keys, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.attention.kinds import SEQUENCE, kind_labels
from core.model.interface import TranslationModel
from core.model.parts import Translation
from core.model.record import Record


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
            **self._decoder_only(),
        }

    def _decoder_only(self) -> dict:
        """A decoder-only model's extra fields: the scores before RoPE, the heads sharing
        this one's keys, the sliding window, the scores' soft cap (none for a model of two
        stacks)."""
        if self.kind != SEQUENCE:
            return {}
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


def translation_tokens(t: Translation, kind: str) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of a kind, the model's own pieces (as SentenceMaps)."""
    return {
        "encoder": (t.src_tokens, t.src_tokens),
        "decoder_self": (t.output_tokens, t.decoder_inputs),
        "cross": (t.output_tokens, t.src_tokens),
    }[kind]


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
    """The q·k view of one query of one head, for a translation fed back by teacher forcing."""
    kind_labels(kind)  # raises for an unknown kind
    queries, keys = translation_tokens(t, kind)
    if not 0 <= query < len(queries):
        raise InsideHeadError(
            f"Query {query} is outside this {kind} map: it has {len(queries)} query tokens "
            f"(0..{len(queries) - 1})."
        )
    try:
        m.check_layer(kind, layer)
    except ValueError as e:  # a layer outside the model
        raise InsideHeadError(str(e)) from e
    s = head_scores(m, m.forced(t.src_ids, t.out_ids), kind, layer, head)
    q = s.q[query]  # (Dh,)
    arrays = (q, s.k, q * s.k, s.scores[query], s.weights[query])  # products q ⊙ k: (Tk, Dh)
    vectors = [a.cpu().numpy().astype(np.float32) for a in arrays]
    return QueryKey(
        kind,
        layer,
        head,
        query,
        list(queries),
        list(keys),
        *vectors[:4],
        s.mask[query].cpu().numpy(),
        vectors[4],
        s.scale,
        None if s.bias is None else s.bias[query].cpu().numpy().astype(np.float32),
    )


def sequence_query_key(
    m: TranslationModel, t: Translation, layer: int, head: int, query: int
) -> QueryKey:
    """The q·k view of one query of one head of a decoder-only model, over the whole sequence
    it reads (prompt and output fed back): q and k rotated as the model rotates them, the
    scores before rotation beside them, the heads that share this one's keys."""
    try:
        s, tokens = m.sequence_heads(t.src_ids, t.out_ids, layer)
    except ValueError as e:  # a layer outside the model, or a model of two stacks
        raise InsideHeadError(str(e)) from e
    if not 0 <= head < s.q.size(0):
        raise InsideHeadError(
            f"Head {head}: this model has {s.q.size(0)} heads (0..{s.q.size(0) - 1})."
        )
    if not 0 <= query < len(tokens):
        raise InsideHeadError(
            f"Query {query} is outside the sequence: it has {len(tokens)} tokens "
            f"(0..{len(tokens) - 1})."
        )
    kv = s.kv_head(head)
    q, k = s.q[head, query].float(), s.k[kv].float()  # (Dh,), (N, Dh)
    bias = None if s.bias is None else s.bias[head, query].float()  # (N,) ALiBi's
    scores = k @ q * s.scale + (0.0 if bias is None else bias)  # (N,)
    if s.softcap:  # Gemma 2: c·tanh(s/c)
        scores = s.softcap * torch.tanh(scores / s.softcap)
    plain = s.k_plain[kv].float() @ s.q_plain[head, query].float() * s.scale  # (N,)
    mask = s.mask[query]  # (N,)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    weights = weights.masked_fill(~mask, 0.0)  # (N,)
    arrays = (q, k, q * k, scores, weights, plain)
    q_, k_, products, scores_, weights_, plain_ = (
        a.cpu().numpy().astype(np.float32) for a in arrays
    )
    return QueryKey(
        SEQUENCE, layer, head, query, tokens, tokens, q_, k_, products, scores_,
        mask.cpu().numpy(), weights_, s.scale,
        None if bias is None else bias.cpu().numpy().astype(np.float32),
        plain_ if s.rotary else None,
        s.sharing(head), s.window, s.softcap,
    )  # fmt: skip
