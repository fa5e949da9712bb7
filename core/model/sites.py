"""Every Hugging Face model's hook sites (``core.model.hooks``), installed by one installer from
its row of the table (``core.model.architectures``): where a family keeps its stacks, layers,
attentions and norms, and the permanent forward hooks that pass each activation through the
site's ``HookPoint``.

Each stack of the row is hooked by the same code: its token embeddings, each layer's input and
output, each attention's heads before W_o (``z``), and, for an encoder-decoder, its queries'
and keys' inputs, queries, keys and values per head (``q``, ``k``, ``v``), weights
(``pattern``), output (``out``), T5's position bias and the stream after the sub-layer
(``resid_post``, where the row says it is), each layer's feed-forward output (``mlp_out``), and
the stack's output. A one-stack model (decoder-only, masked) holds the source and the decoder
inputs in one sequence: its stream sites are named as an encoder-decoder's (``encoder.{i}.out``
at each row's source, ``decoder.{i}.out`` at the decoder inputs, ``encoder.embed`` and
``decoder.embed``) and cut from the sequence inside ``placing``, each layer's output over the
whole sequence is ``sequence.{i}.out``; its heads are ``decoder.{i}.self.z``, over the whole
sequence, and so are the sites TransformerLens's ``run_with_cache`` gives of each layer: what
the attention's projections read (``queries``, (B, N, D)), q (B, N, H, Dh), k and v (B, N, Hkv,
Dh: the key/value heads of grouped-query attention, not repeated) as projected (a fused
projection, GPT-2's ``c_attn``, BLOOM's and Falcon's ``query_key_value``, cut as the row's
layout says), ``rot_q`` and ``rot_k`` after the rotation of a rotary family (the family's own
``apply_rotary_pos_emb`` on the cos and sin the attention is given), the scores before the
softmax (``scores``, TransformerLens's ``hook_attn_scores``: scaled q·k, ALiBi's bias, Gemma
2's soft cap and the mask the attention is given, the dtype's most negative value where a key
is hidden, as the family's eager attention adds it, not −inf), the weights (``pattern``), W_o's
output (``out``), the stream between attention and feed-forward (``decoder.{i}.resid_mid``,
none in a parallel family), the feed-forward's input and what it adds to the stream
(``mlp_in``, ``mlp_out``: the row's ``mlp_out`` where that is not its last module, BLOOM's and
Gemma 2's), and a pre-LN family's norms' scales (``ln1.scale``, ``ln2.scale``, (B, N, 1): √(var
+ ε), or √(mean x² + ε) of an RMSNorm, from the norm's input and its own ε; the final norm's
``decoder.ln_final.scale`` at each of its calls: once in a pass from ids, again where
``hidden`` normalises the decoder inputs). Every layer of every stack keeps its call for this
thread's open ``LayerInputs`` (``core.model.layer_runs``: its layers run again from any one
on), a one-stack model's last layer its output for an open ``LastOutput``. The hooks are
installed once per model and do nothing (one integer test) unless a thread has hooks on.

Shape key: B batch, S source, T decoder inputs, N tokens, H heads, Dh head width, D model width.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import contextmanager

import torch
from torch import nn

from core.model import layer_runs
from core.model.architectures import ALIBI, ROPE, Architecture, architecture_of, part, softcap
from core.model.hf_folder import HFModelError
from core.model.hooks import HookPoint, any_on
from core.model.layer_runs import keeping
from core.model.record import SIDES, attention_site, sequence_site, side_of
from core.model.site_hooks import (
    POINTS,
    _attention_outputs,
    _fused_site,
    _input_site,
    _keep_unrotated,
    _norm_scale,
    _one_stack_attention,
    _output_site,
    _point,
    _queries_keys,
    _read_input,
    heads_site,
)

# ----------------------------------------------------------------------------- the parts


def stack(model: nn.Module, side: str | None = None) -> nn.Module:
    """The encoder or the decoder stack (``side``); a one-stack model's one stack."""
    return part(model, architecture_of(model).stack(side).path)


def layers_of(stack_module: nn.Module) -> Sequence[nn.Module]:
    """The layers of a stack (``layers``, T5's ``block``, GPT-2's ``h``)."""
    return part(stack_module, architecture_of(stack_module).layers)


