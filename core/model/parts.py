"""What the one interface (``core.model.interface``) hands out, whatever the family: a
translation with its maps, the settings it was decoded with and their defaults, a sentence as a
model reads it, a sentence pair in pieces, one attention's weights and the norm around it, what a
step's stream passes through, a one-sequence model's queries and keys over its whole sequence.

A ``Translation`` is built in one place, ``translation_of``, whatever the adapter: each output's
probability and rank (``scored``), the candidates of each step and the sum of log-probabilities
are computed there once. The decoding defaults and the bounds a page offers are written here
once (``ALPHA``, ``MAX_LEN``, ``TOP_K`` …, a prompt template's ``DEFAULT_TEMPLATE``), and eval
mode (``evaluating``): every adapter and every reader imports them from here, never from an
adapter.

Shape key: L layers, B batch, S source length, T output steps, D model width, H heads,
Dh head width, Tq queries, Tk keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

ALPHA = 0.6  # GNMT length-penalty exponent of beam search
MAX_LEN = 50  # longest output, in tokens
TOP_K = 5  # candidate words kept per output step
BEAM_SIZES = (1, 16)  # the beam sizes a page offers (1 = greedy): (least, most)
ALPHAS = (0.0, 2.0)  # the length penalties a page offers
MAX_LENS = (1, 200)  # the longest outputs a page offers
DEFAULT_TEMPLATE = "English: {src}\nFrench:"  # a prompted language model's prompt
DEFAULT_LANGUAGES = ("en", "fr")  # (source, target) that DEFAULT_TEMPLATE asks for
MAX_TEMPLATE_CHARS = 300  # a prompt template longer than this is refused

LANGUAGE_CODE = re.compile(  # how tokenizers write a language code: M2M100 __fr__, NLLB
    r"^(__[a-z]{2,3}(_[A-Za-z]+)?__|[a-z]{2,3}_[A-Z][a-z]{3}|>>[a-z_]{2,8}<<)$"
)  # fra_Latn, multi-target Marian >>fra<<


@dataclass
class Source:
    """A sentence as a model reads it."""

    ids: list[int]  # what the encoder reads, the end token (and any language code) included
    tokens: list[str]  # the same as shown tokens
    unknown: list[bool]  # True where the token is the unknown one
    notes: list[str]  # what the user should know (words cut, unknown words)


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode: greedy (beam_size 1) or beam search, and how much to keep."""

    beam_size: int = 1  # 1 = greedy
    alpha: float = ALPHA  # length penalty exponent (beam search only)
    max_len: int = MAX_LEN  # longest output, in tokens
    topk: int = TOP_K  # candidate words shown per output step
    target_lang: str = ""  # a multilingual model's target language code ("" = its default)
    prompt: str = ""  # a prompted language model's template ("" = DEFAULT_TEMPLATE)


GREEDY = DecodeSettings()  # the default: greedy decoding


def decode_problem(settings: DecodeSettings) -> str | None:
    """Why a page could not offer these decoding settings, in one line (the commands' flags
    refuse the same: ``--beam``, ``--alpha``, ``--max-len``); None when it could."""
    asked = (
        ("beam", settings.beam_size, BEAM_SIZES, int),
        ("alpha", settings.alpha, ALPHAS, float),
        ("max_len", settings.max_len, MAX_LENS, int),
    )
    for name, value, (least, most), kind in asked:
        number = isinstance(value, kind if kind is int else int | float)
        if isinstance(value, bool) or not number or not least <= value <= most:
            what = "a number" if kind is float else "a whole number"
            return f"{name} must be {what} from {least} to {most} (got {value!r})."
    return None


class TranslationError(ValueError):
    """A sentence cannot be translated; the message says why and what to do."""


@dataclass
class AttentionMaps:
    """Attention weights of one forward pass, stacked over layers."""

    encoder: torch.Tensor | None = None  # (L, B, H, S, S) encoder self-attention
    decoder_self: torch.Tensor | None = None  # (L, B, H, T, T) masked decoder self-attention
    cross: torch.Tensor | None = None  # (L, B, H, T, S) decoder -> encoder attention


