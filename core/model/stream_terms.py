"""One output step's residual stream taken apart into what wrote it, on every family: the
embeddings, each head, each attention's bias, each feed-forward sub-layer and each norm's bias,
carried to the logits through every norm with its scale frozen at the pass's value.

The model side of direct logit attribution (``core.attention.logit_attribution``), as
TransformerLens's ``decompose_resid`` / ``stack_head_results`` / ``apply_ln_to_stack``: a
norm whose scale σ is frozen is affine, ``(t - mean(t)) / σ · w`` (RMSNorm: no centring;
Gemma: ``1 + w``) plus its bias, so a sum of terms goes through it term by term and its bias
becomes a term of its own. A pre-LN stack meets one such norm on the way out (the final one);
a post-LN stack (the studio's d2l model, Marian, BART, BERT) meets the norm after every
sub-layer, and each term is carried through each later one: the same linearisation, at every
norm. What follows the last layer (``logits_of``: T5's rescaling, ``lm_head``,
``final_logits_bias``, a masked LM's dense, activation and LayerNorm) is taken the same way,
module by module as the pass calls them, an activation frozen as its gate ``f(x) / x``. The
terms sum to the model's own logits (tested per family to 1e-5).

What the stream passes through the model says (``stream_layout``: each sub-layer's norm, hook
site and output projection, the final norm, the output layer's modules); what each layer wrote
is read from its hook sites and its norms: a head's term is its ``z``
(``{p}.z``) through its slice of W_o, the attention's bias is W_o(0), and a feed-forward's
term is what the layer wrote beyond its attentions (pre-LN: the stream after the layer minus
before it; post-LN: the norm's input minus the stream it was added to). The norms' inputs and
outputs come from permanent forward hooks installed once per model that keep them for this
thread's open ``_Calls`` only.

Shape key: N tokens of the pass, D model width, H heads, Dh head width, V vocabulary, n terms.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from torch import nn

from core.model.hooks import capture
from core.model.interface import TranslationModel
from core.model.parts import StreamLayout, StreamSublayer, StreamTermsError


@dataclass
class Term:
    """One term of the stream: who wrote it and its vector, carried on to the logits."""

    kind: str  # "embed", "head", "attention bias", "mlp", "norm bias" or "output bias"
    layer: int | None  # None: the embeddings, the final norm, the output layer
    head: int | None = None
    attention: str | None = None  # "self" or "cross" (a head's, an attention bias's)
    sublayer: str | None = None  # a norm bias's sub-layer ("self", "cross", "mlp", "final")
    vector: torch.Tensor = field(default=None, repr=False)  # (D,) then (V,), float64

    def labels(self) -> dict:
        """The term's labels (JSON-able), without its vector."""
        return {
            "kind": self.kind,
            "layer": self.layer,
            "head": self.head,
            "attention": self.attention,
            "sublayer": self.sublayer,
        }


@dataclass
class StreamTerms:
    """The terms of one step's logits: each term's share of the ids asked, and the model's
    own logits there."""

    terms: list[Term]  # labels; vectors dropped
    values: torch.Tensor  # (n, K) each term's share of each logit asked, float64
    logits: torch.Tensor  # (K,) the model's own logits of the ids at this step (its forward)
    position: int  # where the step sits in the pass's sequence
    layers: int  # the stack's layers
    heads: int  # heads per attention


# ----------------------------------------------------------------------------- the hooks

_open = threading.local()  # this thread's open _Calls
_install_lock = threading.Lock()
KEPT = "_studio_keeps_calls"  # set on a module whose calls a _Calls may keep


def _keep(module, args, kwargs, output) -> None:
    """A forward hook: the module's input and output, for this thread's open _Calls."""
    calls = getattr(_open, "value", None)
    if calls is None:
        return
    x = args[0] if args else next(iter(kwargs.values()))
    y = output if isinstance(output, torch.Tensor) else output[0]
    calls.calls.append((module, x.detach(), y.detach()))


class _Calls:
    """Each kept module's calls (module, input, output) in this thread's passes inside the
    block, in order. The hooks are installed once per module and keep nothing for another
    thread."""

    def __init__(self, modules: list[nn.Module]):
        with _install_lock:
            for module in modules:
                if not getattr(module, KEPT, False):
                    module.register_forward_hook(_keep, with_kwargs=True)
                    setattr(module, KEPT, True)
        self.calls: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []

    def __enter__(self) -> _Calls:
        self.before = getattr(_open, "value", None)
        _open.value = self
        return self

    def __exit__(self, *exc) -> None:
        _open.value = self.before

    def of(self, module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, output) of a module's last call."""
        for kept, x, y in reversed(self.calls):
            if kept is module:
                return x, y
        raise StreamTermsError(f"The pass never ran its {type(module).__name__}.")


# ----------------------------------------------------------------------------- the step


def _position(m: TranslationModel, src_ids, out_ids, step: int, n: int) -> int:
    """Where output step ``step`` sits in a pass of ``n`` tokens: the step itself in a decoder
    of its own; the step among a prompted model's last positions; a masked model's mask."""
    if not m.one_sequence:
        return step
    if m.supports("decoding") is None:
        return n - len(out_ids) + step
    return m.positions(list(src_ids))[step]