def attention_of(layer: nn.Module, kind: str) -> nn.Module:
    """One layer's attention of ``kind`` (a one-stack model's one attention)."""
    return part(layer, architecture_of(layer).attention(kind).path)


def attention_modules(model: nn.Module, kind: str) -> list[nn.Module]:
    """The attention modules of one kind, one per layer."""
    return [attention_of(layer, kind) for layer in layers_of(stack(model, side_of(kind)))]


def projections(module: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear, nn.Linear]:
    """(W_q, W_k, W_v, W_o) of one attention module."""
    names = architecture_of(module).projections
    return tuple(part(module, name) for name in (names.q, names.k, names.v, names.o))


def head_geometry(module: nn.Module) -> tuple[int, int]:
    """(heads, head width) of one attention module."""
    arch = architecture_of(module)
    if arch.heads is None:
        raise HFModelError(f"The studio does not know the heads of a {type(module).__name__}.")
    heads, width = arch.heads
    return int(getattr(module, heads)), int(getattr(module, width))


def output_projection_of(layer: nn.Module, kind: str) -> nn.Module:
    """W_o of a layer's attention of ``kind`` (BERT's: ``attention.output.dense``, outside the
    attention module)."""
    arch = architecture_of(layer)
    outside = arch.attention(kind).output
    if outside:
        return part(layer, outside)
    if arch.projections.o is None:
        raise HFModelError(f"A {type(layer).__name__}'s attention holds no W_o.")
    return part(attention_of(layer, kind), arch.projections.o)


def final_norm(model: nn.Module) -> nn.Module | None:
    """The decoder's final norm of a pre-LN family (mBART / M2M100 / NLLB ``layer_norm``,
    T5's ``final_layer_norm``, a decoder-only model's ``norm`` / ``ln_f``); None for a post-LN
    one (Marian, BART, BERT)."""
    name = architecture_of(model).stack("decoder").final_norm
    return None if name is None else part(stack(model, "decoder"), name)


def sublayer_norm(layer: nn.Module, kind: str) -> nn.Module:
    """The norm of one layer's attention sub-layer of ``kind``."""
    return part(layer, architecture_of(layer).attention(kind).norm)


# ----------------------------------------------------------------------------- one sequence

_placed = threading.local()  # this thread's pass: (each row's source positions, the steps')


@contextmanager
def placing(sources: Sequence[slice], steps: slice):
    """Within the block, this thread's passes through a one-stack model give the stream sites
    in the interface's terms: ``encoder.{i}.out`` at each row's source positions (left-aligned,
    (B, S, D)), ``decoder.{i}.out`` at the decoder inputs' ((B, T, D))."""
    _placed.value = (list(sources), steps)
    try:
        yield
    finally:
        _placed.value = None


def _source_positions(sources: Sequence[slice], device) -> tuple[torch.Tensor, torch.Tensor]:
    """((B, S) each row's source positions, left-aligned (its last one repeated past its
    end), (B, S) True where the row has a source token): one gather for every row, as many
    rows as a batch of integration points holds, not a copy per row."""
    starts = torch.tensor([s.start for s in sources], device=device)  # (B,)
    lengths = torch.tensor([s.stop - s.start for s in sources], device=device)  # (B,)
    i = torch.arange(int(lengths.max()), device=device)  # (S,)
    last = (lengths - 1).clamp(min=0)[:, None]  # (B, 1)
    return starts[:, None] + torch.minimum(i, last), i < lengths[:, None]


def _gathered(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, S, D) of (B, N, D) at each row's (B, S) positions."""
    return x.gather(1, index[..., None].expand(-1, -1, x.size(-1)))


def _placed_back(sources: Sequence[slice], N: int, new: torch.Tensor):
    """((B, N, 1) True at each row's source positions, (B, N, D) ``new`` (B, S, D), each
    row's source first, moved to those positions): what ``torch.where`` puts in place."""
    starts = torch.tensor([s.start for s in sources], device=new.device)[:, None]  # (B, 1)
    stops = torch.tensor([s.stop for s in sources], device=new.device)[:, None]  # (B, 1)
    at = torch.arange(N, device=new.device)[None]  # (1, N)
    inside = (at >= starts) & (at < stops)  # (B, N)
    offset = (at - starts).clamp(0, max(new.size(1) - 1, 0))  # (B, N)
    return inside[..., None], _gathered(new, offset)