@dataclass(kw_only=True)
class Translation:
    """One translated sentence with everything the app shows about it."""

    src_tokens: list[str]  # the source as the model saw it, with <eos>, unknown words kept
    src_unknown: list[bool]  # True where the word is not in the vocabulary (fed as <unk>)
    tokens: list[str]  # output tokens (words, or BPE pieces), without <bos>/<eos>
    output_tokens: list[str]  # what each decoder step produced: tokens + [<eos>] if reached
    decoder_inputs: list[str]  # what each decoder step read: [<bos>] + tokens
    topk: list[list[tuple[str, float]]]  # per step, the k most likely next words and probs
    log_prob: float  # sum of log-probabilities of output_tokens
    attention: AttentionMaps  # batch dim removed: (L, H, S, S), (L, H, T, T), (L, H, T, S)
    warnings: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # the output as words (pieces joined)
    src_ids: list[int] = field(default_factory=list)  # the ids the encoder read (<eos> included)
    out_ids: list[int] = field(default_factory=list)  # the ids of output_tokens
    token_probs: list[float] = field(default_factory=list)  # p of each of output_tokens
    ranks: list[int] = field(default_factory=list)  # each one's rank at its step (1 = the top)
    forced: bool = False  # a target the user gave, teacher-forced: not the model's own output

    @property
    def text(self) -> str:
        """The translation as one string of words."""
        return " ".join(self.words)


def source_len(words: list[str], tokenizer: str, max_positions: int) -> int:
    """The most source tokens (with <eos>) a model reads for these words: words, or at most
    one subword piece per character (``core.model.decode.prepare_source`` cuts the rest)."""
    n = len(words) if tokenizer == "word" else sum(len(w) for w in words)
    return min(n, max_positions - 1) + 1


def scored(logp: torch.Tensor, out_ids: Sequence[int]) -> tuple[list[float], list[int]]:
    """(T, V) log-probs and the T tokens taken -> each token's log-probability and its rank
    among all V at its step (1: the model's own first choice; ties share the better rank)."""
    taken = logp.gather(-1, torch.tensor(list(out_ids), device=logp.device)[:, None])  # (T, 1)
    ranks = 1 + (logp > taken).sum(-1)  # (T,)
    return taken[:, 0].tolist(), ranks.tolist()


def translation_of(
    *,
    source: Source,
    out_ids: Sequence[int],
    logp: torch.Tensor,
    maps: AttentionMaps,
    outputs: list[str],
    ended: bool,
    decoder_inputs: list[str],
    words: list[str],
    candidates: Callable[[list[int]], list[str]],
    topk: int,
    notes: Sequence[str] = (),
    forced: bool = False,
) -> Translation:
    """The one way a ``Translation`` is built, for every family: ``out_ids`` after ``source``.

    Args:
        logp: (T, V) log-probabilities at each output step, of which ``out_ids`` (T) were taken.
        maps: (L, H, ., .) each, the batch dimension removed.
        outputs: each output as shown (T); ``ended``: whether the last is the end token,
            which the output tokens leave out.
        decoder_inputs: what each step read, as shown (T).
        candidates: ids -> their tokens as shown among a step's candidates.
        notes: what the user should know besides the source's own notes.
    """
    logps, ranks = scored(logp, out_ids)
    p, i = logp.exp().topk(min(topk, logp.size(-1)), dim=-1)  # (T, k)
    return Translation(
        src_tokens=source.tokens,
        src_unknown=source.unknown,
        tokens=outputs[:-1] if ended else outputs,
        output_tokens=outputs,
        decoder_inputs=decoder_inputs,
        topk=[list(zip(candidates(ids.tolist()), ps.tolist())) for ps, ids in zip(p, i)],
        log_prob=float(sum(logps)),  # in double, as the studio's figures were computed
        attention=maps,
        warnings=[*source.notes, *notes],
        words=words,
        src_ids=list(source.ids),
        out_ids=list(out_ids),
        token_probs=[math.exp(x) for x in logps],
        ranks=ranks,
        forced=forced,
    )


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode inside the block (dropout off); its mode restored after, always."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@dataclass
class WordPair:
    """A sentence pair in pieces, each piece knowing its word."""

    src_ids: list[int]  # what the encoder reads (specials included)
    out_ids: list[int]  # the decoder's outputs: specials first, the pieces, the end token
    src_words: list[int]  # the word index of each source piece
    tgt_words: list[int]  # the word index of each target piece
    src_start: int  # where the source pieces start in src_ids (after leading specials)
    tgt_start: int  # where the target pieces start in out_ids

    def source_columns(self) -> slice:
        """The source pieces and the end token after them."""
        return slice(self.src_start, self.src_start + len(self.src_words) + 1)

    def target_rows(self) -> slice:
        """The steps that write the target pieces, then the end token."""
        return slice(self.tgt_start, self.tgt_start + len(self.tgt_words) + 1)