# ----------------------------------------------------------------------------- frozen maps


def _tolerance(o: torch.Tensor) -> float:
    """How far a frozen map's reconstruction of ``o`` may be from it."""
    return 1e3 * torch.finfo(o.dtype).eps * (1.0 + float(o.abs().max()))


def frozen_norm(norm: nn.Module, y: torch.Tensor, o: torch.Tensor):
    """(linear map, bias) of a norm whose scale is frozen at its input ``y`` (D,) (its output
    ``o``): LayerNorm's centring or RMSNorm's none, its weight or Gemma's ``1 + w``, whichever
    gives back ``o``; StreamTermsError when none does."""
    weight = getattr(norm, "weight", None)
    bias = getattr(norm, "bias", None)
    eps = getattr(norm, "eps", None)
    eps = getattr(norm, "variance_epsilon", 1e-5) if eps is None else eps
    y, target = y.double(), o.double()
    w = torch.ones_like(y) if weight is None else weight.detach().double()
    b = torch.zeros_like(y) if bias is None else bias.detach().double()
    fits = []  # (how far from o, centred, σ, gain) of each reading of the norm
    for centre in (True, False):
        c = y - y.mean() if centre else y
        sigma = torch.sqrt(c.pow(2).mean() + eps)
        for gain in (w, 1.0 + w):
            fits.append((float((c / sigma * gain + b - target).abs().max()), centre, sigma, gain))
    off, centre, sigma, gain = min(fits, key=lambda f: f[0])  # the reading closest to o
    if off > _tolerance(o):
        raise StreamTermsError(
            f"Its {type(norm).__name__} is neither a LayerNorm nor an RMSNorm once its scale is "
            "frozen: the stream cannot be taken apart through it."
        )

    def linear(t: torch.Tensor) -> torch.Tensor:
        t = t - t.mean(-1, keepdim=True) if centre else t
        return t / sigma * gain

    return linear, b


def _through_module(module: nn.Module, x: torch.Tensor, y: torch.Tensor, t: torch.Tensor):
    """(terms (n, D_in) through ``module`` as frozen at the call x -> y, its bias or None)."""
    weight = getattr(module, "weight", None)
    with torch.no_grad():
        if weight is not None and weight.dim() == 2:  # a linear layer: W t, its bias apart
            zero = x.new_zeros(1, x.size(-1)).to(weight.dtype)  # (1, D_in)
            bias = module(zero)[0].double()  # (D_out,)
            return (module(t.to(weight.dtype)).double() - bias), bias
    if weight is not None:  # a norm
        linear, bias = frozen_norm(module, x, y)
        return linear(t), bias
    return t * _gate(x, y), None  # an activation (or dropout): its gate at the call


def _gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(D,) ``y / x`` elementwise: what an elementwise function multiplied its input by (0
    where the input is 0)."""
    x, y = x.double(), y.double()
    safe = torch.where(x == 0, torch.ones_like(x), x)
    return torch.where(x == 0, torch.zeros_like(x), y / safe)


# ----------------------------------------------------------------------------- taking apart


def _head_terms(sub: StreamSublayer, z: torch.Tensor, layer: int) -> list[Term]:
    """Each head's term z_h W_o^h (one head's slice of z alone through W_o, its bias left
    out) and the attention's bias W_o(0), of one position's z (H, Dh)."""
    H, Dh = z.shape
    alone = torch.zeros(H + 1, H * Dh, dtype=z.dtype, device=z.device)  # (H + 1, H Dh)
    for h in range(H):
        alone[h, h * Dh : (h + 1) * Dh] = z[h]
    with torch.no_grad():
        out = sub.w_o(alone).double()  # (H + 1, D): each head alone, then nothing (the bias)
    bias = out[H]
    terms = [Term("head", layer, h, sub.name, vector=out[h] - bias) for h in range(H)]  # (D,)
    if getattr(sub.w_o, "bias", None) is None:  # no bias (Llama, T5): no term for it
        return terms
    return [*terms, Term("attention bias", layer, None, sub.name, vector=bias)]


def _carry(terms: list[Term], norm: nn.Module, y, o, layer: int | None, name: str) -> None:
    """Every term through a norm frozen at its call (y -> o), its bias a new term."""
    linear, bias = frozen_norm(norm, y, o)
    for t in terms:
        t.vector = linear(t.vector)
    terms.append(Term("norm bias", layer, sublayer=name, vector=bias))


def _pre_ln(lay: StreamLayout, calls: _Calls, z: dict, p: int) -> list[Term]:
    """A pre-LN stack's terms (D,) at position p, before the final norm: each layer wrote the
    stream after it minus before it; the feed-forward, what its attentions did not."""
    streams = [calls.of(subs[0].norm)[0][0, p].double() for subs in lay.layers]  # L x (D,)
    streams.append(calls.of(lay.final_norm)[0][0, p].double())
    terms = [Term("embed", None, vector=streams[0])]
    for i, subs in enumerate(lay.layers):
        written = streams[i + 1] - streams[i]  # (D,)
        for sub in subs:
            if sub.site is None:
                continue
            heads = _head_terms(sub, z[f"{sub.site}.z"][0, p], i)
            written = written - sum(t.vector for t in heads)
            terms += heads
        terms.append(Term("mlp", i, vector=written))
    return terms


def _post_ln(lay: StreamLayout, calls: _Calls, z: dict, p: int) -> list[Term]:
    """A post-LN stack's terms (D,) at position p, each carried through every norm after it."""
    terms: list[Term] = []
    stream = None  # (D,) the stream a sub-layer adds to
    for i, subs in enumerate(lay.layers):
        for sub in subs:
            y, o = (a[0, p] for a in calls.of(sub.norm))  # (D,) the norm's input and output
            if sub.site is not None:
                heads = _head_terms(sub, z[f"{sub.site}.z"][0, p], i)
                if stream is None:  # the embeddings: what the first attention was added to
                    stream = y.double() - sum(t.vector for t in heads)
                    terms.append(Term("embed", None, vector=stream))
                terms += heads
            else:
                terms.append(Term("mlp", i, vector=y.double() - stream))
            _carry(terms, sub.norm, y, o, i, sub.name)
            stream = o.double()
    return terms