def _placed_sites(encoder_name: str, decoder_name: str):
    """A forward hook passing a module's output (B, N, D) at the source's and the decoder
    inputs' positions through the two sites (only inside ``placing``, only where this thread
    hooks them): a layer's output, or the token embeddings."""

    def hook(module, args, output):
        where = getattr(_placed, "value", None)
        if not any_on() or where is None:
            return None
        encoder, decoder = _point(module, encoder_name), _point(module, decoder_name)
        if not (encoder.on() or decoder.on()):
            return None
        x = output if isinstance(output, torch.Tensor) else output[0]  # (B, N, D)
        sources, steps = where
        y = x
        if encoder.on():
            index, real = _source_positions(sources, x.device)  # (B, S) each
            view = torch.where(real[..., None], _gathered(x, index), 0.0)  # (B, S, D)
            new = encoder(view)  # each row's source first, zeros after it
            if new is not view:
                inside, moved = _placed_back(sources, x.size(1), new)  # (B, N, 1), (B, N, D)
                y = torch.where(inside, moved.to(y.dtype), y)  # (B, N, D)
        if decoder.on():
            view = y[:, steps].clone()  # (B, T, D)
            new = decoder(view)
            if new is not view:
                y = y.clone() if y is x else y
                y[:, steps] = new
        if y is x:
            return None
        return y if isinstance(output, torch.Tensor) else (y, *output[1:])

    return hook


_kept = threading.local()  # this thread's LastOutput, while one is open


class LastOutput:
    """The last layer's output (before the final norm) of the pass this thread runs inside the
    block, through a one-stack model: ``output`` (B, N, D). A permanent hook on the last layer
    keeps it for the thread that asked; no hook is added or removed while other threads run
    the model."""

    def __init__(self, model: nn.Module):
        install(model)  # the permanent hooks, installed once
        self.output = None

    def __enter__(self) -> LastOutput:
        _kept.value = self
        return self

    def __exit__(self, *exc) -> None:
        _kept.value = None


def _keep_last(module, args, output) -> None:
    """The last layer's forward hook: its output, for this thread's open LastOutput."""
    kept = getattr(_kept, "value", None)
    if kept is not None:
        kept.output = output if isinstance(output, torch.Tensor) else output[0]


class LayerInputs(layer_runs.LayerInputs):
    """``layer_runs.LayerInputs`` of a Hugging Face model, its permanent hooks installed first:
    every layer's call of the passes this thread runs inside the block, so that its layers
    run again from any one on (``run``) with the layers below as they were."""

    def __init__(self, model: nn.Module):
        install(model)  # the permanent hooks, installed once
        super().__init__()


# ----------------------------------------------------------------------------- the installer