@dataclass
class AttentionWeights:
    """One attention module's projections, per head: what q, k, v and W_o are made of."""

    W_q: torch.Tensor  # (H * Dh, D) as nn.Linear holds it
    b_q: torch.Tensor  # (H * Dh,) zeros where the module has no bias
    W_k: torch.Tensor  # (H_kv * Dh, D)
    b_k: torch.Tensor
    W_v: torch.Tensor  # (H_kv * Dh, D)
    b_v: torch.Tensor
    W_o: torch.Tensor  # (D, H * Dh)
    b_o: torch.Tensor  # (D,)
    heads: int  # H
    head_width: int  # Dh
    scale: float  # what q·k is multiplied by: 1/sqrt(Dh), or 1 (T5)

    def head_values(self, u: torch.Tensor) -> torch.Tensor:
        """f^h(u_j) = (u_j W_V^h + b_V^h) W_O^h for each head: u (Tk, D) -> (H, Tk, D); a
        key/value head serves its group of query heads (grouped-query attention)."""
        H, Dh = self.heads, self.head_width
        kv = self.W_v.size(0) // Dh  # H_kv
        v = (u @ self.W_v.T + self.b_v).view(-1, kv, Dh).transpose(0, 1)  # (H_kv, Tk, Dh)
        v = v.repeat_interleave(H // kv, dim=0)  # (H, Tk, Dh): each query head's
        w_o = self.W_o.view(self.W_o.size(0), H, Dh).permute(1, 2, 0)  # (H, Dh, D)
        return v @ w_o  # (H, Tk, D)

    def head_queries_keys(self, queries: torch.Tensor, keys: torch.Tensor, head: int):
        """One head's queries (Tq, Dh) and keys (Tk, Dh) from the inputs (Tq, D), (Tk, D)."""
        Dh = self.head_width
        cut = slice(head * Dh, (head + 1) * Dh)
        g = self.heads // (self.W_k.size(0) // Dh)  # query heads per key/value head
        kv = slice(head // g * Dh, (head // g + 1) * Dh)
        q = queries @ self.W_q[cut].T + self.b_q[cut]  # (Tq, Dh)
        k = keys @ self.W_k[kv].T + self.b_k[kv]  # (Tk, Dh)
        return q, k


@dataclass
class SublayerNorm:
    """The norm around one attention sub-layer."""

    pre: bool  # pre-LN: y = x + attention(norm(x)); post-LN: y = norm(x + attention(x))
    norm: nn.Module  # the norm module (a LayerNorm, or T5's RMSNorm where pre)


class StreamTermsError(ValueError):
    """The stream cannot be taken apart this way (a norm or an output layer that is not affine
    once its scale is frozen, or a model that does not say its layout); the message says why,
    in one line."""


@dataclass(frozen=True)
class StreamSublayer:
    """One sub-layer of a layer on the stream."""

    name: str  # "self", "cross" (attention) or "mlp" (the feed-forward)
    norm: nn.Module  # its norm: before it (pre-LN) or on the sum after it (post-LN)
    site: str | None = None  # an attention's hook-site prefix ("decoder.0.self")
    w_o: nn.Module | None = None  # an attention's output projection


@dataclass(frozen=True)
class StreamLayout:
    """What one output step's stream passes through, layer by layer (the decoder's, or a
    one-stack model's one stack): what ``core.model.stream_terms`` takes apart."""

    layers: list[list[StreamSublayer]]
    pre: bool  # a norm before each sub-layer (True) or on the sum after it (post-LN)
    final_norm: nn.Module | None  # the norm after the last layer (pre-LN)
    head: list[nn.Module]  # the modules ``logits_of`` calls, in any order


def linear_parts(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of a linear layer, zeros for a missing bias."""
    bias = linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)
    return linear.weight, bias


@dataclass
class SequenceHeads:
    """One layer of a decoder-only model over a whole sequence: q and k of every head, before
    and after the rotary embedding, the mask, and the model's own weights."""

    q: torch.Tensor  # (H, N, Dh) queries as the scores use them (rotated where RoPE)
    k: torch.Tensor  # (Hkv, N, Dh) keys as the scores use them
    q_plain: torch.Tensor  # (H, N, Dh) queries before any rotation
    k_plain: torch.Tensor  # (Hkv, N, Dh) keys before any rotation
    scale: float  # what q·k is multiplied by
    mask: torch.Tensor  # (N, N) boolean, True = may attend
    weights: torch.Tensor  # (H, N, N) the model's own attention weights (output_attentions)
    rotary: bool  # whether q and k are rotated by position (RoPE)
    window: int | None = None  # a sliding window: the keys a query sees at most
    bias: torch.Tensor | None = None  # (H, N, N) added to the scaled q·k for position (ALiBi)
    softcap: float | None = None  # scores soft-capped, c·tanh(s/c) (Gemma 2)

    @property
    def group(self) -> int:
        """Query heads per key/value head (1: every head its own keys)."""
        return self.q.size(0) // self.k.size(0)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads."""
        return head // self.group

    def sharing(self, head: int) -> list[int]:
        """The query heads that read the same keys as ``head`` (itself included)."""
        g = self.group
        return list(range(self.kv_head(head) * g, (self.kv_head(head) + 1) * g))