def _output(
    lay: StreamLayout, m: TranslationModel, hidden: torch.Tensor, terms: list[Term], ids: list[int]
) -> torch.Tensor:
    """(n, K) every term (D,) through what follows the last layer (``logits_of``), module by
    module as it runs them, each frozen at its call, onto the logits of ``ids``; the output
    layer's biases are appended to ``terms``. The last linear module is applied to the rows of
    ``ids`` only (a vocabulary of 10^5 words times every term would not fit)."""
    with _Calls(lay.head) as calls, torch.no_grad():
        logits = m.logits_of(hidden[None]).detach()[0]  # (V,)
    vectors = torch.stack([t.vector for t in terms])  # (n, D)
    before, narrowed = hidden, False
    for k, (module, x, y) in enumerate(calls.calls):
        x, y = x.reshape(-1, x.size(-1))[0], y.reshape(-1, y.size(-1))[0]
        if x.shape == before.shape and not torch.allclose(x, before, atol=_tolerance(x)):
            vectors = vectors * _gate(before, x)  # an elementwise step between modules
        last = k == len(calls.calls) - 1
        if last and isinstance(module, nn.Linear):  # (n, K): the rows of ids only
            weight = module.weight.detach()[ids].double()  # (K, D)
            vectors, narrowed = vectors @ weight.T, True
            bias = None if module.bias is None else module.bias.detach()[ids].double()
        else:
            vectors, bias = _through_module(module, x, y, vectors)
        if bias is not None and bias.abs().max() > 0:
            terms.append(Term("output bias", None, sublayer=type(module).__name__))
            vectors = torch.cat([vectors, bias[None]])
        before = y
    if not narrowed:
        vectors = vectors[:, ids]  # (n, K)
    extra = (logits.double() - before.double())[ids]  # what is added after the last module
    if extra.abs().max() > _tolerance(logits):
        terms.append(Term("output bias", None, sublayer="logits bias"))
        vectors = torch.cat([vectors, extra[None]])
    return vectors


def stream_terms(m: TranslationModel, src_ids, out_ids, step: int, ids: list[int]) -> StreamTerms:
    """Output step ``step`` of ``out_ids`` teacher-forced after ``src_ids``: every term's share
    of the logits of ``ids`` (K), summing to the model's own (``values.sum(0)`` ≈ ``logits``)."""
    lay = m.stream_layout()
    src, tgt_in, _ = m.forced_batch(src_ids, out_ids)
    norms = [s.norm for subs in lay.layers for s in subs]
    norms += [lay.final_norm] if lay.final_norm is not None else []
    z: dict = {}
    zs = [f"{s.site}.z" for subs in lay.layers for s in subs if s.site]
    hooks = m.hooks((name, capture(z)) for name in zs)
    with m.evaluating(), torch.no_grad(), _Calls(norms) as calls, hooks:
        logits = m.run(src, tgt_in)[0, step]  # (V,) the model's own
    p = _position(m, src_ids, out_ids, step, z[zs[0]].size(1))
    terms = (_pre_ln if lay.pre else _post_ln)(lay, calls, z, p)
    if lay.final_norm is not None:
        y, o = (a[0, p] for a in calls.of(lay.final_norm))
        _carry(terms, lay.final_norm, y, o, None, "final")
        hidden = o
    else:
        hidden = calls.of(lay.layers[-1][-1].norm)[1][0, p]
    with m.evaluating():
        values = _output(lay, m, hidden, terms, ids)  # (n, K)
    for t in terms:
        t.vector = None
    heads = z[zs[0]].size(2)
    return StreamTerms(terms, values, logits[ids].double(), p, len(lay.layers), heads)