class _Installer:
    """Registers the permanent hooks of one model, stack by stack as its row says, and names
    their hook points; every hooked module holds the model's one dict of points (``POINTS``)."""

    def __init__(self, model: nn.Module, arch: Architecture):
        self.model, self.arch, self.points = model, arch, {}

    def hooked(self, module: nn.Module) -> nn.Module:
        """``module``, holding the points (the hooks find their sites through it)."""
        setattr(module, POINTS, self.points)
        return module

    def install(self) -> dict[str, HookPoint]:
        self.hooked(self.model)
        one_stack = len(self.arch.stacks) == 1  # the source and the decoder inputs in one
        for side in (None,) if one_stack else SIDES:
            self.stack(side)
        return self.points

    def add(self, name: str) -> str:
        """Create the hook point ``name``; its name."""
        self.points[name] = HookPoint(name.rsplit(".", 1)[-1], name)
        return name

    def stream(self, module: nn.Module, side: str | None, site: str) -> None:
        """The stream at a module's output: ``{side}.{site}``; a one-stack model's
        ``encoder.{site}`` and ``decoder.{site}``, cut from its one sequence (``placing``)."""
        module = self.hooked(module)
        if side is None:
            names = (self.add(f"{s}.{site}") for s in SIDES)
            module.register_forward_hook(_placed_sites(*names))
        else:
            module.register_forward_hook(_output_site(self.add(f"{side}.{site}")))

    def stack(self, side: str | None) -> None:
        row = self.arch.stack(side)
        module = self.hooked(part(self.model, row.path))
        self.stream(part(module, row.embed), side, "embed")
        layers = part(module, self.arch.layers)
        for i, layer in enumerate(layers):
            self.layer(self.hooked(layer), side, i)
        if side is None:
            layers[-1].register_forward_hook(_keep_last)
            if row.final_norm is not None:  # a pre-LN stack's last norm
                norm = self.hooked(part(module, row.final_norm))
                scale = self.add("decoder.ln_final.scale")
                rms = self.arch.norm_class == "RMSNorm"
                norm.register_forward_pre_hook(_norm_scale(scale, rms, self.arch.norm_eps))
        else:
            module.register_forward_hook(_output_site(self.add(f"{side}.out")))

    def layer(self, layer: nn.Module, side: str | None, i: int) -> None:
        if side is None:
            layer.register_forward_pre_hook(keeping(f"sequence.{i}"), with_kwargs=True)
            layer.register_forward_hook(_output_site(self.add(sequence_site(i))))
            self.heads(layer, "decoder_self", attention_site("decoder_self", i))
            self.one_stack_attention(layer, attention_site("decoder_self", i))
            self.one_stack_mlp(layer, f"decoder.{i}")
        else:
            layer.register_forward_pre_hook(
                _input_site(self.add(f"{side}.{i}.in")), with_kwargs=True
            )
            layer.register_forward_pre_hook(keeping(f"{side}.{i}"), with_kwargs=True)
            kinds = ("encoder",) if side == "encoder" else ("decoder_self", "cross")
            for kind in kinds:
                self.attention(layer, kind, attention_site(kind, i))
            self.mlp_out(layer, side, f"{side}.{i}.mlp_out")
        self.stream(layer, side, f"{i}.out")

    def heads(self, layer: nn.Module, kind: str, p: str) -> None:
        """Each head's output before W_o, ``p.z`` (B, N, H, Dh): what removing a head scales."""
        attention = attention_of(layer, kind)
        if self.arch.heads is None:
            heads = self.model.config.num_attention_heads  # GPT-2's config maps it to n_head
        else:
            heads, _ = head_geometry(attention)
        w_o = self.hooked(output_projection_of(layer, kind))
        w_o.register_forward_pre_hook(heads_site(self.add(f"{p}.z"), heads, before=True))

    def attention(self, layer: nn.Module, kind: str, p: str) -> None:
        """Every site of an encoder-decoder's attention sub-layer."""
        module = self.hooked(attention_of(layer, kind))
        for site in ("queries", "keys", "pattern", "out", "position_bias", "resid_post"):
            self.add(f"{p}.{site}")
        _, width = head_geometry(module)
        memory_key = self.arch.attention(kind).memory
        module.register_forward_pre_hook(_queries_keys(p, memory_key), with_kwargs=True)
        module.register_forward_hook(_attention_outputs(p), with_kwargs=True)
        for name, projection in zip("qkv", projections(module)[:3]):
            projection = self.hooked(projection)
            heads = projection.out_features // width
            projection.register_forward_hook(heads_site(self.add(f"{p}.{name}"), heads, False))
        self.heads(layer, kind, p)
        self.resid_post(layer, kind, f"{p}.resid_post")

    def mlp_out(self, layer: nn.Module, side: str | None, name: str) -> None:
        """What the feed-forward adds to the stream: ``name`` at the output of the row's
        ``mlp_out`` (or its last feed-forward module)."""
        row = self.arch.stack(side)
        module = self.hooked(part(layer, row.mlp_out or row.mlp[-1]))
        module.register_forward_hook(_output_site(self.add(name), apart=True))

    def one_stack_attention(self, layer: nn.Module, p: str) -> None:
        """A one-stack model's attention sites over its whole sequence, as TransformerLens's
        ``run_with_cache`` gives them: ``p.queries`` (B, N, D), what the projections read (the
        norm's output, pre-LN), ``p.q`` (B, N, H, Dh), ``p.k`` and ``p.v`` (B, N, Hkv,
        Dh: the key/value heads, not repeated per group) as projected, ``p.rot_q`` and
        ``p.rot_k`` after the rotation (a rotary family), ``p.scores`` (B, H, N, N, before
        the softmax: ``attention_scores``), ``p.pattern`` (B, H, N, N) and ``p.out`` (B, N,
        D), W_o's output."""
        config, arch = self.model.config, self.arch
        attention = self.hooked(attention_of(layer, "decoder_self"))
        heads, kv = config.num_attention_heads, arch.kv_heads_of(config)
        names = [self.add(f"{p}.{which}") for which in "qkv"]
        rotary = arch.positions == ROPE
        if rotary:
            self.add(f"{p}.rot_q"), self.add(f"{p}.rot_k")
        names_of = arch.projections
        if names_of.fused:
            fused = self.hooked(part(attention, names_of.fused))
            layout = (names_of.layout, heads, kv)
            fused.register_forward_hook(_fused_site(names, *layout))
            fused.register_forward_hook(_keep_unrotated(p, "qkv", layout))
        else:
            for name, which, n in zip(names, "qkv", (heads, kv, kv)):
                projection = self.hooked(part(attention, getattr(names_of, which)))
                projection.register_forward_hook(heads_site(name, n, before=False))
                if which != "v":
                    projection.register_forward_hook(_keep_unrotated(p, which, None, n))
        self.add(f"{p}.pattern"), self.add(f"{p}.scores")
        queries = _input_site(self.add(f"{p}.queries"))  # what q, k and v are made from
        attention.register_forward_pre_hook(queries, with_kwargs=True)
        cap = softcap(arch, config, "attn_logit")
        how = (arch.scale_of(attention), cap, arch.positions == ALIBI)
        hook = _one_stack_attention(p, rotary, how)
        attention.register_forward_hook(hook, with_kwargs=True)
        w_o = self.hooked(output_projection_of(layer, "decoder_self"))
        w_o.register_forward_hook(_output_site(self.add(f"{p}.out")))

    def one_stack_mlp(self, layer: nn.Module, s: str) -> None:
        """A one-stack model's stream between attention and feed-forward (``s.resid_mid``,
        none in a parallel family: no stream holds the input plus the attention alone), the
        feed-forward's input (``s.mlp_in``, what its first module reads: the norm's output in
        a pre-LN family) and what it adds to the stream (``s.mlp_out``), (B, N, D) each."""
        row = self.arch.stack()
        if "parallel" not in self.arch.quirks:
            self.resid_post(layer, "decoder_self", self.add(f"{s}.resid_mid"))
        first = self.hooked(part(layer, row.mlp[0]))
        first.register_forward_pre_hook(_read_input(self.add(f"{s}.mlp_in")))
        self.mlp_out(layer, None, f"{s}.mlp_out")
        if self.arch.norm != "pre":  # a post-LN norm divides a sum, not the stream
            return
        norms = {"ln1": row.self_attention.norm, "ln2": row.mlp_norm}
        if row.mlp_norm == row.self_attention.norm:  # parallel: one norm for both
            del norms["ln2"]
        rms = self.arch.norm_class == "RMSNorm"
        for name, path in norms.items():
            norm = self.hooked(part(layer, path))
            scale = self.add(f"{s}.{name}.scale")
            norm.register_forward_pre_hook(_norm_scale(scale, rms, self.arch.norm_eps))

    def resid_post(self, layer: nn.Module, kind: str, name: str) -> None:
        """The stream after an attention sub-layer, where the row says it is: a module's
        output (T5's sub-layer, a post-LN norm), or the input of the norm that comes next
        (pre-LN)."""
        where, path = self.arch.attention(kind).resid_post
        module = self.hooked(part(layer, path))
        if where == "output":
            module.register_forward_hook(_output_site(name))
        else:
            module.register_forward_pre_hook(_read_input(name))


def install(model: nn.Module, arch: Architecture | None = None) -> dict[str, HookPoint]:
    """The model's hook points by site name, its hooks installed from its row (``arch``, by
    default the model's own) on first use."""
    points = getattr(model, POINTS, None)
    if points is not None:
        return points
    arch = arch or architecture_of(model)
    if len(arch.stacks) > 1:
        enc, dec = (part(stack(model, side), arch.stack(side).embed) for side in SIDES)
        if enc is dec:
            raise HFModelError(
                "The encoder and the decoder share one embedding module: the studio cannot "
                "tell their embeddings apart."
            )
    return _Installer(model, arch).install()
