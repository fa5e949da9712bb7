"""The recorded pass: what the analysis layer reads of one teacher-forced pass, on any model.

A ``Record`` is assembled from the hook sites of one forward (``core.model.hooks``), like
TransformerLens's ``run_with_cache``: every attention's input, keys, weights and output, the
stream before and after each attention sub-layer, each layer's input and output, the
encoder's output and the logits. Every family gives the same sites
(``TranslationModel.record``), so the q·k view, the logit lens, rollout, the norm-based method,
ALTI+, value zeroing, the gradient methods, faithfulness, alignment, the projector and the
heads over training read one record and never a family's forward order. A one-stack model's
record (decoder-only, masked) has the same shape (``one_stack_record``): its three kinds are
the blocks of its one attention (the sentence's rows over the sentence, the decoder inputs'
over themselves and over the sentence), its two stacks' streams the sentence's and the decoder
inputs' rows, and it keeps the whole sequence too (``OneStack``: each layer's attention record
and output, where the source and the decoder inputs sit), which the methods that mix the whole
sequence read.

Shape key: B batch, S source tokens (with the end token), T decoder steps (inputs: the start
token + output[:-1]), D model width, H heads, V target vocabulary, L layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from core.model.parts import AttentionMaps, SequenceHeads, Translation

KINDS = ("encoder", "decoder_self", "cross")  # the attention kinds, in the model's order
WHOLE = "sequence"  # a one-stack model's one attention, over its whole sequence
SIDES = ("encoder", "decoder")  # the two stacks


def side_of(kind: str) -> str:
    """The stack an attention kind lives in: "encoder" or "decoder"."""
    return "encoder" if kind == "encoder" else "decoder"


def attention_site(kind: str, layer: int) -> str:
    """The hook-site prefix of one attention: "encoder.0.self", "decoder.1.cross"."""
    part = "cross" if kind == "cross" else "self"
    return f"{side_of(kind)}.{layer}.{part}"


def recorded_sites(encoder_layers: int, decoder_layers: int) -> list[str]:
    """Every site a record reads, for a model of these depths."""
    sites = ["encoder.out", "decoder.out"]
    for kind in KINDS:
        layers = encoder_layers if kind == "encoder" else decoder_layers
        for i in range(layers):
            p = attention_site(kind, i)
            parts = ("queries", "keys", "pattern", "out", "resid_post", "position_bias")
            sites += [f"{p}.{part}" for part in parts]
    for side, layers in zip(SIDES, (encoder_layers, decoder_layers)):
        sites += [f"{side}.{i}.{end}" for i in range(layers) for end in ("in", "out")]
    return sites


def whole_sequence(m, src_ids: Sequence[int], tgt_in: Sequence[int]) -> list[str] | None:
    """The N tokens of a one-stack model's whole sequence (the axis its attentions' and MLPs'
    hook sites span) for a source and decoder inputs; None for a model of two stacks, whose
    sites span the source (S) or the decoder inputs (T)."""
    if not m.one_sequence:
        return None
    out_ids = [*list(tgt_in)[1:], m.eos_id]  # what the decoder inputs are made of
    return m.source_tokens(m.sequence_ids(list(src_ids), out_ids))


@dataclass
class AttentionRecord:
    """One attention sub-layer of a pass: the stream around it and how it attended."""

    resid_pre: torch.Tensor  # (B, Tq, D) x: the stream before the sub-layer
    queries: torch.Tensor  # (B, Tq, D) what the queries are made from (LN(x) if pre-LN)
    keys: torch.Tensor  # (B, Tk, D) what keys and values are made from (the memory: cross)
    mask: torch.Tensor  # boolean, broadcastable to (B, 1, Tq, Tk); True = may attend
    weights: torch.Tensor  # (B, H, Tq, Tk)
    output: torch.Tensor  # (B, Tq, D) the attention's output, W_o's bias included
    resid_post: torch.Tensor  # (B, Tq, D) the stream after the sub-layer (its norm if post-LN)
    position_bias: torch.Tensor | None = None  # (B|1, H, Tq, Tk) added to q·k (T5)


def sequence_site(layer: int) -> str:
    """The hook site of one layer's output over a one-stack model's whole sequence."""
    return f"sequence.{layer}.out"


@dataclass
class OneStack:
    """A one-stack model's pass over its whole sequence (a prompt and the decoder inputs, or a
    sentence): each layer's one attention and output, and where the source and the decoder
    inputs sit in it, from which its sentence / output blocks are cut."""

    attention: list[AttentionRecord]  # one per layer, over the whole sequence: (B, N, ...)
    layer_outputs: list[torch.Tensor]  # L x (B, N, D): each layer's output
    source: slice  # the source's positions in the sequence (the first row's)
    steps: slice | list[int]  # the decoder inputs' positions (a masked LM's: its predicted)

    def cut(self, a: torch.Tensor) -> torch.Tensor:
        """(T, S + T) the decoder inputs' rows of an (N, N) matrix over the sequence, cut to
        the source's and the decoder inputs' columns (a prompt's own tokens left out). A
        decoder input that is a source position too (a masked LM's predicted positions, in its
        sentence) counts once, as the decoder input: its source column is 0."""
        rows = a[self.steps]  # (T, N)
        at = torch.arange(a.size(-1), device=a.device)  # (N,)
        steps = at[self.steps]  # (T,)
        source = rows[:, self.source] * ~torch.isin(at[self.source], steps)  # (T, S)
        return torch.cat([source, rows[:, self.steps]], dim=1)  # (T, S + T)

    def once(self, scores: torch.Tensor) -> torch.Tensor:
        """(T, S + T) scores over [source | decoder inputs] with a decoder input that is a
        source position too (a masked LM's mask) counted once, as the decoder input: its
        source column's score (a row that read its token there) added to its own column."""
        at = torch.arange(self.layer_outputs[0].size(1))  # (N,)
        source, steps = at[self.source], at[self.steps]  # (S,), (T,)
        S, out = len(source), scores.clone()
        for j, position in enumerate(steps.tolist()):
            if source[0] <= position <= source[-1]:
                column = position - int(source[0])
                out[:, S + j] += out[:, column]
                out[:, column] = 0
        return out


@dataclass
class Record:
    """One teacher-forced pass, batch first, as the analysis layer reads it."""

    src: torch.Tensor  # (B, S) source ids, the end token included
    tgt_in: torch.Tensor  # (B, T) decoder inputs: the start token + output[:-1]
    src_mask: torch.Tensor  # (B, 1, 1, S) True at real source tokens
    tgt_mask: torch.Tensor  # (B, 1, T, T) causal (and not padded, where the model masks pads)
    attention: dict[str, list[AttentionRecord]]  # kind (KINDS) -> one per layer
    layer_inputs: dict[str, list[torch.Tensor]]  # side (SIDES) -> L x (B, S|T, D)
    layer_outputs: dict[str, list[torch.Tensor]]  # side (SIDES) -> L x (B, S|T, D)
    memory: torch.Tensor  # (B, S, D) the encoder's output
    logits: torch.Tensor  # (B, T, V)
    out_ids: torch.Tensor | None = field(default=None)  # (B, T) the tokens predicted, if given
    one_stack: OneStack | None = field(default=None)  # a one-stack model's whole sequence

    @property
    def encoder_inputs(self) -> list[torch.Tensor]:
        """L x (B, S, D): the input of each encoder layer."""
        return self.layer_inputs["encoder"]

    @property
    def self_inputs(self) -> list[torch.Tensor]:
        """L x (B, T, D): the input of each decoder layer (its self-attention sub-layer)."""
        return self.layer_inputs["decoder"]

    @property
    def cross_inputs(self) -> list[torch.Tensor]:
        """L x (B, T, D): the input of each cross-attention sub-layer."""
        return [a.resid_pre for a in self.attention["cross"]]

    @property
    def decoder_outputs(self) -> list[torch.Tensor]:
        """L x (B, T, D): each decoder layer's output."""
        return self.layer_outputs["decoder"]

    def stream(self, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): the residual stream of one stack, each layer's input and the
        last layer's output (before the stack's final norm, if it has one)."""
        return [*self.layer_inputs[side], self.layer_outputs[side][-1]]

    @property
    def source_length(self) -> int:
        """S, the number of source tokens."""
        return self.src.size(1)

    @property
    def output_length(self) -> int:
        """T, the number of decoder steps."""
        return self.tgt_in.size(1)

    @property
    def logp(self) -> torch.Tensor:
        """(T,) the log-probability of each of the first sentence's ``out_ids``."""
        logp = self.logits[0].float().log_softmax(-1)  # (T, V)
        return logp.gather(-1, self.out_ids[0][:, None])[:, 0]

    def maps(self) -> AttentionMaps:
        """The weights of every kind, stacked: (L, B, H, Tq, Tk) each."""
        stacked = (torch.stack([a.weights for a in self.attention[k]]) for k in KINDS)
        return AttentionMaps(*stacked)


def _attention(cache: dict, kind: str, layer: int, mask: torch.Tensor) -> AttentionRecord:
    """One attention's record from the cached sites."""
    p = attention_site(kind, layer)
    side = side_of(kind)
    if kind == "cross":
        before = cache[f"decoder.{layer}.self.resid_post"]
    else:
        before = cache[f"{side}.{layer}.in"]
    queries = cache[f"{p}.queries"]
    return AttentionRecord(
        before,
        queries,
        cache.get(f"{p}.keys", queries),
        mask,
        cache[f"{p}.pattern"],
        cache[f"{p}.out"],
        cache[f"{p}.resid_post"],
        cache.get(f"{p}.position_bias"),
    )


def from_cache(
    cache: dict, src, tgt_in, masks: tuple, logits, layers: tuple[int, int], out_ids=None
) -> Record:
    """A Record of the sites one pass left in ``cache`` (``recorded_sites``); ``layers``:
    (encoder layers, decoder layers); ``masks``: (src_mask, tgt_mask)."""
    src_mask, tgt_mask = masks
    kind_mask = {"encoder": src_mask, "decoder_self": tgt_mask, "cross": src_mask}
    depth = dict(zip(SIDES, layers))
    attention = {
        kind: [_attention(cache, kind, i, kind_mask[kind]) for i in range(depth[side_of(kind)])]
        for kind in KINDS
    }
    ends = {
        end: {side: [cache[f"{side}.{i}.{end}"] for i in range(depth[side])] for side in SIDES}
        for end in ("in", "out")
    }
    memory = cache["encoder.out"]
    return Record(
        src, tgt_in, src_mask, tgt_mask, attention, ends["in"], ends["out"], memory, logits, out_ids
    )


def one_stack_of(cache: dict, stream: list[torch.Tensor], mask, source, steps) -> OneStack:
    """The whole-sequence record of a one-stack model's pass: each layer's attention from its
    ``decoder.{i}.self`` sites in ``cache`` (``queries``, ``pattern``, ``out``) and the stream
    around it (``decoder.{i}.resid_mid``; x + out where a parallel family has none), ``stream``
    L + 1 x (B, N, D) (each layer's input, then the last one's output), ``mask`` (B|1, 1, N, N)
    True where a query may attend."""
    attention = []
    for i, x in enumerate(stream[:-1]):
        p = attention_site("decoder_self", i)
        queries, out = cache[f"{p}.queries"], cache[f"{p}.out"]  # (B, N, D) each
        after = cache.get(f"decoder.{i}.resid_mid")
        after = x + out if after is None else after  # (B, N, D)
        attention.append(
            AttentionRecord(x, queries, queries, mask, cache[f"{p}.pattern"], out, after)
        )
    return OneStack(attention, stream[1:], source, steps)


def one_stack_sites(layers: int) -> list[str]:
    """The sites ``one_stack_of`` reads, for a one-stack model of this depth."""
    parts = ("queries", "pattern", "out")
    sites = [f"{attention_site('decoder_self', i)}.{part}" for i in range(layers) for part in parts]
    return sites + [f"decoder.{i}.resid_mid" for i in range(layers)]


def _rows(x: torch.Tensor, at: slice | list[int]) -> torch.Tensor:
    """(B, n, ...) the positions ``at`` of (B, N, ...)."""
    return x[:, at]


def _block(a: AttentionRecord, rows, cols) -> AttentionRecord:
    """One kind's block of a whole-sequence attention: the ``rows``' queries over the ``cols``'
    keys; the stream around it and its output are the whole attention's at those rows."""
    weights = a.weights[..., rows, :][..., cols]  # (B, H, Tq, Tk)
    mask = a.mask[..., rows, :][..., cols]  # (B|1, 1, Tq, Tk)
    q, k = _rows(a.queries, rows), _rows(a.keys, cols)  # (B, Tq, D), (B, Tk, D)
    before, out, after = (_rows(x, rows) for x in (a.resid_pre, a.output, a.resid_post))
    return AttentionRecord(before, q, k, mask, weights, out, after)  # (B, Tq, D) each of three


def one_stack_record(whole: OneStack, src, tgt_in, masks: tuple, logits, out_ids=None) -> Record:
    """A one-stack model's Record, the shape of a two-stack model's: each kind the block of its
    one attention ("encoder": the source's rows over the source, "decoder_self": the decoder
    inputs' over the decoder inputs, "cross": the decoder inputs' over the source), each side's
    layer inputs and outputs the source's / decoder inputs' rows of the stream, no memory, and
    ``one_stack`` the whole sequence; ``masks``: (src_mask, tgt_mask)."""
    places = {"encoder": whole.source, "decoder": whole.steps}
    blocks = {  # kind: (its queries' positions, its keys')
        "encoder": (whole.source, whole.source),
        "decoder_self": (whole.steps, whole.steps),
        "cross": (whole.steps, whole.source),
    }
    attention = {k: [_block(a, *blocks[k]) for a in whole.attention] for k in KINDS}
    inputs = {s: [_rows(a.resid_pre, at) for a in whole.attention] for s, at in places.items()}
    outputs = {s: [_rows(x, at) for x in whole.layer_outputs] for s, at in places.items()}
    memory = src.new_zeros(0)  # no encoder: the decoder inputs read the source in one stack
    sides = (attention, inputs, outputs, memory)
    return Record(src, tgt_in, *masks, *sides, logits, out_ids, one_stack=whole)


@dataclass
class LayerHeads:
    """Every head of one attention layer over a teacher-forced pass of a translation, and the
    tokens its queries and keys sit at: what the q·k view reads, on any model."""

    heads: SequenceHeads  # q and k of every head, the mask, the model's own weights
    kind: str  # the attention kind read, or WHOLE: a one-stack model's whole sequence
    query_tokens: list[str]  # Tq
    key_tokens: list[str]  # Tk
    first: int = 0  # the query a view starts at: the first output step (a prompt's last token)


def layer_heads(m, t: Translation, kind: str, layer: int) -> LayerHeads:
    """One layer's heads of ``kind`` over ``t`` fed back by teacher forcing (``m``: a
    ``core.model.interface.TranslationModel``): a model of two stacks's q and k made by its own
    projections (``attention_weights``) from what the attention read in its record, a T5's
    position bias beside them; a one-stack model's over the whole sequence it reads, whatever
    ``kind`` (its three kinds are blocks of that one attention), q and k rotated as it rotates
    them. ValueError in words for a layer it does not have."""
    if m.one_sequence:
        s, tokens = m.sequence_heads(t.src_ids, t.out_ids, layer)
        return LayerHeads(s, WHOLE, tokens, tokens, m.first_step(t.src_ids, t.out_ids))
    m.check_layer(kind, layer)
    w = m.attention_weights(kind, layer)
    a = m.forced(t.src_ids, t.out_ids).attention[kind][layer]
    with torch.no_grad():
        pairs = [
            w.head_queries_keys(a.queries[0].float(), a.keys[0].float(), h) for h in range(w.heads)
        ]
    q = torch.stack([q for q, _ in pairs])  # (H, Tq, Dh)
    k = torch.stack([k for _, k in pairs])  # (H, Tk, Dh): each query head's keys
    mask = a.mask.expand(1, 1, q.size(1), k.size(1))[0, 0]  # (Tq, Tk)
    bias = None if a.position_bias is None else a.position_bias[0].float()  # (H, Tq, Tk)
    heads = SequenceHeads(q, k, q, k, w.scale, mask, a.weights[0], False, bias=bias)
    queries, keys = {
        "encoder": (t.src_tokens, t.src_tokens),
        "decoder_self": (t.output_tokens, t.decoder_inputs),
        "cross": (t.output_tokens, t.src_tokens),
    }[kind]
    return LayerHeads(heads, kind, list(queries), list(keys))
